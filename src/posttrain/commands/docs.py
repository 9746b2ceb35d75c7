"""`posttrain docs [PAGE] [--path]`: the user guide that ships with posttrain, offline.

    posttrain docs                     # every page: its name and title
    posttrain docs grpo                # a page's markdown (guides/grpo.md), to read or pipe to a pager
    posttrain docs grpo --path         # where it is, to open in an editor or a markdown viewer

The pages are the docs site's markdown (posttrain.shipped), so help texts and error messages can name a page
that every install has: `posttrain docs rollouts`, never a path into a repository the user may not have.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "docs", help="the user guide, offline: list its pages or print one",
        description="Without PAGE: every page of the guide that ships with posttrain, with its title. With PAGE "
        "(`grpo`, `guides/grpo` or `guides/grpo.md`): the page's markdown, or with --path the file's location.",
        epilog="examples:\n  posttrain docs\n  posttrain docs getting-started | less\n  posttrain docs grpo --path",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("page", nargs="?", help="a page's name as the list gives it, or its last part when that is unique")
    p.add_argument("--path", action="store_true", help="print the page's file path instead of its text")
    p.set_defaults(func=run)


def pages() -> dict[str, Path]:
    """Every page by name: its path under docs/ without `.md` (`guides/grpo`, `index`)."""
    from posttrain import shipped

    folder = shipped.root() / "docs"
    return {p.relative_to(folder).with_suffix("").as_posix(): p for p in sorted(folder.rglob("*.md"))} if folder.is_dir() else {}


def title(path: Path) -> str:
    """The page's first heading."""
    return next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("# ")), "")


def find(name: str, known: dict[str, Path]) -> Path:
    """The page `name` names: its full name, or a last part only one page has; else exit 2 with the near names."""
    from posttrain.errors import UserError

    wanted = name.removeprefix("docs/").removesuffix(".md")
    if wanted in known:
        return known[wanted]
    by_stem = [path for key, path in known.items() if key.rsplit("/", 1)[-1] == wanted]
    if len(by_stem) == 1:
        return by_stem[0]
    if by_stem:
        raise UserError(f"docs page {name!r} is ambiguous: " + ", ".join(k for k in known if k.rsplit("/", 1)[-1] == wanted))
    near = difflib.get_close_matches(wanted, list(known) + [k.rsplit("/", 1)[-1] for k in known], n=3)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise UserError(f"no docs page {name!r}{hint}; `posttrain docs` lists them")


def run(args) -> int:
    from posttrain.errors import UserError

    known = pages()
    if not known:
        raise UserError("no docs pages found: this posttrain was installed without its package data (reinstall the wheel)")
    if args.page is None:
        width = max(map(len, known))
        for name, path in known.items():
            print(f"{name.ljust(width)}  {title(path)}")
        return 0
    page = find(args.page, known)
    print(page if args.path else page.read_text(), end="\n" if args.path else "")
    return 0
