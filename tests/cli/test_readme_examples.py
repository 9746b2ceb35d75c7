"""The docs' and the help texts' examples can be run as written: the `posttrain train` examples in
README.md and every page under docs/ do not collide on one output_dir (a second recipe in a finished
run's folder is refused, and a reader runs examples from several pages in one clone), and the files
the help examples name exist (or are a run folder an earlier example writes)."""

import re
import shlex
from pathlib import Path

import yaml

from posttrain.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def doc_files() -> list[Path]:
    """README.md and every page of the docs site."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def train_examples() -> list[tuple[str, list[str]]]:
    """(file, argv) of every `posttrain train --recipe recipes/...` line in a ```bash block."""
    lines = []
    for path in doc_files():
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
            for line in block.splitlines():
                if line.startswith("posttrain train --recipe recipes/"):
                    lines.append((str(path.relative_to(REPO)), shlex.split(line.split("#")[0])))
    return lines


def output_dir(argv: list[str]) -> str:
    recipe = argv[argv.index("--recipe") + 1]
    for item in argv:
        if item.startswith("training.output_dir="):
            return item.split("=", 1)[1]
    return yaml.safe_load((REPO / recipe).read_text())["training"]["output_dir"]


def test_doc_train_examples_each_write_their_own_folder():
    seen: dict[str, tuple] = {}
    where: dict[str, str] = {}
    examples = train_examples()
    assert len(examples) >= 10
    assert any(file == "README.md" for file, _ in examples), "the README shows no `posttrain train` example"
    for file, argv in examples:
        run = (argv[argv.index("--recipe") + 1], tuple(a for a in argv[3:] if "=" in a and not a.startswith("training.max_steps=")))
        folder = output_dir(argv)
        where.setdefault(folder, file)
        assert seen.setdefault(folder, run) == run, f"{folder}: written by {seen[folder]} ({where[folder]}) and {run} ({file})"


def test_help_examples_name_files_that_exist():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    named = []
    for command in ("generate", "eval", "compare"):
        epilog = sub.choices[command].epilog or ""
        for line in epilog.splitlines():
            if line.strip().startswith("posttrain "):
                named += [w for w in shlex.split(line) if w.startswith(("examples/", "recipes/")) or w.endswith((".jsonl", ".txt"))]
    assert named
    missing = [p for p in named if not (REPO / p).exists()]
    assert missing == []
