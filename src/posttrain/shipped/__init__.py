"""The recipes, chat templates, example data, example reward and guide pages posttrain ships, from any install.

    posttrain train --recipe sft/tiny-cpu                  # a shipped recipe by name, from any folder
    posttrain recipes                                      # what is shipped
    posttrain recipes copy sft/tiny-cpu mine/              # the recipe and the files it names, to edit
    posttrain recipes copy examples/rewards/my_reward.py   # one shipped file, at the same path here
    posttrain docs grpo                                    # a guide page (posttrain.commands.docs)

They live in the repository's `recipes/`, `examples/` and `docs/`. This package holds a symbolic link to
each (`recipes -> ../../../recipes`): a checkout or an editable install reads the repository's own files
through them, and the wheel carries copies as package data (setuptools follows the links; pyproject.toml's
package-data). They are found with importlib.resources, so every install mode has them: a prefix, a venv,
`pip install --user` and `pip install --target DIR` alike. (The links need a clone that keeps symbolic
links: git's default everywhere but Windows.)

A recipe names its data relative to that root (`examples/data/sft.jsonl`), so a shipped recipe loaded by
name from another folder has each such path made absolute; everything else (output_dir, a model a previous
stage wrote) stays relative to the working directory, where the run writes.
"""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

from posttrain.errors import UserError

CHATML_TOOLS = "recipes/templates/chatml-tools.jinja"  # the ChatML template that renders tools (SmolLM2's ignores them)
SHIPPED_FOLDERS = ("recipes", "examples")  # what a shipped recipe's paths may point into; runs/ and the rest stay the user's


def root() -> Path:
    """The folder holding `recipes/`, `examples/` and `docs/`: this package's own folder."""
    here = files(__name__)
    if not isinstance(here, Path):  # imported from a zip archive: recipes must name real files
        raise UserError(f"posttrain is imported from an archive ({here}); install it with pip, which unpacks it")
    return here


def names() -> list[str]:
    """Every shipped recipe, as `posttrain train --recipe` takes it (`sft/tiny-cpu`)."""
    recipes = root() / "recipes"
    if not recipes.is_dir():
        return []
    return sorted(str(p.relative_to(recipes).with_suffix("")) for p in recipes.rglob("*.yaml"))


def find(name: str | Path) -> Path | None:
    """The shipped recipe `name` names (`sft/tiny-cpu`, `sft/tiny-cpu.yaml` or `recipes/sft/tiny-cpu.yaml`), or None."""
    text = str(name).removeprefix("recipes/")
    for candidate in (text, f"{text}.yaml"):
        path = root() / "recipes" / candidate
        if path.suffix == ".yaml" and path.is_file():
            return path
    return None


def shipped_file(name: str | Path) -> Path | None:
    """A shipped file by its path under the root (`examples/rewards/my_reward.py`,
    `recipes/templates/chatml-tools.jinja`), or None."""
    text = Path(name).as_posix()
    return root() / text if shipped_path(text, root()) and (root() / text).is_file() else None


def copy_hint(rel: str) -> str:
    """`rel` as an error message names a shipped file: with the command that puts it where the user is."""
    return f"{rel}, which `posttrain recipes copy {rel}` puts here"


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
    """Copy shipped recipe `name` and every file it names, or the one shipped file `name` is, into `dest`,
    at the same relative paths, so `posttrain train --recipe <dest>/recipes/...` works from `dest`.
    Existing files are never replaced."""
    import yaml

    base = root()
    source = find(name) or shipped_file(name)
    if source is None:
        raise UserError(f"no shipped recipe or file {name!r}; `posttrain recipes` lists the recipes, "
                        "and a file goes by its path (recipes/templates/chatml-tools.jinja, examples/rewards/my_reward.py)")
    named = set()
    if source.suffix == ".yaml":
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
