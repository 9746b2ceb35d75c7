"""The recipe-key reference (docs/reference/recipe-keys.md), generated from the schema, so every key is
documented once, at its field, and the page cannot drift from the code:

    python -m posttrain.recipe.reference > docs/reference/recipe-keys.md

tests/docs/test_docs.py fails when the committed page differs from what this prints. Besides
posttrain's own keys, `training` takes every field of the algorithm's TRL config; those keep TRL's
defaults (TRL documents them) except the ones posttrain states per algorithm, listed here.
"""

from __future__ import annotations

import importlib
import types
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

HEADER = """# Recipe keys

Generated from the schema by `python -m posttrain.recipe.reference` (`src/posttrain/recipe/reference.py`);
`tests/docs/test_docs.py` fails when this page and the code differ. Every key here is live or an error:
an unknown key gets a did-you-mean, a key that would do nothing in this recipe is refused with the reason
([Recipes](../guides/recipes.md)). `posttrain validate RECIPE` prints a recipe resolved, with every value
that differs from the library defaults and which layer set it.
"""


def _type(annotation) -> str:
    """A field's annotation as a reader writes it: `int or null`, `'nf4' / 'fp4'`, `list[str]`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin is typing.Literal:
        return " / ".join(repr(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type(a) for a in args)}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.default_factory is not None:
        made = field.default_factory()
        return f"`{made!r}`" if isinstance(made, (list, dict, str, int, float)) else "(its section's defaults)"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{field.default!r}`" if field.default is not None else "unset"


def _cell(text: str | None) -> str:
    return " ".join((text or "").replace("|", "/").split())


def table(model: type[BaseModel], prefix: str, only: set[str] | None = None) -> list[str]:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if only is not None and name not in only:
            continue
        rows.append(f"| `{prefix}{name}` | {_cell(_type(field.annotation))} | {_cell(_default(field))} | {_cell(field.description)} |")
    return rows + [""]


def _own_fields(model: type[BaseModel], parent: type[BaseModel]) -> set[str]:
    return set(model.model_fields) - set(parent.model_fields)


def markdown() -> str:
    from posttrain.evaluation.tasks import TASKS
    from posttrain.recipe.algorithms import ALGORITHMS
    from posttrain.recipe.data_section import DatasetSpec, DataSection
    from posttrain.recipe.defaults import defaults_for
    from posttrain.recipe.held_out_section import HeldOutSection
    from posttrain.recipe.model_section import ModelSection
    from posttrain.recipe.rl_section import DifficultyFilter, RewardSpec
    from posttrain.recipe.service_sections import S3Section, TrackingSection
    from posttrain.recipe.training_section import TrainingBase
    from posttrain.rewards.builtin import REWARDS

    out = [HEADER, "## model", "", *table(ModelSection, "model."),
           "## data", "", *table(DataSection, "data."),
           "### each entry of data.datasets / data.eval_datasets", "", *table(DatasetSpec, "data.datasets[i]."),
           "## training: posttrain's keys, every algorithm", "",
           "Besides these, `training` takes every field of the algorithm's TRL config (SFTConfig, DPOConfig, GRPOConfig, ...), "
           "with TRL's meaning and default unless the algorithm's defaults below say otherwise.", "",
           *table(TrainingBase, "training.")]
    users: dict[type, list[str]] = {}  # each section class below TrainingBase -> the algorithms whose section inherits it
    for name, row in ALGORITHMS.items():
        module, _, cls = row.section.partition(":")
        for klass in getattr(importlib.import_module(module), cls).__mro__:
            if klass is TrainingBase:
                break
            users.setdefault(klass, []).append(name)
    for klass, algorithms in users.items():
        own = _own_fields(klass, klass.__mro__[1])
        if own:
            out += [f"## training: keys of {', '.join(algorithms)}", "", *table(klass, "training.", own)]
    out += ["### each entry of training.rewards (GRPO, GSPO, RLOO)", "", *table(RewardSpec, "training.rewards[i]."),
            "### training.difficulty_filter (GRPO, GSPO, RLOO)", "", *table(DifficultyFilter, "training.difficulty_filter."),
            "## held_out", "", *table(HeldOutSection, "held_out."),
            "## tracking", "", *table(TrackingSection, "tracking."),
            "## s3", "", *table(S3Section, "s3."),
            "## Defaults posttrain states per algorithm", "",
            "Where posttrain's default differs from TRL's (or TRL has none), for a recipe that does not set the key:", "",
            "| key | algorithm | default |", "|---|---|---|"]  # the key first: names in a first column stay whole
    for name in ALGORITHMS:
        for key, value in defaults_for(name, {}).items():
            out.append(f"| `training.{key}` | {name} | `{value!r}` |")
    out += ["", "## Built-in rewards", "", "`training.rewards: [{name: NAME}]`; a function of your own is `{name: package.module:function}`.", "",
            "| name | what it pays |", "|---|---|"]
    for name, fn in REWARDS.items():
        out.append(f"| `{name}` | {_cell((fn.__doc__ or '').strip().split(chr(10) + chr(10))[0])} |")
    out += ["", "## Evaluation tasks", "", "`posttrain eval --task NAME` and `held_out.task`.", "", "| task | items |", "|---|---|"]
    out += [f"| `{name}` | {_cell(task.summary)} |" for name, task in TASKS.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
