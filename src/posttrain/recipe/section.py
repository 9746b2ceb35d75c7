"""The base of every recipe section and the error type of cross-field checks (pydantic only)."""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel, ConfigDict


class Problems(ValueError):
    """Several independent problems found by one cross-field check, each with its own key path.

    Pydantic stops a model's checks at the first ValueError; a check that gathers every problem it
    sees and raises them together lets `posttrain validate` report them in one pass.
    """

    def __init__(self, items: list[tuple[str, str]]):
        self.items = items  # (key path, message)
        super().__init__("; ".join(f"{k}: {m}" for k, m in items))


def raise_all(items: list[tuple[str, str]]) -> None:
    if items:
        raise Problems(items)


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_default=True, validate_assignment=True)



def unwrap(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, list, Annotated, Union)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if origin in (typing.Union, types.UnionType, list, typing.Annotated):
        args = typing.get_args(annotation)[:1] if origin is typing.Annotated else typing.get_args(annotation)
        return [m for a in args for m in unwrap(a)]
    return []
