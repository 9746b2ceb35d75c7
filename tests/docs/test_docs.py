"""The docs site (mkdocs.yml, docs/) builds, and its results point at files that exist.

- `mkdocs build --strict` succeeds: every link between pages resolves, anchors included
  (mkdocs.yml's `validation`), and no page is left out of the navigation. Without mkdocs the test
  skips, except in CI (CI=true), where it fails: the docs would go unchecked.
- Every `benchmarks/results/...` path that a results page or the README names in inline code
  exists: a measurement's committed result file is part of its claim.
- Every results page carries a date; the CLI page lists exactly the commands `posttrain --help` lists.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
RESULTS_PAGES = sorted((REPO / "docs" / "results").glob("*.md"))


def require_mkdocs() -> None:
    missing = [name for name in ("mkdocs", "material") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    why = (f"{' and '.join(missing)} not installed: pip install 'mkdocs>=1.6,<2' 'mkdocs-material>=9,<10' "
           "to build the docs site")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {why}")
    pytest.skip(why)


def test_site_builds_strictly(tmp_path):
    require_mkdocs()
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "index.html").is_file()
    assert (site / "results" / "index.html").is_file()


def inline_code(markdown: str) -> list[str]:
    """The inline code spans of a page, fenced blocks left out (a span may wrap onto the next line)."""
    prose = re.sub(r"^\s*```.*?^\s*```", "", markdown, flags=re.S | re.M)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]


def expand_braces(path: str) -> list[str]:
    """`pass_costs_{bf16,float32}_1t.json` names two files."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [p for part in match.group(1).split(",")
            for p in expand_braces(path[:match.start()] + part + path[match.end():])]


def cited_result_files() -> list[tuple[str, str]]:
    cited = []
    for page in [REPO / "README.md", *RESULTS_PAGES]:
        for span in inline_code(page.read_text()):
            # a span is a path (`benchmarks/results/x.json`) or a command that names one (`--out benchmarks/...`)
            for word in span.split():
                if word.startswith("benchmarks/results/"):
                    cited += [(str(page.relative_to(REPO)), path) for path in expand_braces(word)]
    return cited


def test_inline_code_finds_paths():
    assert inline_code("see `benchmarks/results/a.json` and\n`benchmarks/results/\nb.json`\n```\n`c`\n```\n") == [
        "benchmarks/results/a.json", "benchmarks/results/ b.json"]
    assert expand_braces("r/x_{bf16,float32}_1t.json") == ["r/x_bf16_1t.json", "r/x_float32_1t.json"]


def test_cited_result_files_exist():
    cited = cited_result_files()
    assert len(cited) >= 20, cited  # the results pages do cite their files
    missing = [f"{page}: {path}" for page, path in cited if not (REPO / path).exists()]
    assert missing == [], "result files named but not in the repository:\n" + "\n".join(missing)


def test_every_results_page_is_dated():
    undated = [page.name for page in RESULTS_PAGES
               if page.name != "index.md" and not re.search(r"\b20\d\d-\d\d\b", page.read_text())]
    assert RESULTS_PAGES and undated == []


def test_cli_page_lists_every_command():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    table = "\n".join(["| command | what it does |", "|---|---|"]
                      + [f"| `posttrain {a.dest}` | {a.help} |" for a in sub._choices_actions])
    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    generated = re.search(r"<!-- generated from posttrain.cli.build_parser.*?-->\n(.*?)\n<!-- end of generated table -->",
                          page, flags=re.S)
    assert generated, "docs/reference/cli.md lost its generated-table markers"
    assert generated.group(1) == table, f"docs/reference/cli.md is out of date; its table should read:\n{table}"


def test_readme_links_resolve():
    """The README links into docs/ (GitHub renders those as pages); each target must exist."""
    links = re.findall(r"\]\(([^)\s]+)\)", (REPO / "README.md").read_text())
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links no docs page"
    missing = [link for link in local if not (REPO / link).exists()]
    assert missing == [], f"README links to files that do not exist: {missing}"
