"""Fixtures of the in-process CLI tests."""

import sys

import pytest


@pytest.fixture(autouse=True)
def _own_import_path(monkeypatch):
    """`train` and `validate` run in-process add the recipe's folder and the working directory to
    sys.path (posttrain.user_code.add_search_paths): each test gets the path it started with back."""
    import posttrain.user_code as user_code

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(user_code, "_SEARCHED", [])
