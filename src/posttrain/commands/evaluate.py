"""`posttrain eval` scores one model on a task; `posttrain compare` answers "did the change help?".

    posttrain eval --model runs/sft-tiny --task arithmetic --n 100
    posttrain compare --arm sft=runs/sft-lora --arm grpo=runs/grpo-lora --task gsm8k --n 500 --plot acc.png

compare: every arm answers the identical items (same shuffle, greedy by default), then each pair
of arms gets an exact McNemar test and the CI of the accuracy difference that agrees with it. Arms expand:

* PEFT adapters of one base model bring that base in as arm ``base`` (``--no-base`` to skip it),
  so "adapter vs the model it started from" is always in the table;
* a training run directory (one holding ``checkpoint-N`` folders) becomes one arm per checkpoint,
  ``NAME@step-N``, plus ``NAME`` for its final model: accuracy over training steps.

Generations are cached under ``OUT/cache`` (see posttrain.evaluation.runner): re-running with more
items or another alpha regenerates nothing it already has. Only argparse and the standard library
load at import; models load when an arm is first generated.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

from posttrain.checkpoints import checkpoint_dirs
from posttrain.commands.engine_flags import add_engine_arguments, endpoint, engine_options_per_model
from posttrain.commands.task_recipe import add_recipe_arguments, apply_recipe
from posttrain.commands.tool_flags import add_tool_arguments, make_toolbox, with_tools
from posttrain.errors import UserError
from posttrain.flag_types import ALPHA, COUNT, SHARE, TEMPERATURE, TOP_P

ARM_NAME = re.compile(r"[A-Za-z0-9_.-]+")
BASE_ARM = "base"

EPILOG = """\
tasks: arithmetic (offline, generated), gsm8k, mmlu (hub, or --data FILE), custom (--data FILE)
strict = the <answer> block equals gold (exactly the GRPO answer_match reward);
loose  = the last number (mmlu: letter) anywhere equals gold, whatever the format.
"""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _shared_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", help="arithmetic | gsm8k | mmlu | math | custom (math: LaTeX answers, pip install 'posttrain[math]')")
    p.add_argument("--n", type=COUNT, default=None, help="evaluate the first N items after a shuffle seeded by --seed (default: all; arithmetic: 500)")
    p.add_argument("--data", default=None, help="local .jsonl/.json/.csv/.parquet file instead of the hub (gsm8k: question/answer; mmlu: question/choices/answer; math: problem/answer; custom: see --prompt-column)")
    p.add_argument("--prompt-column", default="prompt", help="custom task: column with the question text or chat messages (default: prompt)")
    p.add_argument("--answer-column", default="answer", help="custom task: column with the gold answer, a number or text (default: answer)")
    p.add_argument("--image-column", action="append", default=[], metavar="C", help="custom task: column with each row's image(s) (a path relative to the data file, URL, s3://, data URI, or a list); repeatable. Needs a vision-language model (or an API model that takes images)")
    p.add_argument("--data-seed", type=int, default=None, help="arithmetic task: generator seed (default 1234); any seed draws only from the questions training data never holds")
    p.add_argument("--seed", type=int, default=0, help="seed of the item shuffle and of sampling (default 0)")
    p.add_argument("--max-new-tokens", type=COUNT, default=None,
                   help="generation budget per answer, in tokens (default: the task's, arithmetic 128, mmlu 256, gsm8k, math and custom 512)")
    p.add_argument("--temperature", type=TEMPERATURE, default=0.0, help="0 = greedy, the default: deterministic answers make the paired test exact")
    p.add_argument("--top-p", type=TOP_P, default=1.0, help="nucleus sampling mass when --temperature > 0 (default 1.0)")
    p.add_argument("--alpha", type=ALPHA, default=0.05, help="significance level of verdicts and 1 - level of the CIs (default 0.05)")
    p.add_argument("--max-error-share", type=SHARE, default=None, metavar="F",
                   help="failed requests (--on-error continue) are left out of accuracy and, for both arms, of a pair's "
                        "comparison; above this share of a pair's items left out, no verdict (default 0.05)")
    p.add_argument("--out", default=None, help="output directory (default runs/eval-TASK or runs/compare-TASK)")
    p.add_argument("--cache-dir", default=None, help="generation cache (default OUT/cache); share one between commands to reuse generations")
    p.add_argument("--no-cache", action="store_true", help="generate everything afresh (e.g. an API model re-published under the same name)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="also draw accuracy per arm with CI error bars (needs matplotlib)")
    add_engine_arguments(p)
    add_tool_arguments(p)
    add_recipe_arguments(p, "evaluation")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="score one model on a task (strict/loose accuracy, format)",
        description="Generate answers with one model for a task's items, score them, write OUT/samples.jsonl,\n"
                    "OUT/summary.json and OUT/summary.md, and print the summary table.",
        epilog=EPILOG + "\nexample:\n  posttrain eval --model tiny:qwen2-1m --task arithmetic --n 20 --max-new-tokens 32\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="hub id, local model or adapter dir, a .gguf file (dequantized once), tiny:ARCH-SIZE, s3://BUCKET/PATH, or an API/vLLM spec (openai:MODEL, vllm:PATH, ...)")
    _shared_arguments(p)
    p.add_argument("--pass-k", type=COUNT, default=None, metavar="K",
                   help="also sample K answers per item at --pass-temperature and report pass@K beside greedy accuracy: the "
                        "headroom RL can reach (run it before GRPO; none means RL can only teach format)")
    p.add_argument("--pass-temperature", type=TEMPERATURE, default=1.0, metavar="T",
                   help="sampling temperature of --pass-k's answers (default 1.0; the accuracy stays --temperature's)")
    p.set_defaults(func=cmd_eval)

    p = subparsers.add_parser(
        "compare", help="evaluate several models on identical items and test whether they differ",
        description="Every arm answers the same items. Prints per-arm accuracy and, for every pair of arms, the\n"
                    "exact McNemar test with a CI of the accuracy difference that agrees with it. Writes OUT/report.md,\n"
                    "OUT/report.json and OUT/samples/ARM.jsonl.",
        epilog=EPILOG + "\narms:\n  NAME=SPEC; adapters of one base add arm 'base' (unless --no-base); a run directory with\n"
                        "  checkpoint-N folders adds NAME@step-N per checkpoint plus NAME for its final model.\n"
                        "  several seeds: NAME=runs/a,runs/b,runs/c or NAME='runs/kl-s*' (quoted glob): per-seed and mean\n"
                        "  accuracy, spread, a pooled paired test (Cochran-Mantel-Haenszel by item) and a seed-level\n"
                        "  test (Welch's t on per-seed accuracy) against every other arm.\n\n"
                        "example:\n  posttrain compare --arm a=tiny:qwen2-1m --arm b=tiny:llama-1m --task arithmetic --n 50\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arm", action="append", metavar="NAME=SPEC", help="an arm to compare (repeat the flag)")
    p.add_argument("--no-base", action="store_true", help="do not add the adapters' base model as arm 'base'")
    _shared_arguments(p)
    p.set_defaults(func=cmd_compare)


# ---------------------------------------------------------------------------------------------
# arms: NAME=SPEC, run-directory expansion, the base rule


def parse_arm(text: str) -> tuple[str, str]:
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not name or not spec:
        raise UserError(f"--arm {text!r}: expected NAME=SPEC, e.g. --arm sft=runs/sft or --arm base=Qwen/Qwen2.5-0.5B")
    if not ARM_NAME.fullmatch(name):
        raise UserError(f"--arm {text!r}: the name {name!r} may hold only letters, digits, '_', '.' and '-' "
                        "(it names output files; '@' is reserved for checkpoint arms)")
    if group_members(spec) is None:
        _check_spec(spec, f"--arm {text!r}")
    return name, spec


def group_members(spec: str) -> list[str] | None:
    """The runs of a several-seed arm: ``a,b,c`` or a glob (``runs/kl-s*``, sorted); None for one model.

    Each member must be a model: a run directory counts through its final model (its checkpoints
    are not expanded), so every seed is compared at the end of its training."""
    if "," in spec:
        members = [m.strip() for m in spec.split(",") if m.strip()]
    elif any(c in spec for c in "*?["):
        import glob

        members = sorted(glob.glob(str(Path(spec).expanduser())))
        if not members:
            raise UserError(f"--arm ...={spec}: the pattern matches nothing; give run directories, e.g. 'runs/kl-s*' or runs/a,runs/b")
    else:
        return None
    for member in members:
        _check_spec(member, f"--arm ...={spec} (member {member})")
        path = Path(member).expanduser()
        if path.is_dir() and not _is_model_dir(path):
            raise UserError(f"--arm ...={spec}: {member} has no final model (a run still training, or a folder of runs?); "
                            "every member of a several-seed arm must be one finished model or run")
    return members


def check_specs(evaluation) -> None:
    """An evaluation recipe's model or arms, checked as the command checks them (`posttrain validate`)."""
    if evaluation.model is not None:
        _check_spec(evaluation.model, "evaluation.model")
    for name, spec in (evaluation.arms or {}).items():
        if group_members(spec) is None:
            _check_spec(spec, f"evaluation.arms.{name}")


