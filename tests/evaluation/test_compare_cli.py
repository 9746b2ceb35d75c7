"""`posttrain eval` / `posttrain compare`: arm planning (base rule, run directories), the generation
cache, bad input, and the real CLI end to end on tiny local models."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from posttrain.cli import main as posttrain_main
from posttrain.commands.evaluate import parse_arm, plan_arms
from posttrain.errors import UserError
from posttrain.evaluation.runner import LazyEngine, evaluate, model_identity
from posttrain.evaluation.tasks import load_task
from posttrain.generation.base import Completion, SamplingParams
from posttrain.generation.local import TransformersEngine

PARAMS = SamplingParams(max_new_tokens=4)


def save_lora(base_dir, out, seed):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory):
    """Two LoRA adapters of the tiny qwen2 base (adapter_config names tiny_dir as the base)."""
    root = tmp_path_factory.mktemp("adapters")
    return save_lora(tiny_dir, root / "a", 1), save_lora(tiny_dir, root / "b", 2)


def make_run(root, adapter, steps, final_step, same_as_final=()):
    """A training run directory: checkpoint-N folders plus the final adapter and run_summary.json. Each
    checkpoint's LoRA A matrices are the adapter's shifted by the step (B stays 0, so every one still
    computes what the base does), except the steps in `same_as_final`, which hold the final weights."""
    from safetensors.torch import load_file, save_file

    for step in steps:
        shutil.copytree(adapter, root / f"checkpoint-{step}")
        if step not in same_as_final:
            path = root / f"checkpoint-{step}" / "adapter_model.safetensors"
            tensors = load_file(path)
            save_file({k: v + step * 1e-3 if "lora_A" in k else v for k, v in tensors.items()}, path)
    if final_step is not None:
        shutil.copytree(adapter, root, dirs_exist_ok=True)
        (root / "run_summary.json").write_text(json.dumps({"global_step": final_step}))
    return root


# --- arms -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,message", [
    ("sft", "expected NAME=SPEC"),
    ("=tiny:qwen2", "expected NAME=SPEC"),
    ("my arm=tiny:qwen2", "may hold only letters"),
    ("a@1=tiny:qwen2", "may hold only letters"),
    ("a=./no/such/model", "./no/such/model does not exist"),
    ("a=opneai:gpt-4o", "unknown provider 'opneai'"),
    ("a=tiny:qwen9", "invalid tiny model spec"),
])
def test_malformed_arms_are_refused(text, message):
    with pytest.raises(UserError, match=message):
        parse_arm(text)


def test_adapters_of_one_base_bring_the_base_in_unless_no_base(adapters, tiny_dir):
    a, b = adapters
    arms, steps = plan_arms([f"a={a}", f"b={b}"])
    assert arms == [{"name": "base", "spec": str(tiny_dir)}, {"name": "a", "spec": str(a)}, {"name": "b", "spec": str(b)}]
    assert steps == {}
    assert [arm["name"] for arm in plan_arms([f"a={a}", f"b={b}"], no_base=True)[0]] == ["a", "b"]
    # the base is already an arm (named by its tiny: spec): it is not added twice
    assert [arm["name"] for arm in plan_arms(["qwen=tiny:qwen2-1m", f"a={a}"])[0]] == ["qwen", "a"]
    with pytest.raises(UserError, match="the name 'a' is used twice"):
        plan_arms([f"a={a}", f"a={b}"])


def test_adapters_of_different_bases_add_no_base(adapters, tmp_path, capsys):
    other = shutil.copytree(adapters[1], tmp_path / "other")
    config = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "org/other-model"}))
    arms, _ = plan_arms([f"a={adapters[0]}", f"o={other}"])
    assert [arm["name"] for arm in arms] == ["a", "o"]
    assert "adapters name different base models" in capsys.readouterr().err


def test_run_directory_expands_into_checkpoints_in_step_order(adapters, tiny_dir, tmp_path):
    run = make_run(tmp_path / "run", adapters[0], steps=[2, 10, 4], final_step=12)
    arms, steps = plan_arms([f"sft={run}"])
    assert [(a["name"], a["spec"]) for a in arms] == [
        ("base", str(tiny_dir)), ("sft@step-2", str(run / "checkpoint-2")), ("sft@step-4", str(run / "checkpoint-4")),
        ("sft@step-10", str(run / "checkpoint-10")), ("sft", str(run))]
    assert steps == {"sft": [{"step": 0, "arm": "base"}, {"step": 2, "arm": "sft@step-2"}, {"step": 4, "arm": "sft@step-4"},
                             {"step": 10, "arm": "sft@step-10"}, {"step": 12, "arm": "sft"}]}

    unfinished = make_run(tmp_path / "unfinished", adapters[0], steps=[5], final_step=None)
    assert [a["name"] for a in plan_arms([f"u={unfinished}"], no_base=True)[0]] == ["u@step-5"]

    full = tmp_path / "full"  # full fine-tune checkpoints: no adapter, so no base arm and no step 0
    for folder in (full / "checkpoint-3", full):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
    arms, steps = plan_arms([f"full={full}"])
    assert [a["name"] for a in arms] == ["full@step-3", "full"]
    assert steps == {"full": [{"step": 3, "arm": "full@step-3"}, {"step": "final", "arm": "full"}]}


# --- the generation cache --------------------------------------------------------------------


class CountingEngine(TransformersEngine):
    """The real local engine, counting the prompts of each generate call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, progress=False, **kwargs)
        self.calls: list[int] = []

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        return super().generate(prompts, params)


