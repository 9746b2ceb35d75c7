"""Every pointer a user meets in `--help`, an error or a start-up line leads to something every install has: a page
`posttrain docs` prints, a recipe or file `posttrain recipes copy` copies, a shipped path; never a path into the
repository (docs/..., benchmarks/..., tests/..., src/..., README.md, a make target), which a wheel user lacks.

The texts: every string in src/posttrain that is not a docstring (help, descriptions, messages), and the help of
every command as argparse prints it."""

import argparse
import ast
import re
from pathlib import Path

import pytest

from posttrain import shipped
from posttrain.cli import build_parser
from posttrain.commands.docs import find, pages

SRC = Path(__file__).resolve().parents[2] / "src" / "posttrain"
REPOSITORY_PATH = re.compile(r"(?<![\w/.-])(?:docs|benchmarks|tests|src|NOTES|README)[/.][\w./-]*|\bmake (?:demo|docs|test)\b")
SHIPPED_PATH = re.compile(r"(?<![\w/.<-])(?:recipes|examples)/[a-z0-9_./-]*\.(?:yaml|jsonl|jinja|py)\b")  # not a placeholder (NAME)
# Strings that name such a path for another reason: the run folder's own README.md (posttrain.algorithms.run_card),
# the prefix `posttrain docs docs/guides/grpo.md` strips, and the recipe-key page's header for its maintainers.
NOT_POINTERS = {("algorithms/run_card.py", "README.md"), ("commands/docs.py", "docs/"), ("recipe/reference.py", None)}


def strings() -> list[tuple[str, int, str]]:
    """(module, line, text) of every string constant in the package that is not a docstring."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        module = path.relative_to(SRC).as_posix()
        found += [(module, node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]
    return found


def help_texts() -> dict[str, str]:
    parser = build_parser()
    texts = {"posttrain --help": parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            texts.update({f"posttrain {name} --help": sub.format_help() for name, sub in action.choices.items()})
    return {where: " ".join(text.split()) for where, text in texts.items()}  # argparse wraps lines at spaces only


def test_no_help_text_or_message_points_into_the_repository():
    bad = [f"{module}:{line}: {match.group()!r}" for module, line, text in strings() for match in REPOSITORY_PATH.finditer(text)
           if (module, match.group()) not in NOT_POINTERS and (module, None) not in NOT_POINTERS]
    bad += [f"{where}: {match.group()!r}" for where, text in help_texts().items() for match in REPOSITORY_PATH.finditer(text)]
    assert bad == [], "name a page (`posttrain docs PAGE`) or a shipped file instead:\n" + "\n".join(bad)


def test_every_page_and_shipped_file_a_text_names_is_there():
    texts = [text for _, _, text in strings()] + list(help_texts().values())
    known = pages()
    named_pages = {m for text in texts for m in re.findall(r"`posttrain docs ([\w/.-]+)", text)}
    copied = {m for text in texts for m in re.findall(r"`posttrain recipes copy ([\w/.-]+)`", text)}
    paths = {m.group() for text in texts for m in SHIPPED_PATH.finditer(text)}
    assert {"grpo", "rollouts", "cpu-performance", "getting-started"} <= named_pages  # the scan sees the pointers
    assert {"reward/tiny-cpu", shipped.CHATML_TOOLS} <= copied
    for page in named_pages:
        assert find(page, known).is_file(), page
    assert [name for name in copied if shipped.find(name) is None and shipped.shipped_file(name) is None] == []
    assert [path for path in paths if not (shipped.root() / path).exists()] == []


@pytest.mark.parametrize("name", ["grpo", "guides/grpo", "guides/grpo.md", "docs/guides/grpo.md"])
def test_a_page_goes_by_its_name_or_its_last_part(name):
    assert find(name, pages()) == shipped.root() / "docs" / "guides" / "grpo.md"
