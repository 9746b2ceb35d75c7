"""How much of its bound each float comparison of the model-level tests uses under each CPU kind's kernels, and how far
the greedy-token tests' tokens are from a tie (docs/results/test-suite.md, "Tolerance review").

    python benchmarks/tolerance_review.py                     # this CPU, then avx512 and AVX2 kernels on it
    python benchmarks/tolerance_review.py --kinds avx2 --files tests/e2e/test_padding_note.py

Each kind runs the files in a fresh pytest process with that kind's kernels (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS) and, where this runs as root, with that kind's /proc/cpuinfo flags bound over the real ones
in a private mount namespace (`unshare -m`), because posttrain decides bf16 autocast and its speed paths from those
flags. benchmarks/_tolerance_meter.py records the share of its bound each comparison used (1.0 fails). An emulated
kind runs the same instructions' code paths, not that CPU's clock: timings here mean nothing.

Writes benchmarks/results/tolerance_review.json and .md."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FILES = ["tests/models/test_cpu_attention.py", "tests/models/test_flat_batches.py", "tests/models/test_cpu_lm_head.py",
         "tests/models/test_fast_paths_every_family.py", "tests/generation/test_fast_decode.py"]
KINDS = {  # the kernels of each CPU kind, and the /proc/cpuinfo flags it lacks
    "native": ({}, ""),
    "avx512": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, r"amx_\w+"),
    "avx2": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
             r"amx_\w+|avx512\w*|avx_vnni\w*|avx10\w*"),
}


def as_kind(kind: str, command: list[str], work: Path) -> tuple[list[str], dict, bool]:
    """The command, environment and whether /proc/cpuinfo shows the kind's flags (root only)."""
    env_vars, lacks = KINDS[kind]
    env = {**os.environ, **env_vars}
    if not lacks or os.geteuid() != 0:
        return command, env, False
    text = Path("/proc/cpuinfo").read_text()
    fake = work / f"cpuinfo_{kind}"
    fake.write_text("\n".join(re.sub(rf" (?:{lacks})(?= |$)", "", line) if line.startswith("flags") else line
                              for line in text.splitlines()) + "\n")
    script = f'mount --bind {fake} /proc/cpuinfo && exec "$@"'
    return ["unshare", "-m", "bash", "-c", script, "_", *command], env, True


def run_kind(kind: str, files: list[str], work: Path) -> dict:
    out = {"env": KINDS[kind][0], "files": {}}
    usage = work / f"usage_{kind}.jsonl"
    for name in files:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_tolerance_meter", name]
        command, env, flags = as_kind(kind, command, work)
        env.update(TOLERANCE_METER_OUT=str(usage), PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])))
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        summary = next((line for line in reversed(done.stdout.splitlines()) if re.search(r"\d+ (passed|failed)", line)), done.stdout[-300:])
        out["files"][name] = {"result": re.sub(r"=+", "", summary).strip(), "failed": [line.split(" - ")[0][7:]
                              for line in done.stdout.splitlines() if line.startswith("FAILED ")]}
        out["cpuinfo_flags_of_kind"] = flags
        print(f"{kind:7s} {name}: {out['files'][name]['result']}", flush=True)
    rows = [json.loads(line) for line in usage.read_text().splitlines()] if usage.exists() else []
    out["usage"] = rows
    return out


