"""`posttrain report RUN_DIR [RUN_DIR ...]`: training telemetry side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from posttrain.flag_types import COUNT


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="training telemetry of runs side by side (reward, length, entropy, KL, clipping)",
        description="Average what each run logged (metrics.jsonl) over N step ranges and print one table per metric, "
        "runs side by side. A run with beta=0 is flagged: it has no KL term at all.",
        epilog="example: posttrain report runs/grpo-beta0 runs/grpo-beta0.04 --bins 4 --plot telemetry.png --html report.html",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="training output directories")
    p.add_argument("--bins", type=COUNT, default=4, help="number of step ranges (default 4)")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw every metric's curve per run")
    p.add_argument("--out", type=Path, metavar="FILE.md", help="also write the tables as markdown")
    p.add_argument("--html", type=Path, metavar="FILE.html", help="also write one self-contained HTML page: plot, health, "
                   "speed and every table (needs matplotlib for the plot)")
    p.set_defaults(func=run)


def run(args) -> int:
    from posttrain.errors import UserError
    from posttrain.evaluation.telemetry import load_run, plot, render

    if args.bins < 1:
        raise UserError(f"--bins must be at least 1, got {args.bins}")
    runs = [load_run(path) for path in args.runs]
    text = render(runs, args.bins)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.plot:
        plot(runs, args.plot)
        print(f"plot written to {args.plot}")
    if args.html:
        import tempfile

        from posttrain.evaluation.html_report import write_html

        with tempfile.TemporaryDirectory() as tmp:
            image = args.plot or Path(tmp) / "telemetry.png"
            if not args.plot:
                plot(runs, image)
            tables, _, health = text.partition("\n## health")
            first = f"## health{health}\n\n{tables}" if health else text  # health and speed first on the page
            write_html(args.html, first, [image], title="posttrain report: " + ", ".join(r.name for r in runs))
        print(f"HTML report written to {args.html}")
    return 0