def _check_spec(spec: str, where: str) -> None:
    """Refuse now, before any model loads, a spec written as a path that does not exist or one
    with an unknown provider prefix."""
    from posttrain.generation.engines import engine_kind
    from posttrain.recipe.preflight import local_looking_model

    if (spec.startswith((".", "/", "~")) and not Path(spec).expanduser().exists()) or local_looking_model(spec):
        raise UserError(f"{where}: {spec} does not exist; give a model or adapter directory, a run directory, a .gguf file, a hub id or tiny:ARCH-SIZE")
    try:
        engine_kind(spec)
        if spec == "tiny" or spec.startswith("tiny:"):
            from posttrain.models.tiny import parse_tiny_spec

            parse_tiny_spec(spec)
    except (UserError, ValueError) as e:
        raise UserError(f"{where}: {e}") from None
    from posttrain.models.gguf import gguf_file, spec_problem

    problem = spec_problem(spec)
    if problem:
        raise UserError(f"{where}: {problem}")
    folder = Path(spec).expanduser()
    if folder.is_dir() and not _is_model_dir(folder) and not checkpoint_dirs(folder) and gguf_file(spec) is None:
        raise UserError(f"{where} {spec}: the folder holds neither a model (config.json) nor an adapter (adapter_config.json) "
                        "nor checkpoint-N folders; give a model folder, a training run's output_dir, a hub id or tiny:ARCH-SIZE")


