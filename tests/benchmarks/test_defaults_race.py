"""benchmarks/defaults_race.py runs at toy size: three real contestants (posttrain's CLI, a plain TRL
script, FAI-RL's defaults in a plain TRL script) train on the same data, consume the same real
tokens, and the table and JSON say so. Timings are not checked: they are the benchmark's job."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


TOY = ["benchmarks/defaults_race.py", "--toy", "--repeats", "1", "--algorithm", "sft"]


def test_defaults_race_toy_sft(repo, tiny_dir, tmp_path):
    out = tmp_path / "race.json"
    cmd = [sys.executable, *TOY, "--out", str(out)]
    result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    check_toy_report(result.stdout, json.loads(out.read_text()))


def check_toy_report(stdout: str, report: dict) -> None:
    """What a toy race must show (also usable on the output of the TOY command run by hand)."""
    assert "| contestant | real tokens | tokens/s |" in stdout
    assert "posttrain / TRL:" in stdout and "posttrain / FAI-RL:" in stdout
    assert report["toy"] is True and report["repeats"] == 1 and report["model"] == "tiny:qwen2-1m"
    assert report["machine"]["cores"] >= 1 and report["versions"]["trl"] and report["date"]
    assert report["machine"]["native_bf16"] in (None, "avx512_bf16", "amx_bf16")  # which CPU kind the numbers are from
    assert report["matmul_peak"]["flops"] > 0
    sft = report["results"]["sft"]
    contestants = sft["contestants"]
    assert set(contestants) == {"posttrain", "trl", "fairl"}
    tokens = {name: c["real_tokens"] for name, c in contestants.items()}
    # one pass over the same rows: every contestant's own count of non-padding tokens agrees
    assert min(tokens.values()) > 0 and max(tokens.values()) <= 1.01 * min(tokens.values()), tokens
    for name, c in contestants.items():
        assert c["real_tokens_per_s"] > 0 and c["wall_s"] > 0 and c["peak_tree_rss_mb"] > 100, (name, c)
        assert len(c["eval_curve"]) >= 2, (name, c["eval_curve"])  # checkpoints + final model, scored
        assert 0 < c["eval_loss"] < 10
    # FAI-RL's batch 1 x accumulation 16 takes fewer optimizer steps than TRL's batch 8 on 16 rows
    assert contestants["fairl"]["steps"] < contestants["trl"]["steps"]
    assert sft["common_eval_loss"] == max(c["eval_loss"] for c in contestants.values())
    for peer in ("trl", "fairl"):
        assert sft[f"posttrain_vs_{peer}"]["real_tokens_per_s"] > 0
    assert 0 < sft["posttrain_fraction_of_matmul_peak"] < 1


# one finished contestant's summary row, as race() aggregates it
ROW = {"real_tokens": 1000, "real_tokens_per_s": 12.5, "steps": 5, "wall_s": 100.0, "eval_loss": 1.2, "wall_to_common_eval_loss_s": 90.0,
       "peak_tree_rss_mb": 900, "main_peak_rss_mb": 800, "cpu_s": 90.0, "train_runtime_s": 80.0, "timed_out": False}


def test_a_contestant_past_the_limit_is_a_bound_and_the_race_goes_on(repo):
    """A run past --timeout is stopped (its whole process tree), reported as '> LIMIT', and posttrain's
    ratios against it are lower bounds; the race does not stop."""
    sys.path.insert(0, str(repo / "benchmarks"))
    import defaults_race as race

    stopped = race.run_one([sys.executable, "-c", "import subprocess, sys, time; "
                            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"],
                           dict(os.environ), timeout=3)
    assert stopped["timed_out"] and stopped["wall_s"] == 3
    row = race.summarise("sft", "trl", stopped, repo)
    assert row["timed_out"] and row["real_tokens_per_s"] is None
    posttrain = {"wall_s": 100.0, "train_runtime_s": 80.0, "timed_out": False}
    bounds = race.lower_bounds("sft", posttrain, 900)
    assert bounds["bound"] == "lower" and bounds["real_tokens_per_s"] == pytest.approx((900 - 20) / 80)
    assert race.lower_bounds("grpo", posttrain, 900)["prompts_per_s"] == pytest.approx(11.0)
    c = dict(ROW)
    results = {"sft": {"train_rows": 40, "contestants": {"posttrain": c, "trl": {**row, "wall_s": 900.0}, "fairl": c},
                       "posttrain_vs_trl": race.lower_bounds("sft", {**c, "train_runtime_s": 80.0}, 900),
                       "posttrain_vs_fairl": {k: 1.0 for k in ("real_tokens_per_s", "wall_s", "cpu_s", "peak_tree_rss_mb",
                                                               "wall_to_common_eval_loss_s")}}}
    text = race.table(results)
    assert "| TRL defaults | - | - | - | > 900 (stopped) |" in text
    assert "posttrain / TRL (stopped at the limit: bounds): tokens/s >= 11.00x, wall <= 0.11x" in text


def test_a_variant_of_posttrain_is_its_own_row_with_its_own_ratios(repo, tmp_path):
    """--lora-probe races posttrain again with TRL's LoRA targets (--padded: with padded batches; --dropout-probe: LoRA dropout 0): its recipe adapts q_proj and v_proj
    only, its row and its ratios against TRL and posttrain appear; without --real it is refused."""
    sys.path.insert(0, str(repo / "benchmarks"))
    import defaults_race as race

    with pytest.raises(SystemExit) as stop:
        race.main(["--lora-probe", "--toy"])
    assert stop.value.code == 2
    recipe = race.posttrain_recipe("sft", tmp_path, tmp_path / "d.jsonl", tmp_path / "out", lora=True, variant=race.PROBE)
    assert "  use_lora: true\n  lora_target_modules: [q_proj, v_proj]\n" in recipe
    assert "  use_lora: true\n  lora_dropout: 0.0\n" in race.posttrain_recipe("sft", tmp_path, tmp_path / "d.jsonl", tmp_path / "o", lora=True,
                                                                              variant=race.NODROP)
    with pytest.raises(SystemExit):
        race.main(["--dropout-probe", "--toy"])
    padded = race.posttrain_recipe("dpo", tmp_path, tmp_path / "d.jsonl", tmp_path / "out", variant=race.PADDED)
    assert padded.endswith("  logging_steps: 1\n  micro_batching: false\n  save_steps: 0.2\n") and "use_lora" not in padded
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "num_tokens": 10}\n{"train_runtime": 2.0}\n')
    assert race.read_logs(race.PROBE, tmp_path, stdout="") == ([{"step": 1, "num_tokens": 10}], {"train_runtime": 2.0})  # its own log, as posttrain's
    c = dict(ROW)
    same = {k: 1.0 for k in ("real_tokens_per_s", "wall_s", "cpu_s", "peak_tree_rss_mb", "wall_to_common_eval_loss_s")}
    results = {"sft": {"train_rows": 40, "contestants": {"posttrain": c, "trl": c, "fairl": c, race.PROBE: {**c, "real_tokens_per_s": 25.0}},
                       "posttrain_vs_trl": same, "posttrain_vs_fairl": same, f"{race.PROBE}_vs_trl": {**same, "real_tokens_per_s": 2.0},
                       f"{race.PROBE}_vs_posttrain": {**same, "real_tokens_per_s": 2.0}}}
    text = race.table(results)
    assert "| posttrain, LoRA on q_proj, v_proj | 1000 | 25 |" in text
    assert "posttrain (q, v) / TRL: tokens/s 2.00x" in text and "posttrain (q, v) / posttrain: tokens/s 2.00x" in text
    stopped = {**c, "timed_out": True}
    assert race.ratios("sft", stopped, c, 300) == {"bound": "none"}  # posttrain itself past the limit: no ratio
    assert race.ratios("sft", c, stopped, 300)["bound"] == "lower"
    assert race.ratios("sft", {**c, "real_tokens_per_s": 25.0}, c, 300)["real_tokens_per_s"] == 2.0
    results["sft"]["posttrain_vs_fairl"] = race.ratios("sft", stopped, c, 300)
    assert "posttrain / FAI-RL: no ratio (posttrain stopped at the limit)" in race.table(results)
