"""Proof that images reach a vision-language model: train on coloured shapes, test on held-out images.

    python benchmarks/vlm_shapes.py [--steps 1000] [--n-train 1500] [--n-test 200] [--out runs/vlm-shapes]

Three arms, all `tiny:llava-2m` (random init, CPU):
* untrained -- the model as built;
* images    -- `posttrain train --recipe recipes/sft_vlm/tiny-cpu.yaml` on the shapes task
               (`posttrain.data.shapes`: "What colour is the square?", "Where is the circle?",
               "How many shapes are there?");
* blank     -- the same recipe, seed, questions and answers, but every training image blanked (one
               flat colour): what a model can learn from the text alone.
Then `posttrain compare` scores all three on the same held-out images (a disjoint seed) and gives
McNemar tests and CIs. The images arm must beat 2x chance and the untrained model significantly;
the blank arm must stay near chance. Chance is the expected accuracy of uniform guessing (1/4:
every question has four answers). Writes OUT/result.json and OUT/result.md and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))


def run(cmd: list[str]) -> str:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "posttrain", *cmd], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): posttrain {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    print(f"  posttrain {cmd[0]} ... {time.perf_counter() - started:.0f} s", flush=True)
    return proc.stdout


def main(argv: list[str] | None = None) -> dict:
    from posttrain.data.shapes import chance, write_all

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="training steps per arm")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--n-train", type=int, default=1500)
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "vlm-shapes")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    started = time.perf_counter()

    real = write_all(out / "data", n=args.n_train, n_test=args.n_test, seed=args.seed)
    blank = write_all(out / "data-blank", n=args.n_train, n_test=1, seed=args.seed, blank=True)
    test_items = [json.loads(line) for line in real["test"].read_text().splitlines()]
    expected = chance(test_items)

    common = [f"training.max_steps={args.steps}", f"training.per_device_train_batch_size={args.batch}",
              f"training.learning_rate={args.lr}", f"training.seed={args.seed}", "training.save_steps=100000",
              "training.logging_steps=25", "training.warmup_steps=20", "training.resume_from_checkpoint=false"]
    arms, procs = {}, {}
    print("training the images and blank arms side by side (one thread each: 2 cores, 2 processes)", flush=True)
    t0 = time.perf_counter()
    for name, data in (("images", real["train"]), ("blank", blank["train"])):
        arms[name] = out / name
        cmd = [sys.executable, "-m", "posttrain", "train", "--recipe", "recipes/sft_vlm/tiny-cpu.yaml",
               f"training.output_dir={arms[name]}", f"data.datasets[0].name={data}", *common]
        log = open(out / f"{name}.log", "w")
        procs[name] = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for name, proc in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"training the {name} arm failed: see {out / (name + '.log')}")
    print(f"  both arms trained in {time.perf_counter() - t0:.0f} s", flush=True)
    print("comparing on held-out images", flush=True)
    run(["compare", "--arm", "untrained=tiny:llava-2m", "--arm", f"images={arms['images']}", "--arm", f"blank={arms['blank']}",
         "--task", "custom", "--data", str(real["test"]), "--image-column", "image", "--max-new-tokens", "8",
         "--out", str(out / "compare"), "--no-cache"])
    report = json.loads((out / "compare" / "report.json").read_text())
    seconds = time.perf_counter() - started

    acc = {a["arm"]: (a["strict_correct"], a["n"]) for a in report["arms"]}
    p_vs_untrained = {c["arm_b"]: c for c in report["comparisons"] if c["metric"] == "strict" and c["arm_a"] == "untrained"}
    rows = []
    for name in ("untrained", "images", "blank"):
        correct, n = acc[name]
        c = p_vs_untrained.get(name)
        rows.append({"arm": name, "correct": correct, "n": n, "accuracy": correct / n, "x_chance": correct / n / expected,
                     "p_vs_untrained": c["p_value"] if c else None, "fixed": c["fixed"] if c else None, "broken": c["broken"] if c else None})
    images, blank_row = rows[1], rows[2]
    verdict = {
        "images >= 2x chance": images["accuracy"] >= 2 * expected,
        "images beats untrained (p < 0.05)": images["p_vs_untrained"] < 0.05 and images["fixed"] > images["broken"],
        "blank near chance (< 1.5x)": blank_row["accuracy"] < 1.5 * expected,
    }
    result = {"chance": expected, "rows": rows, "verdict": verdict, "wall_seconds": round(seconds, 1), "settings": vars(args) | {"out": str(out)},
              "comparisons": report["comparisons"]}
    lines = [f"| arm | strict accuracy | x chance | McNemar p vs untrained (fixed/broken) |", "|---|---|---|---|"]
    for r in rows:
        p = "-" if r["p_vs_untrained"] is None else f"{r['p_vs_untrained']:.2g} ({r['fixed']}/{r['broken']})"
        lines.append(f"| {r['arm']} | {100 * r['accuracy']:.1f}% ({r['correct']}/{r['n']}) | {r['x_chance']:.2f} | {p} |")
    lines.append(f"\nchance (uniform guess per question) {100 * expected:.1f}%; wall time {seconds / 60:.1f} min; "
                 + "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in verdict.items()))
    table = "\n".join(lines)
    print(table)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "result.md").write_text(table + "\n")
    return result


if __name__ == "__main__":
    main()
