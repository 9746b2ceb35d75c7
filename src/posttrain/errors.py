"""Errors for bad user input found outside the recipe schema (data files, model paths, checkpoints).

The CLI prints them without a traceback and exits with code 2. Recipe problems use
`posttrain.recipe.errors.RecipeError`, which lists every problem at once.
"""


class UserError(Exception):
    """Something the user gave cannot be used; the message says what, where, and how to fix it."""