def _is_model_dir(path: Path) -> bool:
    return any((path / f).is_file() for f in ("config.json", "adapter_config.json")) or any(path.glob("*.safetensors"))


def _final_step(run_dir: Path) -> int | str:
    """The final model's training step from run_summary.json, or "final" when it is unknown."""
    try:
        return int(json.loads((run_dir / "run_summary.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return "final"


def expand_arm(name: str, spec: str) -> tuple[list[dict], list[dict] | None]:
    """Arms for one --arm, and the steps-table rows when ``spec`` is a run directory."""
    path = Path(spec).expanduser()
    found = checkpoint_dirs(path)
    if not found:
        return [{"name": name, "spec": spec}], None
    arms = [{"name": f"{name}@step-{step}", "spec": str(d)} for step, d in found]
    steps = [{"step": step, "arm": f"{name}@step-{step}"} for step, _ in found]
    if _is_model_dir(path):
        arms.append({"name": name, "spec": spec})
        steps.append({"step": _final_step(path), "arm": name})
    return arms, steps


def _adapter_base(spec: str) -> str | None:
    from posttrain.models.loading import adapter_base

    path = Path(spec).expanduser()
    return adapter_base(str(path)) if path.is_dir() else None


def _same_model(a: str, b: str) -> bool:
    """Whether two specs name one model: the same path once resolved (a tiny: spec resolves to its
    cache folder, which is what adapters trained on it record), or the same hub id."""
    from posttrain.models.gguf import gguf_file
    from posttrain.models.loading import resolve_source
    from posttrain.models.tiny import cache_root, dir_name, parse_tiny_spec

    def canonical(spec: str) -> str:
        if spec == "tiny" or spec.startswith("tiny:"):
            arch, size = parse_tiny_spec(spec)
            return str((cache_root() / "tiny" / dir_name(arch, size)).resolve())
        if gguf_file(spec) is not None:  # adapters trained on a GGUF record its converted folder
            return str(Path(resolve_source(spec)).resolve())
        path = Path(spec).expanduser()
        return str(path.resolve()) if path.exists() else spec

    return canonical(a) == canonical(b)


def plan_arms(arm_args: list[str], no_base: bool = False) -> tuple[list[dict], dict[str, list[dict]]]:
    """The arms to evaluate, in display order, and the steps tables of run directories.

    Arms are ``{"name", "spec"}`` dicts; members of a several-seed arm (``NAME=a,b,c`` or a glob)
    are ``NAME@run-I`` with ``"group": NAME``. The base rule: when the adapter arms all name one base
    model, that base joins first as arm ``base`` (unless ``no_base``, an arm already evaluates it,
    or the name ``base`` is taken); runs made of adapters then show it as step 0.
    """
    arms: list[dict] = []
    steps: dict[str, list[dict]] = {}
    groups = []
    for text in arm_args:
        name, spec = parse_arm(text)
        members = group_members(spec)
        if members is not None:  # several seeds: one arm per run, pooled in the report
            arms += [{"name": f"{name}@run-{i}", "spec": member, "group": name} for i, member in enumerate(members)]
            groups.append(name)
            continue
        expanded, run_steps = expand_arm(name, spec)
        arms += expanded
        if run_steps:
            steps[name] = run_steps
    names = [arm["name"] for arm in arms]
    taken = names + groups
    repeated = sorted({n for n in taken if taken.count(n) > 1})
    if repeated:
        raise UserError(f"--arm: the name {repeated[0]!r} is used twice; give every arm its own name")

    bases = {arm["name"]: _adapter_base(arm["spec"]) for arm in arms}
    distinct = {b for b in bases.values() if b is not None}
    if len(distinct) > 1:
        _log(f"note: the adapters name different base models ({', '.join(sorted(distinct))}); no 'base' arm added")
    if len(distinct) == 1 and not no_base:
        base = distinct.pop()
        if BASE_ARM in names:
            _log(f"note: an arm is already named '{BASE_ARM}'; the adapters' base {base} is not added again")
        elif not any(_same_model(arm["spec"], base) for arm in arms):
            arms.insert(0, {"name": BASE_ARM, "spec": base})
            for group, rows in steps.items():
                if all(bases[row["arm"]] is not None for row in rows):
                    rows.insert(0, {"step": 0, "arm": BASE_ARM})
    return skip_identical_weights(arms, steps)


def skip_identical_weights(arms: list[dict], steps: dict[str, list[dict]]) -> tuple[list[dict], dict[str, list[dict]]]:
    """Arms whose saved weights are byte for byte another arm's are evaluated once, and the log says so.

    The last checkpoint of a run usually holds the final model's weights (a run saving every N steps
    that ends on a multiple of N): generating for both doubles the cost and adds a comparison of a
    model with itself. Of identical arms the one named on the command line is kept over a
    checkpoint arm, else the first; a dropped checkpoint's row in the steps table points at the arm
    kept (or goes, when that arm is the run's final model at the same step). An arm named on the
    command line is never dropped: it gets `same_as` (the arm it copies) and keeps its row in the
    report, answered by the other's generations. Only local folders are compared (sha256 of
    their weight and config files, read only where the files' names and sizes already agree);
    members of a several-seed arm are left alone.
    """
    from posttrain.checkpoints import weight_files, weights_digest

    def shape(arm):
        files = weight_files(Path(arm["spec"]).expanduser()) if not arm.get("group") else []
        return tuple((f.name, f.stat().st_size) for f in files) or None

    shapes = {arm["name"]: shape(arm) for arm in arms}
    collide = {name for name, s in shapes.items() if s is not None and list(shapes.values()).count(s) > 1}
    kept: dict[str, str] = {}  # digest -> arm name
    replaced: dict[str, str] = {}  # dropped arm -> the arm kept in its place
    for arm in sorted((a for a in arms if a["name"] in collide), key=lambda a: "@step-" in a["name"]):  # named arms first
        digest = weights_digest(Path(arm["spec"]).expanduser())
        if digest in kept and "@step-" not in arm["name"]:
            arm["same_as"] = kept[digest]
            _log(f"note: {arm['name']} ({arm['spec']}) has the same weights as {kept[digest]} (sha256 {digest[:12]}); "
                 f"generated once, reported under both names")
        elif digest in kept:
            replaced[arm["name"]] = kept[digest]
            _log(f"note: {arm['name']} ({arm['spec']}) has the same weights as {kept[digest]} (sha256 {digest[:12]}); "
                 f"evaluated once, as {kept[digest]}")
        else:
            kept[digest] = arm["name"]
    if not replaced:
        return arms, steps
    out_steps = {}
    for group, rows in steps.items():
        steps_of = {}
        for row in rows:
            steps_of.setdefault(row["arm"], set()).add(row["step"])
        # the last checkpoint and the final model (step N, or "final" when the run left no summary): one row
        same_row = lambda row: steps_of.get(replaced[row["arm"]], set()) & {row["step"], "final"}  # noqa: E731
        out_steps[group] = [{**row, "arm": replaced.get(row["arm"], row["arm"])} for row in rows
                            if row["arm"] not in replaced or not same_row(row)]
    return [arm for arm in arms if arm["name"] not in replaced], out_steps


# ---------------------------------------------------------------------------------------------
# running


def _load_items(args) -> list[dict]:
    from posttrain.evaluation.tasks import ARITHMETIC_SEED, load_task

    return load_task(args.task, n=args.n, seed=args.seed, data=args.data, prompt_column=args.prompt_column,
                     answer_column=args.answer_column, image_columns=tuple(getattr(args, "image_column", None) or ()),
                     data_seed=ARITHMETIC_SEED if args.data_seed is None else args.data_seed)


def _check_plot_possible(args) -> None:
    """Fail before generating, not after, when --plot cannot be drawn."""
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise UserError(f"--plot {args.plot}: drawing needs matplotlib, which is not installed; run "
                            "'pip install matplotlib', or drop --plot")


def _sampling(args):
    """The sampling parameters; --max-new-tokens defaults to the task's own budget (`Task.max_new_tokens`)."""
    from posttrain.evaluation.tasks import get_task
    from posttrain.generation.base import SamplingParams

    if args.max_new_tokens is None:
        args.max_new_tokens = get_task(args.task).max_new_tokens
        _log(f"max_new_tokens: {args.max_new_tokens} (the {args.task} task's default; --max-new-tokens N sets it)")
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise UserError(f"--temperature {args.temperature} --top-p {args.top_p}: temperature must be >= 0 (0 = greedy), top-p in (0, 1]")
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be between 0 and 1 (0.05 is the usual choice)")
    return SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)


def _error_share(args) -> dict:
    share = getattr(args, "max_error_share", None)
    if share is None:
        return {}
    if not 0 <= share < 1:
        raise UserError(f"--max-error-share {share}: must be in [0, 1) (the share of a pair's items that may fail before its verdict is withheld)")
    return {"max_error_share": share}


def _settings(params) -> dict:
    decoding = "greedy" if params.temperature == 0 else f"temperature={params.temperature} top_p={params.top_p}"
    return {"decoding": decoding, "max_new_tokens": params.max_new_tokens, "seed": params.seed}


def _engine_options(arms: list[dict], args) -> dict[str, dict]:
    """Engine options per spec from the shared engine flags (checked before anything is written)."""
    from posttrain.generation.engines import engine_kind

    return engine_options_per_model(args, {arm["spec"]: engine_kind(arm["spec"]) for arm in arms})


def _run_arms(arms: list[dict], items: list[dict], params, args, out: Path, options: dict[str, dict],
              toolbox=None, passes=()) -> dict[str, list[dict]]:
    """Each arm's records under its name; with `passes` (eval --pass-k), also ARM#passJ: the same engine answering
    every item again with the J-th sampling parameters."""
    from posttrain.evaluation.runner import LazyEngine, evaluate
    from posttrain.generation.engines import make_engine

    cache_dir = None if args.no_cache else Path(args.cache_dir) if args.cache_dir else out / "cache"
    results = {}
    for arm in arms:
        if arm.get("same_as"):  # the same weights as an arm answered before it (skip_identical_weights)
            results[arm["name"]] = [{**row, "arm": arm["name"]} for row in results[arm["same_as"]]]
            continue
        spec = arm["spec"]
        engine = with_tools(LazyEngine(spec, lambda spec=spec: make_engine(spec, **options[spec])), toolbox, args)
        _log(f"{arm['name']}: {spec} on {len(items)} items")
        try:
            for name, sampling in [(arm["name"], params), *((f"{arm['name']}#pass{j}", p) for j, p in enumerate(passes))]:
                results[name] = evaluate(name, engine, items, sampling, cache_dir, log=_log, endpoint=endpoint(spec, options[spec]),
                                         use_chat_template=options[spec].get("use_chat_template", True) is not False)
        finally:
            engine.close()
    return results


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _finish(report: dict, args, out: Path, name: str, samples: Path) -> None:
    from posttrain import __version__
    from posttrain.evaluation.report import plot_accuracy, render_markdown

    from posttrain.secrets import redact_tree, redact_url

    # --base-url may carry user:password@ or ?api_key=: never into report.json
    report["invocation"] = {"command": redact_url(" ".join(["posttrain", *sys.argv[1:]])), "posttrain": __version__,
                            "arguments": redact_tree({k: v for k, v in vars(args).items() if k != "func"})}
    markdown = render_markdown(report)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown)
    print(markdown)
    written = [out / f"{name}.md", out / f"{name}.json", samples]
    if args.plot:
        plot_accuracy(report, args.plot)
        written.append(Path(args.plot))
    print("wrote " + ", ".join(map(str, written)))


def cmd_eval(args) -> int:
    from posttrain.evaluation.report import build_report

    apply_recipe(args, "evaluation", "eval", {"model": "--model", "task": "--task"})
    _check_spec(args.model, "--model")
    model_dir = Path(args.model).expanduser()
    if model_dir.is_dir() and not _is_model_dir(model_dir) and expand_arm("run", args.model)[1]:
        raise UserError(f"--model {args.model}: a run directory without a final model; evaluate one of its "
                        f"checkpoints, or all of them with: posttrain compare --arm run={args.model} --task {args.task}")
    params = _sampling(args)
    _error_share(args)  # checked before anything is generated
    if args.pass_k is not None and (args.pass_k < 2 or args.pass_temperature == 0):
        raise UserError(f"--pass-k {args.pass_k} --pass-temperature {args.pass_temperature}: pass@k samples 2 or more answers "
                        "per item at a temperature above 0 (e.g. --pass-k 8 --pass-temperature 1.0)")
    arm = {"name": "model", "spec": args.model}
    options = _engine_options([arm], args)
    _check_plot_possible(args)
    items = _load_items(args)
    toolbox = make_toolbox(args)  # checked before anything is written
    out = Path(args.out or f"runs/eval-{args.task}")
    out.mkdir(parents=True, exist_ok=True)
    passes = [replace(params, temperature=args.pass_temperature, seed=args.seed + 1 + j) for j in range(args.pass_k or 0)]
    try:
        records = _run_arms([arm], items, params, args, out, options, toolbox, passes)
    finally:
        if toolbox is not None:
            toolbox.close()
    _write_jsonl(out / "samples.jsonl", records["model"])
    report = build_report([arm], records, task=args.task, alpha=args.alpha, settings=_settings(params), **_error_share(args))
    if passes:
        from posttrain.evaluation.pass_at_k import pass_at_k

        sampled = [records[f"model#pass{j}"] for j in range(len(passes))]
        _write_jsonl(out / "samples_pass.jsonl", [{**r, "sample": j} for j, rows in enumerate(sampled) for r in rows])
        _log(f"the {len(passes)} sampled answers per item: {out / 'samples_pass.jsonl'}")
        report["pass_at_k"] = pass_at_k(records["model"], sampled, args.pass_temperature)
    _finish(report, args, out, "summary", out / "samples.jsonl")
    return 0


def cmd_compare(args) -> int:
    from posttrain.evaluation.report import build_report

    apply_recipe(args, "evaluation", "compare", {"arm": "--arm", "task": "--task"})
    arms, steps = plan_arms(args.arm, no_base=args.no_base)
    params = _sampling(args)
    _error_share(args)  # checked before anything is generated
    options = _engine_options(arms, args)
    _check_plot_possible(args)
    items = _load_items(args)
    toolbox = make_toolbox(args)
    out = Path(args.out or f"runs/compare-{args.task}")
    out.mkdir(parents=True, exist_ok=True)
    _log("arms: " + ", ".join(f"{a['name']}={a['spec']}" for a in arms))
    try:
        records = _run_arms(arms, items, params, args, out, options, toolbox)
    finally:
        if toolbox is not None:
            toolbox.close()
    for name, rows in records.items():
        _write_jsonl(out / "samples" / f"{name}.jsonl", rows)
    report = build_report(arms, records, task=args.task, alpha=args.alpha, settings=_settings(params), steps=steps,
                          **_error_share(args))
    _finish(report, args, out, "report", out / "samples")
    return 0
