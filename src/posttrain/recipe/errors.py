"""Recipe errors that a user can act on: key path, where it came from, what is wrong, how to fix.

All problems of one recipe are collected and reported together (like `tune validate`), without
a traceback; the CLI exits with code 2.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str  # "training.learning_rate", "data.datasets[0].name", or "" for the whole recipe
    message: str  # what is wrong, with the value, and how to fix it
    source: str | None = None  # "recipe.yaml", "override", "default"

    def __str__(self) -> str:
        where = self.path or "recipe"
        if self.source:
            where += f" (from {self.source})"
        return f"{where}: {self.message}"


class RecipeError(Exception):
    """One or more problems with a recipe; str() lists them all."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        n = len(self.problems)
        head = "1 problem in the recipe:" if n == 1 else f"{n} problems in the recipe:"
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])


def did_you_mean(word: str, candidates) -> str:
    """' Did you mean 'x'?' for the closest candidate, or '' when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
