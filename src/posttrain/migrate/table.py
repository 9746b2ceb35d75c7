"""The conversion table: one row per FAI-RL key, where it went, and what changed in meaning.

Rows are data (tests compare them with golden files); `render` prints them for people.
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DROPPED = "-"  # `to` of a key that has no place in the posttrain recipe (the note says why)


@dataclass(frozen=True)
class Row:
    key: str  # FAI-RL key path: training.beta, data.datasets[0].dataset_columns
    to: str  # posttrain key path(s) it became, or DROPPED
    note: str = ""  # change of meaning and the reason; "" = same meaning
    blocking: bool = False  # no equivalent that keeps the run: convert exits 2

    def cells(self) -> tuple[str, str, str]:
        return self.key, self.to, ("CANNOT CONVERT: " if self.blocking else "") + (self.note or "same")


@dataclass
class Conversion:
    kind: str  # training | generation | evaluation
    recipe: dict = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    command: str = ""  # how to run the converted recipe

    def add(self, key: str, to: str = DROPPED, note: str = "", blocking: bool = False) -> None:
        self.rows.append(Row(key, to, note, blocking))

    @property
    def blocking(self) -> list[Row]:
        return [r for r in self.rows if r.blocking]


def render(rows: list[Row], width: int = 100) -> str:
    """A plain-text table; long notes wrap under their column."""
    import textwrap

    head = ("FAI-RL key", "posttrain key", "change of meaning (why)")
    cells = [head, *(r.cells() for r in rows)]
    w0 = max(len(c[0]) for c in cells)
    w1 = min(max(len(c[1]) for c in cells), 44)
    lines = []
    for a, b, c in cells:
        wrapped = textwrap.wrap(c, max(30, width - w0 - w1 - 4)) or [""]
        lines.append(f"{a.ljust(w0)}  {b.ljust(w1)}  {wrapped[0]}".rstrip())
        lines += [f"{'':{w0}}  {'':{w1}}  {more}" for more in wrapped[1:]]
    return "\n".join(lines)
