"""The recipes, chat templates and example data posttrain ships, from a source checkout or an installed wheel.

    posttrain train --recipe sft/tiny-cpu          # a shipped recipe by name, from any folder
    posttrain recipes                              # what is shipped
    posttrain recipes copy sft/tiny-cpu mine/      # the recipe and the files it names, to edit

In a checkout they are the repository's `recipes/` and `examples/`; a wheel installs them under
`<prefix>/share/posttrain/` (pyproject.toml's data-files). A recipe names its data relative to that
root (`examples/data/sft.jsonl`), so a shipped recipe loaded by name from another folder has each
such path made absolute; everything else (output_dir, a model a previous stage wrote) stays
relative to the working directory, where the run writes.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

from posttrain.errors import UserError


def root() -> Path | None:
    """The folder holding `recipes/` and `examples/`: the checkout this code runs from, else the installed copy."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "recipes").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout
    schemes = [None, f"{os.name}_user"] if os.name == "posix" else [None]
    for scheme in schemes:
        try:
            installed = Path(sysconfig.get_path("data", scheme) if scheme else sysconfig.get_path("data")) / "share" / "posttrain"
        except KeyError:
            continue
        if (installed / "recipes").is_dir():
            return installed
    return None


def names() -> list[str]:
    """Every shipped recipe, as `posttrain train --recipe` takes it (`sft/tiny-cpu`)."""
    base = root()
    if base is None:
        return []
    return sorted(str(p.relative_to(base / "recipes").with_suffix("")) for p in (base / "recipes").rglob("*.yaml"))


def find(name: str | Path) -> Path | None:
    """The shipped recipe `name` names (`sft/tiny-cpu`, `sft/tiny-cpu.yaml` or `recipes/sft/tiny-cpu.yaml`), or None."""
    base = root()
    if base is None:
        return None
    text = str(name).removeprefix("recipes/")
    for candidate in (text, f"{text}.yaml"):
        path = base / "recipes" / candidate
        if path.suffix == ".yaml" and path.is_file():
            return path
    return None


SHIPPED_FOLDERS = ("recipes", "examples")  # what a shipped recipe's paths may point into; runs/ and the rest stay the user's


def strings(raw):
    """Every string in a recipe's mapping, however deep."""
    if isinstance(raw, dict):
        raw = list(raw.values())
    if isinstance(raw, list):
        return [s for v in raw for s in strings(v)]
    return [raw] if isinstance(raw, str) else []


def shipped_path(text: str, base: Path) -> bool:
    """A relative path into the shipped folders under `base` (the data, templates and images a recipe names;
    never its output_dir or a model an earlier stage writes)."""
    return text.split("/")[0] in SHIPPED_FOLDERS and (base / text).exists()


def rooted(raw, base: Path):
    """`raw` with each shipped path that is not also one here made absolute."""
    if isinstance(raw, dict):
        return {k: rooted(v, base) for k, v in raw.items()}
    if isinstance(raw, list):
        return [rooted(v, base) for v in raw]
    if isinstance(raw, str) and shipped_path(raw, base) and not Path(raw).exists():
        return str(base / raw)
    return raw


def copy(name: str, dest: Path) -> list[Path]:
    """Copy shipped recipe `name` and every file it names into `dest`, at the same relative paths, so
    `posttrain train --recipe <dest>/recipes/...` works from `dest`. Existing files are never replaced."""
    import yaml

    source = find(name)
    if source is None:
        raise UserError(f"no shipped recipe {name!r}; `posttrain recipes` lists them")
    base = root()
    named = {t for t in strings(yaml.safe_load(source.read_text())) if shipped_path(t, base) and (base / t).is_file()}
    wanted = [str(source.relative_to(base))] + sorted(named)
    for rel in wanted:
        if (dest / rel).exists():
            raise UserError(f"{dest / rel} exists already; copy into another folder, or remove it first")
    written = []
    for rel in wanted:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        written.append(Path(shutil.copy2(base / rel, dest / rel)))
    return written
