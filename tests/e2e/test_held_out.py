"""Held-out accuracy while training (the recipe's held_out section), through the real CLI on a tiny model.

A tiny model learns the demo's sums by SFT while scoring the demo's held-out items; then GRPO with
LoRA and a learning rate far too high is made to regress from it, and the held_out_regression flag
must fire and stop the run. What a user relies on: the scores are `posttrain eval`'s scores, they
reach metrics.jsonl, the report and the run card, the best model is kept, and scoring changes
nothing about what trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SFT = ["train", "--recipe", "recipes/demo/sft.yaml", "training.max_steps=60", "training.logging_steps=5"]
SYSTEM = "Sum in <answer> </answer> tags."  # the demo's system prompt


def _trained_sums(root: Path) -> Path:
    """40 of the sums the demo's SFT and GRPO data train on, as eval items. These tests check the machinery on
    items the model learns within a minute; the demo's own held-out sums are ones no stage trains on."""
    repo = Path(__file__).resolve().parents[2]
    rows = [json.loads(line) for line in (repo / "recipes" / "demo" / "data" / "grpo.jsonl").read_text().splitlines()][:40]
    path = root / "trained-sums.jsonl"
    path.write_text("".join(json.dumps({"id": r["question"].replace(" ", ""), "answer": int(r["answer"]), "prompt": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": r["question"]}]}) + "\n" for r in rows))
    return path


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _held_out(run: Path) -> list[dict]:
    return [r for r in _records(run) if "held_out/strict" in r]


def _ok(result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cli):
    root = tmp_path_factory.mktemp("held-out")
    scored = _ok(cli(*SFT, f"training.output_dir={root / 'sft'}",
                     f"held_out={{task: custom, data: {_trained_sums(root)}, n: 40, every: 30, max_new_tokens: 8, pass_k: 2}}"))
    (root / "sft.log").write_text(scored.stdout + scored.stderr)
    _ok(cli(*SFT, f"training.output_dir={root / 'plain'}"))
    return root


def test_scores_are_logged_at_step_0_every_n_steps_and_the_last(runs):
    evaluations = _held_out(runs / "sft")
    assert [r["step"] for r in evaluations] == [0, 30, 60]
    for r in evaluations:
        assert r["held_out/n"] == 40 and 0 <= r["held_out/strict"] <= r["held_out/loose"] <= 1 and r["time/held_out_s"] > 0
        assert 0 <= r["held_out/pass@2_strict"] <= r["held_out/pass@2_loose"] <= 1
    # the training clock: 0 before the first step, then rising, and short of the run's wall time by the evaluations' own
    clock = [r["time/train_s"] for r in evaluations]
    assert clock[0] < 1 and clock[0] < clock[1] < clock[2]
    summary = json.loads((runs / "sft" / "run_summary.json").read_text())
    assert clock[2] + sum(r["time/held_out_s"] for r in evaluations[:2]) < summary["wall_seconds"]
    assert "held_out/loose_p" not in evaluations[0]  # step 0 is the baseline
    assert evaluations[-1]["held_out/loose"] > evaluations[0]["held_out/loose"]  # SFT taught the sums
    last = evaluations[-1]
    assert last["held_out/loose_fixed"] > last["held_out/loose_broken"] and last["held_out/loose_p"] < 0.05
    log = (runs / "sft.log").read_text()
    assert "held-out step 0:" in log and "held-out step 60:" in log and "held-out best: step 60" in log
    # the per-item answers, one file per evaluation, as `posttrain eval` writes them
    answers = [json.loads(line) for line in (runs / "sft" / "held_out" / "step-60.jsonl").read_text().splitlines()]
    assert len(answers) == 40 and sum(a["loose"] for a in answers) / 40 == pytest.approx(last["held_out/loose"])


def test_the_last_score_is_what_posttrain_eval_gives_the_saved_model(runs, cli):
    out = runs / "eval"
    _ok(cli("eval", "--model", str(runs / "sft"), "--task", "custom", "--data", str(runs / "trained-sums.jsonl"), "--n", "40", "--max-new-tokens", "8",
            "--no-progress", "--out", str(out)))
    evaluated = {r["id"]: r for r in map(json.loads, (out / "samples.jsonl").read_text().splitlines())}
    scored = {r["id"]: r for r in map(json.loads, (runs / "sft" / "held_out" / "step-60.jsonl").read_text().splitlines())}
    assert evaluated.keys() == scored.keys()
    assert [evaluated[i]["completion"] for i in scored] == [scored[i]["completion"] for i in scored]


def test_under_bf16_autocast_the_scores_are_still_what_posttrain_eval_gives(runs, cli):
    """Training under bf16 autocast (the CPUs with avx512_bf16 or AMX run it by default) must not leak into held-out
    scoring: every evaluation, step 0's included, runs the float32 forward that `posttrain eval` runs on the saved model."""
    from posttrain.models.loading import cpu_bf16_flag

    out = runs / "bf16"
    ran = cli(*SFT, "training.max_steps=20", "training.bf16=true", f"training.output_dir={out}",
              f"held_out={{task: custom, data: {runs / 'trained-sums.jsonl'}, n: 40, every: 20, max_new_tokens: 8}}")
    if cpu_bf16_flag() is None:  # an AVX2 CPU: no autocast path to check, bf16 is refused before anything runs
        assert ran.returncode == 2 and "training.bf16" in ran.stdout + ran.stderr
        return
    _ok(ran)
    for step, model in ((0, "tiny:qwen2-1m"), (20, str(out))):
        evaluated = runs / f"bf16-eval-{step}"
        _ok(cli("eval", "--model", model, "--task", "custom", "--data", str(runs / "trained-sums.jsonl"), "--n", "40",
                "--max-new-tokens", "8", "--no-progress", "--out", str(evaluated)))
        by_eval = {r["id"]: r["completion"] for r in map(json.loads, (evaluated / "samples.jsonl").read_text().splitlines())}
        scored = {r["id"]: r["completion"] for r in map(json.loads, (out / "held_out" / f"step-{step}.jsonl").read_text().splitlines())}
        assert scored == by_eval, step


def test_scoring_changes_nothing_about_what_trains(runs):
    losses = lambda run: [(r["step"], r["loss"]) for r in _records(run) if "loss" in r]
    assert losses(runs / "sft") == losses(runs / "plain") and len(losses(runs / "plain")) == 12


def test_scoring_changes_nothing_about_what_grpo_trains(runs, cli):
    """GRPO samples its rollouts from the global generator: held-out scoring (greedy, and pass@k on a forked
    generator) between its steps must leave every sampled completion, reward and loss as they were."""
    grpo = ["train", "--recipe", "recipes/demo/grpo.yaml", f"model.base_model_name={runs / 'sft'}", "training.max_steps=4",
            "training.per_device_train_batch_size=16", "training.stop_on=[]"]
    _ok(cli(*grpo, f"training.output_dir={runs / 'grpo-scored'}",
            f"held_out={{task: custom, data: {runs / 'trained-sums.jsonl'}, n: 20, every: 2, max_new_tokens: 8, pass_k: 2}}"))
    _ok(cli(*grpo, f"training.output_dir={runs / 'grpo-plain'}", "held_out=null"))
    trained = lambda run: [{k: v for k, v in r.items() if not k.startswith(("time/", "speed/")) and k != "step_time"}
                           for r in _records(run) if "loss" in r]
    assert len(_held_out(runs / "grpo-scored")) == 3 and not _held_out(runs / "grpo-plain")
    assert trained(runs / "grpo-scored") == trained(runs / "grpo-plain") and len(trained(runs / "grpo-plain")) == 4


def test_summary_report_card_and_best_model(runs, cli):
    summary = json.loads((runs / "sft" / "run_summary.json").read_text())
    held = summary["held_out"]
    assert [s["step"] for s in held["scores"]] == [0, 30, 60] and held["items"] == 40
    assert held["best"]["step"] == 60 and held["best"]["metric"] == "strict"
    assert summary["speed"]["held_out_s_total"] == pytest.approx(sum(s["seconds"] for s in held["scores"]), abs=0.01)
    best = runs / "sft" / "best"
    assert json.loads((best / "held_out.json").read_text())["step"] == 60 and (best / "model.safetensors").is_file()
    card = (runs / "sft" / "README.md").read_text()
    assert "## Held-out accuracy" in card and "| 60 |" in card
    report = _ok(cli("report", str(runs / "sft"), "--out", str(runs / "report.md"))).stdout
    assert "## held-out accuracy: sft (40 items, greedy)" in report and "| 30 |" in report
    # time to accuracy: each evaluation at its place on the training clock, read from the record, not estimated
    step_30 = next(r for r in _held_out(runs / "sft") if r["step"] == 30)
    assert f"| 30 | {step_30['time/train_s'] / 60:.1f} | " in report and "are estimated" not in report
    assert "held-out scoring (s, all)" in report


def test_a_run_made_to_regress_raises_the_flag_and_stops(runs, cli):
    """GRPO with LoRA from the SFT model at a learning rate far too high: held-out accuracy collapses, the flag
    names the step, and training.stop_on ends the run there with a checkpoint."""
    out = runs / "regress"
    result = _ok(cli("train", "--recipe", "recipes/demo/grpo.yaml", f"model.base_model_name={runs / 'sft'}", "model.use_lora=true",
                     f"training.output_dir={out}", "training.learning_rate=0.05", "training.max_steps=12",
                     "training.per_device_train_batch_size=16", "training.save_strategy=steps", "training.save_steps=100",
                     "training.stop_on=[held_out_regression]",
                     f"held_out={{task: custom, data: {runs / 'trained-sums.jsonl'}, n: 40, every: 2, max_new_tokens: 8}}"))
    summary = json.loads((out / "run_summary.json").read_text()) if (out / "run_summary.json").is_file() else None
    bound = 0.05 / (2 * 6)  # alpha spent over 2 metrics x 6 planned evaluations (steps 2, 4, ..., 12)
    evaluations = _held_out(out)
    assert all(r["held_out/looks"] == 6 for r in evaluations)
    flagged = [r for r in evaluations if any(r.get(f"held_out/{m}_p", 1) < bound and r[f"held_out/{m}_broken"] > r[f"held_out/{m}_fixed"]
                                             for m in ("strict", "loose"))]
    assert flagged, evaluations
    step = flagged[0]["step"]
    assert f"health: held_out_regression (step {step}): held-out" in result.stdout
    assert f"stopping at step {step} (training.stop_on: held_out_regression)" in result.stdout
    assert (out / f"checkpoint-{step}" / "adapter_model.safetensors").is_file()
    assert summary is None or summary["stopped_by"] == "held_out_regression"
    best = json.loads((out / "best" / "held_out.json").read_text())
    assert best["step"] < step and (out / "best" / "adapter_model.safetensors").is_file()  # the adapter, not a full model


def test_a_continued_run_keeps_comparing_with_its_own_step_0(runs, cli):
    """A larger max_steps continues a finished run from its checkpoint: step 0's answers stay the baseline, no
    evaluation is repeated, and the best model saved before the checkpoint stays unless a later step beats it."""
    out = runs / "continued"
    base = [*SFT[:3], f"training.output_dir={out}", "training.save_strategy=steps", "training.save_steps=20", "training.logging_steps=10",
            f"held_out={{task: custom, data: {runs / 'trained-sums.jsonl'}, n: 40, every: 10, max_new_tokens: 8}}"]
    _ok(cli(*base, "training.max_steps=20"))
    first = _held_out(out)
    _ok(cli(*base, "training.max_steps=40"))
    evaluations = _held_out(out)
    assert [r["step"] for r in evaluations] == [0, 10, 20, 30, 40] and evaluations[:3] == first
    start = {r["id"]: r["loose"] for r in map(json.loads, (out / "held_out" / "step-0.jsonl").read_text().splitlines())}
    last = {r["id"]: r["loose"] for r in map(json.loads, (out / "held_out" / "step-40.jsonl").read_text().splitlines())}
    assert evaluations[-1]["held_out/loose_fixed"] == sum(last[i] and not start[i] for i in start)
    assert evaluations[-1]["held_out/loose_broken"] == sum(start[i] and not last[i] for i in start)
    summary = json.loads((out / "run_summary.json").read_text())["held_out"]
    assert [s["step"] for s in summary["scores"]] == [0, 10, 20, 30, 40]
    best = json.loads((out / "best" / "held_out.json").read_text())
    ranked = max(evaluations, key=lambda r: (r["held_out/strict"], r["held_out/loose"], -r["step"]))
    assert best["step"] == ranked["step"]


def test_the_plateau_rule_stops_the_run_and_keeps_the_best_model(runs, cli):
    """held_out.patience 2: the same collapsing GRPO run stops at the second evaluation in a row that beats no earlier
    one (best by strict, then loose, as keep_best ranks), with best/ holding the plateau's model."""
    out = runs / "plateau"
    result = _ok(cli("train", "--recipe", "recipes/demo/grpo.yaml", f"model.base_model_name={runs / 'sft'}", "model.use_lora=true",
                     f"training.output_dir={out}", "training.learning_rate=0.05", "training.max_steps=12",
                     "training.per_device_train_batch_size=16",
                     f"held_out={{task: custom, data: {runs / 'trained-sums.jsonl'}, n: 40, every: 2, max_new_tokens: 8, patience: 2}}"))
    evaluations = _held_out(out)
    best, since, stop = None, 0, None
    for r in evaluations:  # the rule, replayed on the logged scores
        rank = (r["held_out/strict"], r["held_out/loose"])
        since = 0 if best is None or rank > best[0] else since + 1
        best = (rank, r["step"]) if since == 0 else best
        if since == 2:
            stop = r["step"]
            break
    assert stop is not None and stop < 12, evaluations  # the run collapses, so the rule must fire before max_steps
    assert evaluations[-1]["step"] == stop
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == stop
    assert summary["held_out"]["stopped"] == {"step": stop, "best_step": best[1], "evaluations": 2}
    assert json.loads((out / "best" / "held_out.json").read_text())["step"] == best[1]
    assert f"stopping at step {stop}, best/ holds step {best[1]}'s model" in result.stdout + result.stderr