def greedy_margins() -> dict:
    """The smallest gap between the top two logits along `generate`'s greedy tokens, for the greedy-equality tests'
    inputs (their tokens can differ between kernels only where that gap is under the kernels' logit difference)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "models"), str(REPO / "tests" / "generation")]
    from families import FAMILIES, WINDOW, family_model
    from test_fast_decode import QUESTIONS, batch, config, with_lora
    from test_fast_paths_every_family import rows

    from posttrain.models.tiny import resolve_tiny

    torch.set_num_threads(1)

    def smallest_gap(model, ids, mask, cfg) -> float:
        cfg = GenerationConfig(**cfg.to_diff_dict(), output_logits=True, return_dict_in_generate=True)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        stops = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
        new, gaps = out.sequences[:, ids.shape[1]:], []
        for row in range(len(ids)):
            for step, logits in enumerate(out.logits):
                if any(int(t) in stops for t in new[row, :step]):
                    break
                top = logits[row].float().topk(2).values
                gaps.append(float(top[0] - top[1]))
        return min(gaps)

    tiny = resolve_tiny("tiny:qwen2-1m")
    tokenizer, model = AutoTokenizer.from_pretrained(tiny), AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    ids, mask = batch(tokenizer, QUESTIONS, copies=2)
    greedy = config(tokenizer, max_new_tokens=12, do_sample=False)
    margins = {"test_fast_decode (tiny:qwen2-1m)": smallest_gap(model, ids, mask, greedy),
               "test_fast_decode (tiny:qwen2-1m + LoRA)": smallest_gap(with_lora(model), ids, mask, greedy)}
    for family in FAMILIES:
        parts = rows([5, 11, 9, 11], seed=5)
        parts[3] = parts[1]
        width = max(len(r) for r in parts)
        ids = torch.stack([torch.cat([r.new_zeros(width - len(r)), r]) for r in parts])
        mask = torch.stack([torch.cat([torch.zeros(width - len(r), dtype=torch.long), torch.ones(len(r), dtype=torch.long)]) for r in parts])
        cfg = GenerationConfig(max_new_tokens=3 * WINDOW, do_sample=False, eos_token_id=2, pad_token_id=0)
        margins[f"test_fast_paths_every_family ({family})"] = smallest_gap(family_model(family).eval(), ids, mask, cfg)
    return margins


def most_used(kinds: dict) -> dict:
    """Per test (parameters folded) and bound: the largest share of the bound used, per kind."""
    table: dict = {}
    for kind, result in kinds.items():
        for row in result["usage"]:
            test = re.sub(r"\[.*\]", "", row["test"].split("::", 1)[-1])
            bound = "2 x bf16 rounding" if row["kind"] == "within_bf16_rounding" else f"rtol={row['rtol']:g}, atol={row['atol']:.0e}"
            key = f"{row['test'].split('::')[0].split('/')[-1]}::{test} | {bound}"
            table.setdefault(key, {})[kind] = max(table.get(key, {}).get(kind, 0.0), row["used"])
    return dict(sorted(table.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--files", nargs="+", default=FILES)
    parser.add_argument("--no-margins", action="store_true", help="skip the greedy margins")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "tolerance_review.json")
    args = parser.parse_args()
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), [])
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory() as work:
        kinds = {kind: run_kind(kind, args.files, Path(work)) for kind in args.kinds}
    report = {"date": started, "command": " ".join(["python", "benchmarks/tolerance_review.py", *sys.argv[1:]]),
              "cpu_flags": [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags],
              "outcomes": {kind: {**{k: v for k, v in r.items() if k != "usage"}} for kind, r in kinds.items()},
              "most_used_share_of_bound": most_used(kinds)}
    if not args.no_margins:
        report["greedy_smallest_top2_gap"] = greedy_margins()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"# Tolerance review: share of each bound used ({report['date']})", "", f"`{report['command']}` on a CPU with "
             f"{', '.join(report['cpu_flags'])}; kinds other than native: that kind's kernels (and /proc/cpuinfo flags where "
             "run as root). 1.0 would fail; a share above 1.0 belongs to a `not torch.allclose`, a check that two results differ.",
             "", "| comparison | bound | " + " | ".join(args.kinds) + " |",
             "|---|---|" + "---|" * len(args.kinds)]
    for key, used in report["most_used_share_of_bound"].items():
        test, bound = key.split(" | ")
        lines.append(f"| {test} | {bound} | " + " | ".join(f"{used[k]:.3f}" if k in used else "-" for k in args.kinds) + " |")
    lines += ["", "| file | " + " | ".join(args.kinds) + " |", "|---|" + "---|" * len(args.kinds)]
    for name in args.files:
        lines.append(f"| {name} | " + " | ".join(report["outcomes"][k]["files"][name]["result"] for k in args.kinds) + " |")
    if "greedy_smallest_top2_gap" in report:
        lines += ["", "| greedy test | smallest top-1 minus top-2 logit |", "|---|---|"]
        lines += [f"| {name} | {gap:.2e} |" for name, gap in report["greedy_smallest_top2_gap"].items()]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
