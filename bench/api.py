"""bench from Python: what the CLI does, for a notebook or a submitit job.

    from bench import api

    recipe = api.load_recipe("recipes/demo-sgd.yaml", sets=["epochs=2"])       # or api.recipe({...}) from a dict
    run = api.run(recipe, out="results/runs")                               # the run directory (a Path)
    runs = api.results("results/runs")                                     # pandas: one row per run
    recipes = api.results("results/runs", per="recipe")                    # one row per recipe, seeds aggregated
    curves = api.curves("results/runs")                                    # every evaluation, with optimizer, batch, seed
    api.sweep("recipes/sweeps/mini.yaml", out="results/tuned")             # trials, then the reruns

Bad input raises `bench.errors.UserError` (a ValueError) with the CLI's one sentence; the columns are defined in
`bench.analysis.export.COLUMNS`. Runs resume and skip exactly as `bench run` and `bench sweep` do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd

from bench.data.check import check_data
from bench.recipe import Recipe

DEFAULT_OUT = Path("results/runs")


def load_recipe(path: str | Path, sets: list[str] = ()) -> Recipe:
    """A recipe file with `--set`-style overrides ("optimizer.lr=0.2"), validated and resolved."""
    from bench import recipe

    return recipe.load(path, list(sets))


def recipe(spec: dict, sets: list[str] = ()) -> Recipe:
    """A recipe from a dict shaped as a recipe file (name included), with overrides, validated."""
    from bench import recipe as recipes

    return recipes.recipe_from_dict("recipe", recipes.apply_sets(dict(spec), list(sets)))


def run(recipe: Recipe, out: str | Path = DEFAULT_OUT, progress: bool = False, restart: bool = False) -> Path:
    """Train `recipe` in this process (resuming its unfinished run unless `restart`); its run directory."""
    from bench.engine.train import train

    check_data(recipe.name, recipe)
    return train(recipe, Path(out), progress=progress, restart=restart).path


def results(*paths: str | Path, per: Literal["run", "recipe"] = "run", strict: bool = False) -> pd.DataFrame:
    """The runs under `paths` (run directories or results trees), one row per run or per recipe."""
    from bench.analysis import results as analysis

    runs = analysis.load(list(paths) or [DEFAULT_OUT], strict)
    return runs if per == "run" else analysis.aggregate(runs)


CURVE_KEYS = ("run", "recipe", "optimizer", "global_batch", "seed")  # who made a curve, so a plot needs no merge


def curves(*paths: str | Path, strict: bool = False) -> pd.DataFrame:
    """Every evaluation of every run: its metrics rows after CURVE_KEYS (the run directory, its recipe's name,
    optimizer, global batch and seed), so `curves.groupby("optimizer")` plots by optimizer as it is."""
    from bench.analysis import results as analysis

    study = analysis.load_study(list(paths) or [DEFAULT_OUT], strict)
    merged = study.curves.merge(study.runs[list(CURVE_KEYS)], on="run", how="left", validate="many_to_one")
    return merged[[*CURVE_KEYS, *(c for c in merged.columns if c not in CURVE_KEYS)]]


def sweep(
    path: str | Path, out: str | Path | None = None, only: str | None = None, allow_dirty: bool = False
) -> pd.DataFrame:
    """Run a sweep file (its trials, then each cell's best trial over the rerun seeds); its runs, one row each.
    `allow_dirty`: run from a tree with uncommitted changes to bench (bench sweep --allow-dirty)."""
    from bench import sweep as sweeps

    spec = sweeps.load(path)
    results_dir = Path(out or Path("results") / spec.name)
    sweeps.run_sweep(path, results_dir, only, allow_dirty)
    return results(results_dir)