def test_cache_reuses_generations_and_generates_only_missing_items(tmp_path):
    items = load_task("arithmetic", n=6)
    engine = CountingEngine("tiny:qwen2-1m")
    first = evaluate("qwen", engine, items[:4], PARAMS, tmp_path)
    assert engine.calls == [4] and not any(r["cached"] for r in first)

    again = evaluate("qwen", engine, items[:4], PARAMS, tmp_path)
    assert engine.calls == [4]  # nothing sent to the engine
    assert all(r["cached"] for r in again)
    assert [{**r, "cached": False} for r in again] == first

    more = evaluate("qwen", engine, items, PARAMS, tmp_path)
    assert engine.calls == [4, 2]
    assert [r["cached"] for r in more] == [True] * 4 + [False] * 2

    evaluate("qwen", engine, items[:2], SamplingParams(max_new_tokens=5), tmp_path)
    assert engine.calls == [4, 2, 2]  # other sampling params: another cache entry

    def must_not_load():
        raise AssertionError("a fully cached arm loaded its model")

    lazy = LazyEngine("tiny:qwen2-1m", must_not_load)
    assert all(r["cached"] for r in evaluate("qwen", lazy, items, PARAMS, tmp_path)) and not lazy.loaded


class FlakyAPI:
    """Stands in for an API engine whose first request fails (failure policy 'continue')."""

    name = "openai:flaky-model"

    def __init__(self, fail_first: bool):
        self.fail_first = fail_first
        self.prompts_seen = 0

    def generate(self, prompts, params):
        self.prompts_seen += len(prompts)
        out = [Completion(text="<think>x</think><answer>1</answer>", completion_tokens=5, finish_reason="stop") for _ in prompts]
        if self.fail_first:
            out[0] = Completion(text="", finish_reason="error", error="HTTP 503 after 5 retries")
        return out


def test_failed_requests_are_not_cached_so_a_rerun_retries_only_them(tmp_path):
    items = load_task("arithmetic", n=3)
    records = evaluate("api", FlakyAPI(fail_first=True), items, PARAMS, tmp_path)
    assert [r["finish_reason"] for r in records] == ["error", "stop", "stop"]
    retry = FlakyAPI(fail_first=False)
    records = evaluate("api", retry, items, PARAMS, tmp_path)
    assert retry.prompts_seen == 1 and [r["cached"] for r in records] == [False, True, True]


def test_model_identity_follows_the_weight_files_and_the_adapters_base(adapters, tiny_dir, tmp_path):
    copy = shutil.copytree(tiny_dir, tmp_path / "copy")
    identity = model_identity(str(copy))
    assert identity == model_identity(str(copy)) != model_identity(str(tiny_dir))
    (copy / "trainer_state.json").write_text("{}")  # training state does not change what it generates
    assert model_identity(str(copy)) == identity
    weights = copy / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # retrained in place
    assert model_identity(str(copy)) != identity
    assert model_identity("Qwen/Qwen2.5-0.5B") == "name:Qwen/Qwen2.5-0.5B"

    adapter = shutil.copytree(adapters[0], tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(copy)}))
    before = model_identity(str(adapter))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # the base changed
    assert model_identity(str(adapter)) != before


