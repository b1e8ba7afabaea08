"""`bench suite DIR`: run every recipe of a folder, then regenerate the analysis.

A recipe whose results directory already holds a finished (completed or
diverged) run of exactly the same resolved recipe is skipped, and an
interrupted one is resumed, so a suite can be stopped and started again.
Diverged runs are results (the papers' tables contain such collapses): the
suite records them and goes on with the next recipe.
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from bench import recipe as recipe_mod
from bench.errors import UserError
from bench.rundir import FINISHED, RECIPE, RunDir, read_meta


class Preempted(Exception):
    """A run of a suite or a sweep trial stopped by SIGTERM / SIGINT (checkpointed): the suite or sweep stops too."""

    def __init__(self, message: str, signal_name: str | None = None):
        super().__init__(message)
        self.signal_name = signal_name


def recipe_files(folder: Path) -> list[Path]:
    if folder.is_file():
        raise UserError(f"{folder}: a file; bench suite runs every recipe in a folder (`bench run {folder}` runs one)")
    if not folder.is_dir():
        raise UserError(f"{folder}: no such recipe folder")
    files = sorted(folder.rglob("*.yaml"))
    if not files:
        raise UserError(f"{folder}: no recipe files (*.yaml) in this folder")
    return files


def finished_run(results: Path, recipe: recipe_mod.Recipe) -> Path | None:
    """The newest finished (completed or diverged) run of exactly this resolved recipe, if there is one."""
    for run in reversed(RunDir.runs_of(results, recipe.name)):
        try:
            done = read_meta(run).get("status") in FINISHED
            same = recipe.same_as((run / RECIPE).read_text())
        except (OSError, ValueError):
            continue
        if done and same:
            return run
    return None


def run_suite(folder: Path, results: Path, sets: list[str] = ()) -> list[tuple[str, str]]:
    """Run the folder's recipes in order; returns (recipe name, outcome) pairs."""
    from bench.engine.train import train

    recipes = [recipe_mod.load(p, sets) for p in recipe_files(folder)]  # all bad input first
    names = [r.name for r in recipes]
    if len(set(names)) != len(names):
        raise UserError(f"{folder}: two recipes share a name; each recipe needs its own name")
    outcomes = []
    bar = tqdm(recipes, unit="run", desc="suite", dynamic_ncols=True, disable=None)  # no bar where no terminal
    for recipe in bar:
        bar.set_postfix_str(recipe.name)
        if finished_run(results, recipe):
            outcomes.append((recipe.name, "skipped (finished before)"))
            continue
        run = train(recipe, results, progress=False)
        if run.meta.get("status") == "preempted":
            raise Preempted(f"{recipe.name} checkpointed in {run.path}", run.meta.get("stopped_by"))
        outcomes.append((recipe.name, _status(run.path)))
    return outcomes


def _status(run: Path) -> str:
    meta = read_meta(run)
    return meta["status"] + (f" ({meta['reason']})" if meta.get("reason") else "")
