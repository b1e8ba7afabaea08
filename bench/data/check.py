"""The check of a recipe's data before anything runs (`bench validate`, `bench run`, `bench.api.run`): torch-free."""

from __future__ import annotations

from bench import catalog
from bench.data import folder
from bench.errors import UserError


def check_data(path: str, recipe) -> None:
    """A recipe's dataset has a record whose root function resolves, and a given folder exists and has the record's
    layout, said with the recipe file (`path`) and key."""
    try:
        record = catalog.dataset(recipe.data.dataset)
        record.load("root")
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    if record.user_path:
        try:
            folder.check(recipe.data.path, record.layout == "filelist")
        except UserError as e:
            raise UserError(f"{path}: key 'data.path': {e}") from None
