"""`posttrain demo [--out DIR] [KEY=VALUE ...]`: the whole loop offline, from any install, in five commands.

    posttrain demo                                # runs/demo: SFT a tiny model, GRPO it, compare base/SFT/GRPO, report
    posttrain demo --out mine training.max_steps=20

Each stage is the posttrain command a user would type, run in its own process as `make demo` ran them
(the Makefile now calls this), on the shipped recipes demo/sft and demo/grpo: SFT, GRPO, a comparison on the 30 sums
no stage trains on and one on the 70 they train on, and the telemetry report; the commands are printed,
so the demo is also the tutorial. What the numbers mean: `posttrain docs results/demo`.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

CHAINED = ("training.output_dir", "model.base_model_name")  # the demo links the stages through these
MAX_NEW_TOKENS = 8  # a sum and its tags; the GRPO recipe's held-out scoring uses the same


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo", help="the whole loop offline: SFT a tiny model, GRPO it, compare base/SFT/GRPO, report (minutes on a CPU)",
        description="Run the demo into --out: `posttrain train` on the shipped recipe demo/sft (a random 1M-parameter model "
        "learns sums), `posttrain train` on demo/grpo (GRPO from that model, paid for the right sum inside <answer> tags), "
        "`posttrain compare` of base, SFT and GRPO with paired tests on the 30 held-out sums (no stage trains on them) and on "
        "the 70 trained sums, and `posttrain report` of the "
        "training telemetry. Each command is printed before it runs. KEY=VALUE overrides go to both training stages.",
        epilog="examples:\n  posttrain demo\n  posttrain demo --out runs/quick training.max_steps=20\n\n"
        "the recipes, to read or edit: posttrain recipes copy demo/sft && posttrain recipes copy demo/grpo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), metavar="DIR",
                   help="a new or empty folder for the models, the comparison and the telemetry (default runs/demo)")
    p.add_argument("items", nargs="*", metavar="KEY=VALUE", help="recipe overrides for both training stages")
    p.set_defaults(func=run)


def stages(out: Path, overrides: list[str], plots: bool) -> list[list[str]]:
    """The four commands of the demo, as argument lists after `posttrain`."""
    from posttrain import shipped
    from posttrain.recipe.problems import read_yaml

    base = read_yaml(shipped.find("demo/sft"))["model"]["base_model_name"]
    sft, grpo = out / "sft", out / "grpo"
    data = shipped.root() / "recipes" / "demo" / "data"
    report_plot = ["--plot", str(out / "telemetry.png")] if plots else []

    def compare(items: str, folder: str, plot: str) -> list[str]:
        return ["compare", "--arm", f"base={base}", "--arm", f"sft={sft}", "--arm", f"grpo={grpo}", "--task", "custom",
                "--data", str(data / items), "--max-new-tokens", str(MAX_NEW_TOKENS), "--no-progress", "--out", str(out / folder),
                *(["--plot", str(out / plot)] if plots else [])]

    return [
        ["train", "--recipe", "demo/sft", *overrides, f"training.output_dir={sft}"],
        ["train", "--recipe", "demo/grpo", *overrides, f"model.base_model_name={sft}", f"training.output_dir={grpo}"],
        compare("eval.jsonl", "compare", "accuracy.png"),  # the 30 held-out sums: no stage trains on them
        compare("trained.jsonl", "compare-trained", "accuracy-trained.png"),  # the 70 sums both stages train on
        ["report", str(sft), str(grpo), "--bins", "3", "--out", str(out / "telemetry.md"), *report_plot],
    ]


def run(args) -> int:
    from posttrain.errors import UserError

    out: Path = args.out
    chained = [item for item in args.items if item.split("=", 1)[0] in CHAINED]
    if chained:
        raise UserError(f"posttrain demo sets {' and '.join(CHAINED)} itself (--out, and GRPO starts from the SFT model); "
                        f"drop {chained[0]!r}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: not a new or empty folder (a previous demo?); remove it, or give another --out")
    plots = importlib.util.find_spec("matplotlib") is not None
    verbose = ["--verbose"] if args.verbose else []
    commands = stages(out, list(args.items), plots)
    for number, command in enumerate(commands, 1):
        print(f"\n== demo {number}/{len(commands)}: posttrain {shlex.join(command)}", flush=True)
        done = subprocess.run([sys.executable, "-m", "posttrain", *command, *verbose])
        if done.returncode != 0:
            print(f"demo stopped: stage {number} exited with {done.returncode}", file=sys.stderr)
            return done.returncode
    print(f"\ndemo done. Accuracy and paired tests on the 30 held-out sums: {out / 'compare' / 'report.md'}"
          + (f" (plot {out / 'accuracy.png'})" if plots else "")
          + f"; on the 70 trained sums: {out / 'compare-trained' / 'report.md'}")
    print(f"training telemetry, health and speed: {out / 'telemetry.md'}" + (f" (plot {out / 'telemetry.png'})" if plots else "")
          + f"; models in {out / 'sft'}, {out / 'grpo'}")
    if not plots:
        print("plots: pip install matplotlib (or posttrain[plot]) and run the demo again")
    return 0
