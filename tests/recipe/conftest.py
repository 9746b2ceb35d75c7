"""Shared by the recipe tests."""

from __future__ import annotations

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe


@pytest.fixture
def recipe_problems(repo):
    """``recipe_problems(path, *overrides)``: the message of the RecipeError that loading the
    repository's recipe ``path`` with those overrides raises (and a failure if it loads)."""

    def problems(recipe: str, *overrides: str) -> str:
        with pytest.raises(RecipeError) as e:
            load_recipe(repo / recipe, list(overrides))
        return str(e.value)

    return problems