# --- the CLI ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,message", [
    (["compare", "--arm", "a=tiny:qwen2-1m", "--task", "gsm8", "--n", "2"], "--task gsm8: unknown task. Did you mean 'gsm8k'?"),
    (["compare", "--arm", "tiny:qwen2-1m", "--task", "arithmetic"], "expected NAME=SPEC"),
    (["compare", "--arm", "a=tiny:qwen2-1m", "--task", "gsm8k", "--data", "/no/such/test.jsonl"], "--data: data file '/no/such/test.jsonl' does not exist"),
    (["eval", "--model", "./no/such/model", "--task", "arithmetic"], "--model: ./no/such/model does not exist"),
    (["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--alpha", "5"], "argument --alpha: 5 is out of range: give a number > 0 and < 1"),
])
def test_bad_input_exits_2_with_the_message(argv, message, capsys, tmp_path):
    try:
        code = posttrain_main([*argv, "--out", str(tmp_path)])
    except SystemExit as e:  # argparse: a flag's value out of range
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_eval_of_an_unfinished_run_points_to_compare(adapters, tmp_path, capsys):
    run = make_run(tmp_path / "run", adapters[0], steps=[3], final_step=None)
    assert posttrain_main(["eval", "--model", str(run), "--task", "arithmetic", "--out", str(tmp_path / "out")]) == 2
    assert f"a run directory without a final model; evaluate one of its checkpoints, or all of them with: " \
           f"posttrain compare --arm run={run}" in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_generating(tmp_path, capsys):
    import importlib.util

    argv = ["compare", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic", "--n", "2", "--max-new-tokens", "2",
            "--out", str(tmp_path / "out"), "--plot", str(tmp_path / "acc.png")]
    if importlib.util.find_spec("matplotlib") is None:
        assert posttrain_main(argv) == 2
        assert "pip install matplotlib" in capsys.readouterr().err
        assert not (tmp_path / "out" / "samples").exists()  # nothing was generated
    else:
        assert posttrain_main(argv) == 0
        assert (tmp_path / "acc.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_writes_samples_and_summary_for_a_custom_file(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "gold": i + 1}) + "\n" for i in range(5)))
    out = tmp_path / "eval"
    argv = ["eval", "--model", "tiny:qwen2-1m", "--task", "custom", "--data", str(data), "--prompt-column", "question",
            "--answer-column", "gold", "--n", "3", "--max-new-tokens", "3", "--out", str(out)]
    assert posttrain_main(argv) == 0
    printed = capsys.readouterr().out
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 and {s["gold"] for s in samples} <= {"1", "2", "3", "4", "5"}
    assert all(s["completion_tokens"] <= 3 for s in samples)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"][0]["n"] == 3 and summary["comparisons"] == []
    assert summary["arms"][0]["strict_correct"] == sum(s["strict"] for s in samples)
    assert (out / "summary.md").read_text() in printed


def test_compare_expands_a_run_of_adapters_into_steps_with_the_base_at_step_0(adapters, tmp_path, capsys):
    run = make_run(tmp_path / "run", adapters[0], steps=[1, 2], final_step=2)
    out = tmp_path / "cmp"
    assert posttrain_main(["compare", "--arm", f"run={run}", "--task", "arithmetic", "--n", "3", "--max-new-tokens", "3",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "### accuracy over training steps: run" in printed
    for row in ("| 0 | base |", "| 1 | run@step-1 |", "| 2 | run@step-2 |", "| 2 | run |"):
        assert row in printed
    report = json.loads((out / "report.json").read_text())
    assert [a["arm"] for a in report["arms"]] == ["base", "run@step-1", "run@step-2", "run"]
    assert len(report["comparisons"]) == 6 * 2  # every pair of 4 arms, strict and loose
    samples = {name: [json.loads(l) for l in (out / "samples" / f"{name}.jsonl").read_text().splitlines()]
               for name in ("base", "run@step-1", "run")}
    assert [s["id"] for s in samples["base"]] == [s["id"] for s in samples["run"]]  # identical items
    # PEFT initialises LoRA's B to zero, so these adapters compute exactly what the base does (greedy)
    assert [s["completion"] for s in samples["base"]] == [s["completion"] for s in samples["run@step-1"]]


@pytest.mark.e2e
def test_identical_weights_are_evaluated_once_and_the_log_says_so(adapters, tiny_dir, tmp_path, capsys):
    """A run that saves every N steps and ends on a multiple of N: its last checkpoint is the final model."""
    run = make_run(tmp_path / "run", adapters[0], steps=[1, 2], final_step=2, same_as_final={2})
    arms, steps = plan_arms([f"sft={run}"])
    assert [a["name"] for a in arms] == ["base", "sft@step-1", "sft"]
    assert steps == {"sft": [{"step": 0, "arm": "base"}, {"step": 1, "arm": "sft@step-1"}, {"step": 2, "arm": "sft"}]}
    assert "note: sft@step-2 (" in capsys.readouterr().err
    twice = make_run(tmp_path / "twice", adapters[0], steps=[1, 2, 3], final_step=4, same_as_final={2, 3})
    arms, steps = plan_arms([f"t={twice}", f"copy={adapters[0]}"], no_base=True)
    # steps 2 and 3 are the final model; the copy named on the command line keeps its row, answered by t's generations
    assert [(a["name"], a.get("same_as")) for a in arms] == [("t@step-1", None), ("t", None), ("copy", "t")]
    assert steps["t"] == [{"step": 1, "arm": "t@step-1"}, {"step": 2, "arm": "t"}, {"step": 3, "arm": "t"}, {"step": 4, "arm": "t"}]
    err = capsys.readouterr().err
    assert "copy (" in err and "has the same weights as t " in err and "reported under both names" in err

    out = tmp_path / "cmp"
    assert posttrain_main(["compare", "--arm", f"sft={run}", "--task", "arithmetic", "--n", "2", "--max-new-tokens", "2",
                           "--out", str(out), "--no-progress"]) == 0
    assert sorted(p.stem for p in (out / "samples").iterdir()) == ["base", "sft", "sft@step-1"]  # generated once each
    assert "| 2 | sft |" in capsys.readouterr().out

    named = tmp_path / "named"
    assert posttrain_main(["compare", "--arm", f"a={adapters[0]}", "--arm", f"b={adapters[0]}", "--no-base", "--task", "arithmetic",
                           "--n", "2", "--max-new-tokens", "2", "--out", str(named), "--no-progress"]) == 0
    rows = {name: [json.loads(l) for l in (named / "samples" / f"{name}.jsonl").read_text().splitlines()] for name in "ab"}
    assert [r["completion"] for r in rows["a"]] == [r["completion"] for r in rows["b"]] and {r["arm"] for r in rows["b"]} == {"b"}
    report = json.loads((named / "report.json").read_text())
    assert [a["arm"] for a in report["arms"]] == ["a", "b"]  # both rows, and their pair: no discordant items


@pytest.mark.e2e
def test_compare_cli_end_to_end_two_tiny_models_then_from_the_cache(cli, tmp_path):
    out = tmp_path / "compare"
    argv = ["compare", "--arm", "qwen=tiny:qwen2-1m", "--arm", "llama=tiny:llama-1m", "--task", "arithmetic",
            "--n", "8", "--max-new-tokens", "6", "--out", out]
    first = cli(*argv)
    assert first.returncode == 0, first.stderr
    assert "| qwen | `tiny:qwen2-1m` | 8 |" in first.stdout and "| llama | `tiny:llama-1m` | 8 |" in first.stdout
    assert "| strict | qwen | llama |" in first.stdout and "| loose | qwen | llama |" in first.stdout
    assert "exact McNemar, alpha=0.05" in first.stdout
    assert (out / "report.md").read_text() in first.stdout
    report = json.loads((out / "report.json").read_text())
    assert [(a["arm"], a["n"]) for a in report["arms"]] == [("qwen", 8), ("llama", 8)]
    strict = next(c for c in report["comparisons"] if c["metric"] == "strict")
    qwen = [json.loads(l) for l in (out / "samples" / "qwen.jsonl").read_text().splitlines()]
    llama = [json.loads(l) for l in (out / "samples" / "llama.jsonl").read_text().splitlines()]
    assert strict["fixed"] == sum(not a["strict"] and b["strict"] for a, b in zip(qwen, llama))
    assert strict["broken"] == sum(a["strict"] and not b["strict"] for a, b in zip(qwen, llama))
    assert [r["id"] for r in qwen] == [r["id"] for r in llama] and all(r["completion_tokens"] <= 6 for r in qwen)

    again = cli(*argv)
    assert again.returncode == 0, again.stderr
    assert "| qwen (cached) |" in again.stdout and "| llama (cached) |" in again.stdout
    assert "qwen: 8/8 generations from the cache" in again.stderr and "generated" not in again.stderr
    assert json.loads((out / "report.json").read_text())["comparisons"] == report["comparisons"]


# --- several seeds per arm -------------------------------------------------------------------


def test_several_seed_arm_from_a_list_or_a_glob(adapters, tmp_path):
    runs = [make_run(tmp_path / f"kl-s{i}", adapters[i % 2], steps=[1], final_step=1) for i in range(3)]
    by_list, _ = plan_arms([f"kl={','.join(map(str, runs))}"])
    by_glob, steps = plan_arms([f"kl={tmp_path}/kl-s*"])
    assert by_list == by_glob and steps == {}  # members count through their final model only
    assert [(a["name"], a.get("group")) for a in by_glob] == [("base", None), ("kl@run-0", "kl"), ("kl@run-1", "kl"), ("kl@run-2", "kl")]
    with pytest.raises(UserError, match="matches nothing"):
        plan_arms([f"kl={tmp_path}/nope-*"])
    unfinished = make_run(tmp_path / "unfinished", adapters[0], steps=[1], final_step=None)
    with pytest.raises(UserError, match="has no final model"):
        plan_arms([f"kl={runs[0]},{unfinished}"])
    with pytest.raises(UserError, match="used twice"):
        plan_arms([f"kl={runs[0]},{runs[1]}", "kl=tiny:qwen2-1m"])


def test_report_pools_seeds_with_cmh_and_keeps_mcnemar_for_single_arms():
    from posttrain.evaluation.pooled import cmh_test, item_tables
    from posttrain.evaluation.report import build_report, render_markdown
    from posttrain.evaluation.statistics import seed_level_test

    import random

    rng = random.Random(3)
    n = 60

    def records(p):
        return [{"id": i, "strict": rng.random() < p, "loose": rng.random() < p, "format": 1.0, "completion_tokens": 5,
                 "finish_reason": "stop"} for i in range(n)]

    arms = [{"name": "base", "spec": "b"}, {"name": "sft", "spec": "s"},
            *[{"name": f"kl@run-{i}", "spec": f"k{i}", "group": "kl"} for i in range(3)]]
    recs = {"base": records(0.3), "sft": records(0.4), **{f"kl@run-{i}": records(0.6) for i in range(3)}}
    report = build_report(arms, recs, task="t", alpha=0.05, settings={})
    assert {(c["arm_a"], c["arm_b"]) for c in report["comparisons"]} == {("base", "sft")}  # seeds are not paired one by one
    assert {(c["arm_a"], c["arm_b"]) for c in report["pooled_comparisons"]} == {("base", "kl"), ("sft", "kl")}
    [group] = report["seed_groups"]
    assert group["seeds"] == 3 and group["strict"]["per_seed"] == [sum(r["strict"] for r in recs[f"kl@run-{i}"]) / n for i in range(3)]
    row = next(c for c in report["pooled_comparisons"] if c["arm_a"] == "base" and c["metric"] == "strict")
    tables = item_tables([[r["strict"] for r in recs["base"]]], [[r["strict"] for r in recs[f"kl@run-{i}"]] for i in range(3)])
    assert (row["statistic"], row["p_value"]) == cmh_test(tables)
    assert row["verdict"] == "significant improvement" and row["seeds_a"] == 1 and row["seeds_b"] == 3
    # the seed-level test beside it: base is one model, so a one-sample t of kl's per-seed accuracies against it
    assert row["seed_test"] == "one-sample" and row["seed_df"] == 2
    assert row["seed_p_value"] == seed_level_test([sum(r["strict"] for r in recs["base"]) / n], group["strict"]["per_seed"]).p_value
    both = "significant improvement" if max(row["p_value"], row["seed_p_value"]) < 0.05 else "no measurable difference"
    assert row["conservative_verdict"] == both
    text = render_markdown(report)
    assert "## arms with several seeds" in text and "Cochran-Mantel-Haenszel by item" in text
    assert "| kl | 3 |" in text
    header = next(line for line in text.splitlines() if line.startswith("| metric | A | B | seeds A/B"))
    assert "CMH p" in header and "seed-level p" in header and "verdict (both tests)" in header
    strict_row = next(line for line in text.splitlines() if line.startswith("| strict | base | kl | 1/3 |"))
    assert f"{row['seed_p_value']:.3g}" in strict_row and "(2.0 one-sample)" in strict_row


def test_compare_cli_with_a_several_seed_arm(adapters, tmp_path, capsys):
    runs = [make_run(tmp_path / f"s{i}", adapters[i % 2], steps=[], final_step=1) for i in range(2)]
    out = tmp_path / "cmp"
    assert posttrain_main(["compare", "--arm", f"lora={runs[0]},{runs[1]}", "--task", "arithmetic", "--n", "3",
                           "--max-new-tokens", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| lora | 2 |" in printed and "| strict | base | lora | 1/2 |" in printed
    assert "seed-level p" in printed  # both tests printed for a several-seed arm
    report = json.loads((out / "report.json").read_text())
    assert [a["arm"] for a in report["arms"]] == ["base", "lora@run-0", "lora@run-1"] and report["comparisons"] == []
