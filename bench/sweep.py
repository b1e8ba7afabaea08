"""`bench sweep SWEEP.yaml`: tune each optimizer at each global batch with the same budget, then rerun
each best trial over seeds (Shallue et al. 2018; Nado et al. 2021; AlgoPerf's external tuning).

A sweep file names a base recipe and crosses optimizer "arms" with global batches:

    name: mini                              # default: the file's stem
    base: ../tuned/base.yaml                # a recipe, relative to this file
    set: {epochs: 3}                        # overrides of the base (dotted keys, as --set)
    batches: [16, 64, 192, 480]
    arms:                                   # label -> fixed keys and the search space
      nesterov:
        set: {optimizer.name: sgd, optimizer.nesterov: true}
        space:
          optimizer.lr: {low: 0.01, high: 3.0, scale: log}
          schedule.warmup_epochs: {low: 0.0, high: 1.0}
          optimizer.momentum: {values: [0.9, 0.95]}
    search: quasirandom                     # or grid (every axis a list of values)
    trials: 8                               # per (arm, batch) and study
    studies: 3                              # independent studies (each its own scramble; default 1)
    seed: 0                                 # the search's seed; trials train with seed `trial_seed`
    budget: {epochs: 3}                     # or {steps: N} or {images: N}, per run; or by batch:
                                            # {16: {epochs: 2}, 64: {epochs: 3}, ...}, one for each batch
    at_batch: {16: {micro_batch: 16}}       # recipe keys fixed at some batches only (dotted, as set)
    select: {split: holdout, metric: top1}  # holdout | validation; top1 | steps_to_target (validation only)
    reruns: {seeds: [1, 2, 3], top: 2, matched: [[vrgd_lars, lars]]}
    local: {key: optimizer.lr, factor: 1.41421, steps: 1, extend: 2}   # a local stage (default: none)
    primary: {reference: lars}              # the verdict's declared question: every arm against lars, or
                                            # {pairs: [[vrgd_lars, lars]]} (default: VRGD-LARS against LARS);
                                            # control: [128], batches where it expects no difference
    scaling: {linear_from: smallest}        # the critical batch's linear scaling: smallest batch | zero

Trials are ordinary runs: the base recipe with the overrides, the batch, the budget and the
trial's point, named `<sweep>-<arm>-b<batch>-t<NN>` (`-s<study>` when studies > 1), tagged
(recipe key `tags`: sweep, arm, trial, study, role) so the analysis knows their place. Reruns
of a cell's best trial are `<sweep>-<arm>-b<batch>-best-seed<S>`, role "rerun"; of its k-th best
(reruns.top >= k) `-top<k>-seed<S>`, role "rerun_top"; an arm of a reruns.matched pair rerun at the
other arm's selected point `<sweep>-<arm>-b<batch>-at-<other>-seed<S>`, role "matched" (none where
both selected the same point).

Choices where the papers leave room, named:
- Points: a scrambled Halton sequence (scipy.stats.qmc; AlgoPerf's quasi-random search), seeded
  by (seed, study), the same unit points for every arm and batch (common random numbers: arms
  and batches differ in what they are, not in the luck of their draws). A range maps linearly or
  log-uniformly; a list of values takes floor(u * len).
- Order: round-robin (trial 0 of every cell, then trial 1, ...), so a sweep stopped early has
  the same number of trials in every cell.
- The best trial of a cell maximises the final top1 on the selection split, or (metric
  steps_to_target, on the validation curve) reaches the target in the fewest steps, val top1
  breaking ties and misses.
  Diverged trials are results (infeasible points), never errors; a cell whose trials all
  diverged has no best trial and no reruns.
- The local stage (key `local`): after the trials, each cell's best trial with local.key x/÷ factor^j
  (j = 1 .. steps, the other keys as there), role "local", `-up<j>` / `-down<j>`; while the cell's best
  is its outermost point on a side, one step further out (up to `extend` times, past the range too).
  Reruns take the best over trials and local points.
- `<results>/<name>.sweep.yaml`: the sweep as run, beside its runs, for the tuning table (searched and fixed
  keys); the runs' recipes do not carry it.
- Reruns use seeds other than the trials' seed, so the quoted figures carry no selection luck.
- Each trial is claimed by a file created atomically in `<results>/<name>/` while it trains (Claim; no
  flock, which Lustre and BeeGFS may refuse or keep per node), so several processes (or nodes on a shared
  file system) can run one sweep: a trial is trained once. A process with nothing left to claim ends (with
  `wait`, it checks again every WAIT_S seconds); the reruns of a cell start in whichever process finds its trials
  all finished.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from bench import catalog, rundir
from bench import recipe as recipe_mod
from bench.engine import checkpoint
from bench.errors import BenchWarning, UserError
from bench.recipe import Strict
from bench.rundir import FINISHED, read_meta, read_metrics
from bench.suite import Preempted, finished_run

Pair = Annotated[tuple[str, str], Field(strict=False)]  # two arms' names, a YAML list


class Axis(Strict):
    """One searched key: a range {low, high, scale: linear | log} or a list {values: [...]}."""

    low: float | None = Field(None, allow_inf_nan=False)
    high: float | None = Field(None, allow_inf_nan=False)
    scale: Literal["linear", "log"] = "linear"
    values: list[Any] | None = None

    @model_validator(mode="after")
    def _range_or_values(self):
        if self.values is not None:
            if not self.values or self.low is not None or self.high is not None:
                raise ValueError("give a non-empty list of values, or low and high, not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give low and high (a range), or values (a list)")
        if self.low > self.high:
            raise ValueError(f"low {self.low:g} is above high {self.high:g}")
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"a log range needs low > 0 (got {self.low:g}); use scale: linear to include 0")
        return self

    def at(self, u: float):
        """The value at u in [0, 1): linear or log-uniform in the range, or the list's floor(u * len)-th."""
        if self.values is not None:
            return self.values[min(int(u * len(self.values)), len(self.values) - 1)]
        if self.scale == "log":
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high - self.low)


class Arm(Strict):
    set: dict[str, Any] = Field(default_factory=dict, description="recipe keys fixed for this arm (dotted)")
    space: dict[str, Axis] = Field(
        default_factory=dict,
        description="recipe keys searched (dotted); `default`: the optimizer record's default space "
        "(bench/catalog.py), or a mapping with `default: true` whose other keys override it",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_space(cls, data):
        """`space: default` (or a mapping holding `default: true`): the search space of the catalog record that
        the arm's set names (optimizer.name), with the mapping's other keys replacing or adding axes."""
        space = data.get("space") if isinstance(data, dict) else None
        if not (space == "default" or (isinstance(space, dict) and space.get("default") is True)):
            return data
        name = (data.get("set") or {}).get("optimizer.name")
        if name not in catalog.OPTIMIZERS:
            raise ValueError("space: default needs the arm's set to name a catalog optimizer (optimizer.name)")
        default = catalog.OPTIMIZERS[name].default_space()
        if not default:
            with_space = [n for n, r in catalog.OPTIMIZERS.items() if r.default_space()]
            raise ValueError(
                f"optimizer '{name}' has no default search space; name the keys to search (those with one: "
                f"{', '.join(with_space)})"
            )
        overrides = {k: v for k, v in space.items() if k != "default"} if isinstance(space, dict) else {}
        return {**data, "space": {**default, **overrides}}


class Budget(Strict):
    epochs: PositiveFloat | None = None
    steps: PositiveInt | None = None
    images: PositiveInt | None = None

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("epochs", "steps", "images") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of epochs, steps or images")
        return self

    def epochs_at(self, batch: int, train_size: int) -> float:
        """The epochs of a run at `batch`: an images budget is rounded to the nearest whole step, so every batch
        sees the same images to within half a step (an epochs budget runs ceil(epochs x images / batch) steps)."""
        if self.epochs is not None:
            return self.epochs
        steps = self.steps if self.steps is not None else max(1, round(self.images / batch))
        return steps * batch / train_size


class Select(Strict):
    split: Literal["holdout", "validation"] = Field(
        "holdout", description="holdout: a part of the training set (recipe data.holdout) kept out of training"
    )
    metric: Literal["top1", "steps_to_target"] = "top1"


class Reruns(Strict):
    seeds: list[NonNegativeInt] = Field(min_length=1)
    top: PositiveInt = Field(
        1,
        description="rerun the best `top` trials of each cell (the runner-up's reruns show "
        "whether a near-tie selection mattered)",
    )
    matched: list[Pair] = Field(
        default_factory=list,
        description="pairs of arms each rerun at the other's selected point too (a 2 x 2 of arm x point per batch)",
    )


class Local(Strict):
    """The local stage: after the quasi-random trials, points around each cell's best trial along one searched key
    (the others as at the best), stepping outward while the best is the outermost point."""

    key: str = Field("optimizer.lr", description="the searched key it steps along: a log range of every arm")
    factor: float = Field(math.sqrt(2), gt=1, description="the neighbours are the best's value x and ÷ factor^j")
    steps: PositiveInt = Field(1, description="neighbours each side of the best (j = 1 .. steps)")
    extend: NonNegativeInt = Field(
        2,
        description="further steps outward, one at a time, while the cell's best is its outermost point on a side "
        "(beyond the arm's range too: the range extends for that cell)",
    )


class Scaling(Strict):
    """How `bench table scaling` reads the ladder (bench/analysis/ladder.py)."""

    linear_from: Literal["smallest", "zero"] = Field(
        "smallest",
        description="the critical batch is 20% above perfect linear scaling from the ladder's smallest batch "
        "(Zhang et al. 2024) or from the fit's small-batch limit (zero: 0.2 B_noise)",
    )


class Primary(Strict):
    """The verdict's declared question, its own Holm family (bench/analysis/pairs.py): every other arm against
    `reference`, or the listed `pairs`, each read as X against Y (X / Y, X − Y)."""

    reference: str | None = Field(None, description="every other arm against this one")
    pairs: list[Pair] = Field(default_factory=list, description="pairs [X, Y] of arms, X against Y")
    control: list[PositiveInt] = Field(
        default_factory=list,
        description="batches where the question expects no difference (a control): tested and corrected with the "
        "others, named so, and left out of the exploratory average over the batches",
    )

    @model_validator(mode="after")
    def _one(self):
        if (self.reference is None) == (not self.pairs):
            raise ValueError("give one of reference (every other arm against it) or pairs ([[x, y], ...])")
        return self


class SweepSpec(Strict):
    name: str
    base: Path = Field(strict=False)
    set: dict[str, Any] = Field(default_factory=dict)
    batches: list[PositiveInt] = Field(min_length=1)
    arms: dict[str, Arm] = Field(min_length=1)
    search: Literal["quasirandom", "grid"] = "quasirandom"
    trials: PositiveInt | None = None
    studies: PositiveInt = 1
    seed: NonNegativeInt = 0
    trial_seed: NonNegativeInt = 0
    budget: Budget | dict[PositiveInt, Budget] = Field(
        description="one budget for every run, or one per batch ({32768: {epochs: 72}, 65536: {epochs: 86}}: "
        "MLPerf's epochs differ by batch)"
    )
    at_batch: dict[PositiveInt, dict[str, Any]] = Field(
        default_factory=dict,
        description="recipe keys fixed at some batches only, over set and the arms' set (a micro-batch no larger "
        "than a small batch); the other batches' recipes are as without it",
    )
    select: Select = Select()
    reruns: Reruns
    local: Local | None = Field(None, description="a local stage after the trials (null: none)")
    primary: Primary | None = Field(
        None, description="the verdict's declared comparisons (null: VRGD-LARS against LARS where both are arms)"
    )
    scaling: Scaling = Scaling()
    keep_checkpoints: bool = Field(
        False,
        description="trials keep their final checkpoint (reruns always do, as recipe key checkpoint.keep_final says)",
    )

    @model_validator(mode="after")
    def _consistent(self):
        if len(set(self.batches)) != len(self.batches):
            raise ValueError("batches: each batch once")
        if isinstance(self.budget, dict) and set(self.budget) != set(self.batches):
            missing, extra = set(self.batches) - set(self.budget), set(self.budget) - set(self.batches)
            raise ValueError(
                "budget: a budget by batch gives one for each of the batches and no other"
                + (f"; none for {', '.join(map(str, sorted(missing)))}" if missing else "")
                + (f"; {', '.join(map(str, sorted(extra)))} is not in batches" if extra else "")
            )
        for b in self.at_batch:
            if b not in self.batches:
                raise ValueError(f"at_batch: {b} is not in batches ({', '.join(map(str, self.batches))})")
        for label, arm in self.arms.items():
            recipe_mod.check_path_component(label, f"arms.{label}")
            if not arm.space:
                raise ValueError(
                    f"arms.{label}.space is empty: name at least one searched key (an arm with "
                    "nothing to search is one recipe: bench run it)"
                )
        if self.search == "quasirandom" and self.trials is None:
            raise ValueError("trials: required for search: quasirandom")
        if self.search == "grid":
            for label, arm in self.arms.items():
                ranges = [k for k, axis in arm.space.items() if axis.values is None]
                if ranges:
                    raise ValueError(f"arms.{label}.space.{ranges[0]}: a grid needs a list of values, not a range")
        for x, y in self.reruns.matched:
            for arm in (x, y):
                if arm not in self.arms:
                    raise ValueError(f"reruns.matched: '{arm}' is not an arm; the arms are {', '.join(self.arms)}")
            if set(self.arms[x].space) != set(self.arms[y].space):
                raise ValueError(
                    f"reruns.matched: arms {x} and {y} search different keys ({', '.join(self.arms[x].space)}"
                    f" against {', '.join(self.arms[y].space)}); a matched point needs the same keys"
                )
        if self.primary is not None:
            reference, pairs = self.primary.reference, self.primary.pairs
            for arm in [reference] if reference else [a for pair in pairs for a in pair]:
                if arm not in self.arms:
                    key = "primary.reference" if reference else "primary.pairs"
                    raise ValueError(f"{key}: '{arm}' is not an arm; the arms are {', '.join(self.arms)}")
            for x, y in pairs:
                if x == y:
                    raise ValueError(f"primary.pairs: [{x}, {y}] compares an arm with itself")
            for b in self.primary.control:
                if b not in self.batches:
                    raise ValueError(f"primary.control: {b} is not in batches ({', '.join(map(str, self.batches))})")
        if self.local is not None:
            for label, arm in self.arms.items():
                axis = arm.space.get(self.local.key)
                if axis is None or axis.values is not None or axis.scale != "log":
                    raise ValueError(
                        f"local.key: {self.local.key} is not a log range of arms.{label}.space; the local stage "
                        "multiplies and divides a searched log range (as the lr)"
                    )
        if self.select.metric == "steps_to_target" and self.select.split != "validation":
            raise ValueError(
                "select: metric steps_to_target is read from the validation curve (the holdout is evaluated only "
                "at full evaluations, not on the fine grid near the target); set select.split: validation"
            )
        if self.trial_seed in self.reruns.seeds:
            raise ValueError(
                f"reruns.seeds: {self.trial_seed} is the trials' seed (trial_seed); reruns use others, "
                "so their figures carry no selection luck"
            )
        return self


def budget_at(spec: SweepSpec, batch: int) -> Budget:
    """The budget of the runs at `batch`: the sweep's, or its batch's."""
    return spec.budget[batch] if isinstance(spec.budget, dict) else spec.budget


@dataclass(frozen=True)
class Trial:
    name: str
    arm: str
    batch: int
    role: str  # "trial", "local", "rerun", "rerun_top" or "matched"
    index: int  # trial number (reruns: the best trial's)
    study: int
    point: dict  # the searched keys' values
    recipe: recipe_mod.Recipe = field(compare=False, repr=False)


def is_sweep_file(path: str | Path) -> bool:
    """Whether `path` reads as a sweep file (a mapping with `arms`) rather than a recipe."""
    return "arms" in recipe_mod.top_keys(path)


def load(path: str | Path) -> SweepSpec:
    return recipe_mod.load_file_spec(path, SweepSpec, "sweep", "base, batches, arms, budget, reruns, ...")


def unit_points(dims: int, n: int, seed: int, study: int) -> list[list[float]]:
    """n points of a scrambled Halton sequence in [0, 1)^dims, the same for the same (seed, study)."""
    if dims == 0:
        return [[] for _ in range(n)]
    from scipy.stats import qmc

    rng = np.random.default_rng([seed, study])
    return qmc.Halton(d=dims, scramble=True, rng=rng).random(n).tolist()


def points(spec: SweepSpec, arm: Arm, study: int) -> list[dict]:
    keys = list(arm.space)
    if spec.search == "grid":
        return [dict(zip(keys, combo)) for combo in itertools.product(*(arm.space[k].values for k in keys))]
    return [
        {k: arm.space[k].at(u) for k, u in zip(keys, us)}
        for us in unit_points(len(keys), spec.trials, spec.seed, study)
    ]


def _round(value):
    """Searched floats to 6 significant digits: readable recipes, and the same recipe on every machine."""
    return float(f"{value:.6g}") if isinstance(value, float) else value


def _recipe(
    spec: SweepSpec, arm_label: str, batch: int, point: dict, epochs: float, seed: int, name: str, tags: dict
) -> recipe_mod.Recipe:
    sets = {
        **spec.set,
        **spec.arms[arm_label].set,
        **spec.at_batch.get(batch, {}),
        "global_batch": batch,
        "epochs": epochs,
        "seed": seed,
        "name": name,
        **{k: _round(v) for k, v in point.items()},
    }
    assignments = [f"{k}={json.dumps(v)}" for k, v in sets.items()]
    recipe = recipe_mod.load(spec.base, assignments)
    return recipe.model_copy(update={"tags": {**recipe.tags, **tags}})


def training_images(spec: SweepSpec) -> int:
    """Training images after the holdout, read from the data (only budgets in steps or images need it)."""
    from bench.data import build

    recipe = recipe_mod.load(spec.base, [f"{k}={json.dumps(v)}" for k, v in spec.set.items()])
    return build(recipe.data, 1, 1, 0, 1, 0, device="cpu").train_size


def check_arms(path: str | Path, spec: SweepSpec, batch: int, epochs: float) -> None:
    """Each arm's `set`, and each searched key's declared values (a range's ends, a list's values), on the base
    recipe at `batch`, before any trial: one the recipe refuses is named by its key in the sweep file, not blamed
    on the base recipe, nor found only where a draw happens to fall. A base that fails with the sweep's own `set`
    is left to the trials (their error names the base)."""
    fixed = {
        **spec.set,
        **spec.at_batch.get(batch, {}),
        "global_batch": batch,
        "epochs": epochs,
        "seed": spec.trial_seed,
    }

    def refusal(sets: dict) -> str:
        try:
            with warnings.catch_warnings():  # a probe of the declared values: the trials warn, once each
                warnings.simplefilter("ignore", BenchWarning)
                recipe_mod.load(spec.base, [f"{k}={json.dumps(v)}" for k, v in sets.items()], models=False, blame=False)
        except UserError as e:
            return str(e)
        return ""

    if refusal(fixed):
        return
    for label, arm in spec.arms.items():
        if why := refusal({**fixed, **arm.set}):
            raise UserError(f"{path}: key 'arms.{label}.set': {why}")
        for key, axis in arm.space.items():
            declared = [("value", v) for v in axis.values] if axis.values is not None else []
            for what, value in declared or [("low", axis.low), ("high", axis.high)]:
                if why := refusal({**fixed, **arm.set, key: value}):
                    raise UserError(
                        f"{path}: key 'arms.{label}.space.{key}': {what} {_show(value)} is outside what the key "
                        f"allows: {why.removeprefix(f'key {key!r}: ')}"
                    )


def expand(path: str | Path, spec: SweepSpec) -> list[Trial]:
    """Every trial of the sweep, in running order (round-robin over cells); bad input raises UserError."""
    in_epochs = all(budget_at(spec, batch).epochs is not None for batch in spec.batches)
    train_size = None if in_epochs else training_images(spec)
    first = spec.batches[0]
    check_arms(path, spec, first, budget_at(spec, first).epochs_at(first, train_size or 1))
    cells = []
    for study in range(spec.studies):
        for label, arm in spec.arms.items():
            for index, point in enumerate(points(spec, arm, study)):
                for batch in spec.batches:
                    cells.append((index, study, batch, label, point))
    trials = []
    for index, study, batch, label, point in sorted(cells, key=lambda c: c[:2]):
        suffix = f"-s{study}" if spec.studies > 1 else ""
        name = f"{spec.name}-{label}-b{batch}-t{index:02d}{suffix}"
        tags = {"sweep": spec.name, "arm": label, "trial": index, "study": study, "role": "trial"}
        if spec.select.metric != "top1":  # the analysis ranks trials as the sweep did (no tag: top1, older sweeps)
            tags["select"] = spec.select.metric
        try:
            recipe = _recipe(
                spec,
                label,
                batch,
                point,
                budget_at(spec, batch).epochs_at(batch, train_size or 1),
                spec.trial_seed,
                name,
                tags,
            )
        except UserError as e:
            raise UserError(f"{path}: trial {name}: {e}") from None
        trials.append(Trial(name, label, batch, "trial", index, study, point, recipe))
    needs_holdout = spec.select.split == "holdout"
    if needs_holdout and trials and not trials[0].recipe.data.holdout:
        raise UserError(
            f"{path}: key 'select.split' is holdout but the recipes hold nothing out; set data.holdout "
            "(a fraction or count of training images) in the base or in set, or select on validation"
        )
    return trials


def rerun_trials(spec: SweepSpec, best: Trial, rank: int = 1) -> list[Trial]:
    """The `rank`-th best trial of a cell again with each rerun seed: role "rerun" for the best (`-best-seed<S>`),
    "rerun_top" for the next ones (`-top<rank>-seed<S>`)."""
    out = []
    role = "rerun" if rank == 1 else "rerun_top"
    for seed in spec.reruns.seeds:
        name = f"{spec.name}-{best.arm}-b{best.batch}-{'best' if rank == 1 else f'top{rank}'}-seed{seed}"
        tags = {**best.recipe.tags, "role": role, "rank": rank}
        recipe = best.recipe.model_copy(update={"name": name, "seed": seed, "tags": tags})
        out.append(Trial(name, best.arm, best.batch, role, best.index, best.study, best.point, recipe))
    return out


def matched_trials(spec: SweepSpec, arm: str, at: Trial) -> list[Trial]:
    """Arm `arm` rerun at another arm's selected point (`at`, that arm's best trial) with each rerun seed: role
    "matched", named `-at-<other>-seed<S>`, tagged point_of: the other arm."""
    out = []
    for seed in spec.reruns.seeds:
        name = f"{spec.name}-{arm}-b{at.batch}-at-{at.arm}-seed{seed}"
        tags = {
            "sweep": spec.name,
            "arm": arm,
            "trial": at.index,
            "study": at.study,
            "role": "matched",
            "point_of": at.arm,
        }
        recipe = _recipe(spec, arm, at.batch, at.point, at.recipe.epochs, seed, name, tags)
        out.append(Trial(name, arm, at.batch, "matched", at.index, at.study, at.point, recipe))
    return out


def local_trials(spec: SweepSpec, center: Trial, steps: list[int]) -> list[Trial]:
    """The cell's best quasi-random trial with local.key x factor^j for each j of `steps` (j < 0: divided), the other
    keys as there: role "local", named `<sweep>-<arm>-b<batch>-up<j>` / `-down<j>`, tagged with j."""
    out = []
    for j in steps:
        point = {**center.point, spec.local.key: center.point[spec.local.key] * spec.local.factor**j}
        name = f"{spec.name}-{center.arm}-b{center.batch}-{'up' if j > 0 else 'down'}{abs(j)}"
        tags = {**center.recipe.tags, "role": "local", "local_step": j}
        recipe = _recipe(spec, center.arm, center.batch, point, center.recipe.epochs, spec.trial_seed, name, tags)
        out.append(Trial(name, center.arm, center.batch, "local", center.index, center.study, point, recipe))
    return out


def next_local_steps(spec: SweepSpec, ranked: list[Trial], tried: list[int]) -> list[int]:
    """The local steps a cell tries next: ±1 .. ±steps first; then one further out on a side whose outermost
    point is the cell's best (its optimum may lie beyond), up to `extend` further steps."""
    if not tried:
        return [j for k in range(1, spec.local.steps + 1) for j in (-k, k)]
    best = ranked[0]
    j = best.recipe.tags.get("local_step", 0) if best.role == "local" else 0
    outermost = j != 0 and abs(j) == max(abs(t) for t in tried if (t > 0) == (j > 0))
    reach = spec.local.steps + spec.local.extend
    return [j + (1 if j > 0 else -1)] if outermost and abs(j) < reach else []


def all_reruns(spec: SweepSpec, ranked: dict[tuple, list[Trial]]) -> list[Trial]:
    """The reruns of the top trials of every finished cell, then the matched points of reruns.matched (none where
    both arms selected the same point: their reruns already compare them there)."""
    out = [
        r
        for cell in ranked.values()
        for rank, t in enumerate(cell[: spec.reruns.top], 1)
        for r in rerun_trials(spec, t, rank)
    ]
    batches = sorted({batch for _, batch in ranked})
    for x, y in spec.reruns.matched:
        for batch in batches:
            bx, by = ranked.get((x, batch), [None])[0], ranked.get((y, batch), [None])[0]
            if bx is None or by is None or bx.point == by.point:
                continue
            out += matched_trials(spec, y, bx) + matched_trials(spec, x, by)
    return out


# ---- running ---------------------------------------------------------------------------------------------


class Claim:
    """A trial claimed by this process while it trains, through files any shared file system keeps atomic
    (NFS, Lustre, BeeGFS, GPFS; no flock): <results>/<name>/.claim-<g>, created with O_CREAT | O_EXCL and naming
    its holder (host, pid, time, SLURM job and restart count). The claim of the highest generation g holds the
    trial unless it is stale: its holder is a process gone from this host, or an earlier start of this SLURM job
    (a requeued job retakes its own trials). A stale claim is taken over by creating generation g + 1 (one
    process wins the O_EXCL) and then checking that g is still the claim judged stale. Released (its file
    removed) when the trial ends, however it ends but a kill."""

    def __init__(self, results: Path, name: str):
        self._folder = Path(results) / name
        self._folder.mkdir(parents=True, exist_ok=True)
        self._path = None

    def take(self) -> bool:
        """The trial, if nobody holds it (the holder is a live process, or one this rule cannot call dead)."""
        claims = sorted(self._folder.glob(".claim-*"), key=_generation)
        if not claims:
            return self._create(0)
        last = claims[-1]
        holder = _read_claim(last)
        if not _stale(holder) or not self._create(_generation(last) + 1):
            return False
        if _read_claim(last) != holder:  # someone took it over and released it meanwhile: theirs, not ours
            self.release()
            return False
        last.unlink(missing_ok=True)
        return True

    def _create(self, generation: int) -> bool:
        path = self._folder / f".claim-{generation}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(_holder(), f)
        self._path = path
        return True

    def release(self) -> None:
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None


def _generation(path: Path) -> int:
    return int(path.name.rpartition("-")[2]) if path.name.rpartition("-")[2].isdigit() else -1


def _holder() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
        "job": os.environ.get("SLURM_JOB_ID"),
        "restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
    }


def _read_claim(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # gone, or being written: not stale


def _stale(holder: dict | None) -> bool:
    """Whether a claim's holder is known to be gone: an earlier start of this SLURM job, or a process that no
    longer exists on this host. A holder killed on another node outside SLURM's requeue is not known to be gone
    (docs/cluster.md: remove its .claim file)."""
    if not holder:
        return False
    me = _holder()
    if holder.get("job") and holder["job"] == me["job"] and holder.get("restart", 0) < me["restart"]:
        return True
    if holder.get("host") != me["host"]:
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except (OSError, KeyError, TypeError):
        return False
    return False


def selection_score(run: Path, recipe: recipe_mod.Recipe, select: Select) -> tuple:
    """Sort key of a finished trial (larger is better): (reached, -steps, top1) for steps_to_target,
    (top1,) for top1; a diverged trial or one with no evaluation scores lowest."""
    column = "holdout_top1" if select.split == "holdout" else "val_top1"
    status = read_meta(run).get("status")
    metrics = read_metrics(run)
    if status != "completed" or not len(metrics) or not math.isfinite(metrics[column].iloc[-1]):
        return (-math.inf,) * (3 if select.metric == "steps_to_target" else 1)
    top1 = float(metrics[column].iloc[-1])
    if select.metric == "top1":
        return (top1,)
    reached = metrics[metrics[column] >= recipe.target_top1]
    return (1.0, -float(reached["step"].iloc[0]), top1) if len(reached) else (0.0, 0.0, top1)


class Until(Exception):
    """The sweep's --until time passed: no run starts after it (the runs going finished); the same command goes on.
    `held`: the runs others held when a --wait would have passed the time."""

    def __init__(self, trained: int, held: list[str] | None = None):
        self.held = held or []
        super().__init__(f"{trained} run(s) trained by this process")


@dataclass
class Progress:
    done: int = 0
    trained: int = 0  # of `done`, the runs this process trained
    best: dict = field(default_factory=dict)  # (arm, batch) -> (score, trial name)
    until: float | None = None  # POSIX time after which no run starts (bench sweep --until)
    checking: bool = False  # bench sweep --wait's passes after its first wait: a bar shows only after BAR_DELAY_S
    inputs: tuple[Path, ...] = ()  # the sweep file and its base: each run records them by content (rundir)

    def bar(self, total: int, unit: str, desc: str):
        """A pass's progress bar; while --wait checks, one that finds nothing to do within BAR_DELAY_S prints
        nothing (a check a minute, not three bars a minute), and one that trains shows as ever."""
        from tqdm import tqdm

        delay = BAR_DELAY_S if self.checking else 0
        # disable None: no bar where stderr is no terminal (a log file, a pipe), a line a trial instead
        return tqdm(total=total, unit=unit, desc=desc, dynamic_ncols=True, delay=delay, disable=None)


BAR_DELAY_S = 5.0


def run_trials(
    trials: list[Trial], results: Path, spec: SweepSpec, bar, progress: Progress
) -> tuple[dict[str, Path], list[Trial]]:
    """Train every trial not finished yet that no other process holds; returns name -> finished run, and the
    trials other processes hold (a job array's other tasks). A process never waits for another's
    trial: it would hold its GPU idle for hours; the holder goes on to what depends on it (run_sweep)."""
    finished, held = {}, []
    for trial in trials:
        run = finished_run(results, trial.recipe)
        if run is None:
            if progress.until is not None and time.time() >= progress.until:
                raise Until(progress.trained)
            claim = Claim(results, trial.name)
            if not claim.take():
                held.append(trial)
                bar.update(1)
                continue
            run = _train_claimed(trial, results, claim, bar, progress.inputs)
            progress.trained += run is not None
        _finished(trial, run, finished, spec, bar, progress)
    return finished, held


def _train_claimed(trial: Trial, results: Path, claim: Claim, bar, inputs: tuple[Path, ...]) -> Path | None:
    """Train a claimed trial unless another process finished it meanwhile; the finished run, if any."""
    from bench.engine.train import train

    try:
        run = finished_run(results, trial.recipe)
        if run is None:
            bar.set_postfix_str(f"{trial.name} ...")
            if bar.disable:
                print(f"sweep: training {trial.name}", file=sys.stderr, flush=True)
            done = train(trial.recipe, results, progress=False, inputs=inputs)
            status = done.meta.get("status") if done else None
            if status == "preempted":
                raise Preempted(f"trial {trial.name} checkpointed in {done.path}", done.meta.get("stopped_by"))
            run = done.path if status in FINISHED else None
        return run
    finally:
        claim.release()


def _finished(trial: Trial, run: Path | None, finished: dict, spec: SweepSpec, bar, progress: Progress) -> None:
    if run is not None:
        finished[trial.name] = run
        progress.done += 1
        if trial.role in ("trial", "local"):
            score = selection_score(run, trial.recipe, spec.select)
            cell = (trial.arm, trial.batch)
            if cell not in progress.best or score > progress.best[cell][0]:
                progress.best[cell] = (score, trial.name)
            if not spec.keep_checkpoints:  # a trial is read for its curve only: its disk goes back
                checkpoint.prune(run, 0)
    # the postfix first, drawn by the update: a refresh of its own would show a bar --wait's checks keep quiet
    bar.set_postfix_str(_best_so_far(progress) if trial.role in ("trial", "local") else f"{trial.name} done", False)
    bar.update(1)


def _best_so_far(progress: Progress) -> str:
    if not progress.best:
        return ""
    cell, (score, name) = max(progress.best.items(), key=lambda kv: kv[1][0])
    return f"best {name} ({score[-1]:.1f}%)" if math.isfinite(score[-1]) else ""


def ranked_trials(
    trials: list[Trial], finished: dict[str, Path], spec: SweepSpec
) -> tuple[dict[tuple, list[Trial]], list[str]]:
    """(arm, batch) -> the cell's trials that trained, best first, for each cell whose trials have all finished;
    and the cells waiting."""
    by_cell: dict[tuple, list[Trial]] = {}
    for t in trials:
        by_cell.setdefault((t.arm, t.batch), []).append(t)
    ranked, waiting = {}, []
    for (arm, batch), members in by_cell.items():
        if any(t.name not in finished for t in members):
            waiting.append(f"{arm} at batch {batch}")
            continue
        scored = [(selection_score(finished[t.name], t.recipe, spec.select), i, t) for i, t in enumerate(members)]
        scored.sort(key=lambda st: (st[0], -st[1]), reverse=True)  # ties: the earlier trial, as max() picked
        trained = [t for score, _, t in scored if math.isfinite(score[-1])]
        if trained:
            ranked[(arm, batch)] = trained
    return ranked, waiting


def refuse_dirty(spec: SweepSpec, allow_dirty: bool, inputs: tuple[Path, ...]) -> None:
    """Refuse a study from an uncommitted bench checkout (rundir.checkout_state), naming each file that differs,
    unless allow_dirty. `inputs`, the sweep file and its base recipe, may be anywhere and in any state: each run
    records them by content. `bench submit` asks too, before the job array queues."""
    state = rundir.checkout_state(*inputs)
    if state and state[1] and not allow_dirty:
        shown = list(state[1][:8]) + [f"and {len(state[1]) - 8} more"] * (len(state[1]) > 8)
        raise UserError(
            f"sweep {spec.name}: bench's checkout ({rundir.PACKAGE.parent}) differs from its commit "
            f"{state[0][:12]} ({'; '.join(shown)}); a study's runs come from one clean commit of bench: commit or "
            "undo those, or pass --allow-dirty (each run then records bench's commit as +dirty, and the verdict "
            "warns). Your sweep file and recipes need no commit: each run records them by content (meta.json inputs)"
        )


def check_provenance(
    spec: SweepSpec, results: Path, allow_dirty: bool, allow_mixed_kernels: bool, sweep_files: tuple[Path, ...] = ()
) -> None:
    """A study's runs come from one clean commit and one kernel platform: refuse to start or resume from an
    uncommitted tree (refuse_dirty), or on a platform other than that of the study's finished runs (unless
    allow_mixed_kernels); warn when the finished runs came from another commit."""
    refuse_dirty(spec, allow_dirty, sweep_files)
    commit = rundir.git_commit(*sweep_files)  # what each run records: the checkout's state
    done = rundir.refuse_another_platform(results, allow_mixed_kernels)
    commits = sorted({m.get("git_commit") for m in done if m.get("git_commit")} - {commit})
    if commits:
        print(
            f"bench: warning: {results}: the study's finished runs came from {', '.join(c[:12] for c in commits)}; "
            f"this process runs {commit or 'an unknown commit'} (the verdict lists both)",
            file=sys.stderr,
        )


def search_warnings(spec: SweepSpec) -> list[str]:
    """What makes a search too thin to resolve (AlgoPerf tunes with 3 studies x 5 trials): fewer than 2^(d+1)
    quasi-random trials for d searched keys (a 2-D Halton set of 4 points ties each lr to one warm-up), and a
    single study (the median over studies of each study's best is then one study's luck; a grid has no scramble,
    so its studies would repeat the same points)."""
    out = []
    if spec.search == "quasirandom":
        for label, arm in spec.arms.items():
            wanted = 2 ** (len(arm.space) + 1)
            if spec.trials < wanted:
                out.append(
                    f"arms.{label}: {spec.trials} trials for {len(arm.space)} searched keys; a quasi-random "
                    f"search resolves them from about {wanted} (2^(d+1)) trials a study"
                )
    if spec.studies == 1 and spec.search == "quasirandom":
        out.append(
            "studies: 1; headline sweeps use at least 2 (AlgoPerf: 3 studies x 5 trials), each its own "
            "scramble, so the best point's luck is seen"
        )
    return out


def schedule_warning(spec: SweepSpec, trials: list[Trial]) -> str | None:
    """A steps-to-target sweep whose lr decays over the budget (cosine, poly) crosses the target at a point of the
    schedule that depends on the budget and the batch (small batches on a high lr, large ones on an annealed one):
    one line naming the budget-free default (docs/sweeps.md)."""
    decays = sorted({t.recipe.schedule.decay for t in trials} & {"cosine", "poly"})
    if spec.select.metric != "steps_to_target" or not decays:
        return None
    return (
        f"a steps-to-target sweep with schedule.decay {decays[0]} decays over its budget, so the lr at the crossing "
        "depends on the budget and the batch; the default for steps to target is schedule.decay: constant with "
        "eval.ema_epochs (docs/sweeps.md)"
    )


def run_sweep(
    path: str | Path,
    results: Path,
    only: str | None = None,
    allow_dirty: bool = False,
    allow_mixed_kernels: bool = False,
    until: float | None = None,
    wait: bool = False,
) -> tuple[list[Trial], list[str], list[str]]:
    """Run the trials nobody holds, then the reruns of each cell whose trials have all finished; returns (all
    trials and reruns, waiting cells, the runs other processes hold). A process whose trials other processes
    hold ends without waiting: the one that finishes a cell's last trial finds the cell complete and starts its
    reruns. `wait`: instead, check again every WAIT_S seconds while others hold runs, and go on once they let go
    (processes side by side on one machine; a job array's tasks would hold their GPUs idle). `only`: run just
    the trials whose names contain it (no reruns). `until`: a POSIX time after which no run starts (Until is
    raised instead; the run going when it passes finishes). Refuses an uncommitted tree or a kernel platform
    other than the study's (check_provenance)."""
    spec = load(path)
    trials = expand(path, spec)
    inputs = (Path(path), spec.base)
    check_provenance(spec, results, allow_dirty, allow_mixed_kernels, inputs)
    for warning in [*search_warnings(spec), *filter(None, [schedule_warning(spec, trials)])]:
        print(f"bench: warning: {path}: {warning}", file=sys.stderr)
    write_space(spec, results)
    chosen = [t for t in trials if only in t.name] if only else trials
    if only and not chosen:
        raise UserError(f"--only {only!r}: no trial of {path} has that in its name (see bench sweep {path} --list)")
    if reused := sum(finished_run(results, t.recipe) is not None for t in chosen):
        # the same command resumes a sweep: said, so that a second run is not mistaken for a new one
        print(
            f"{results}: {reused} of the {len(chosen)} trials finished already, reused (to train anew: another --out)"
        )
    progress = Progress(until=until, inputs=inputs)
    said = []  # the held runs the last waiting line named: a line a change, not a minute
    while True:
        ran, waiting, held, contended = _sweep_pass(spec, trials, chosen, results, only, progress)
        if not (wait and (held or (contended and waiting))):
            return ran, waiting, held
        if not held:  # what others held finished during the pass, too late for its cells: another pass now
            continue
        if until is not None and time.time() + WAIT_S >= until:
            raise Until(progress.trained, held)  # no run would start before the time: as if it had passed
        if held != said:
            print(
                f"waiting for {len(held)} run(s) other processes hold ({', '.join(held)}); a holder that died on "
                f"another host keeps its claim: remove {results}/<run>/.claim-* once it is gone (docs/cluster.md)",
                file=sys.stderr,
            )
            said = held
        progress.checking = True
        time.sleep(WAIT_S)


WAIT_S = 60.0  # bench sweep --wait: how often a process checks whether the runs it waits on have finished


def _sweep_pass(
    spec: SweepSpec, trials: list[Trial], chosen: list[Trial], results: Path, only: str | None, progress: Progress
) -> tuple[list[Trial], list[str], list[str], bool]:
    """One pass of run_sweep over what nobody holds: the chosen trials, the local stage, the complete cells'
    reruns; returns run_sweep's three lists and whether others held any run during the pass (one they finished
    meanwhile leaves its cell waiting until the next pass)."""
    with progress.bar(len(chosen), "trial", f"sweep {spec.name}") as bar:
        _, held = run_trials(chosen, results, spec, bar, progress)
    if only:
        return chosen, [], [t.name for t in held if finished_run(results, t.recipe) is None], bool(held)
    # other processes finished trials meanwhile: the cells are read from the results, not from this process
    finished = {t.name: run for t in trials if (run := finished_run(results, t.recipe)) is not None}
    ranked, waiting = ranked_trials(trials, finished, spec)
    if spec.local is not None:
        local, held_local = local_stage(spec, trials, ranked, finished, results, progress)
        trials, held = trials + local, held + held_local
        ranked, waiting = ranked_trials(trials, finished, spec)
    reruns = all_reruns(spec, ranked)
    with progress.bar(len(reruns), "run", f"reruns {spec.name}") as bar:
        _, held_reruns = run_trials(reruns, results, spec, bar, progress)
    # held runs the others finished meanwhile are in: the process that finishes last sees none held, and writes
    still = [t.name for t in held + held_reruns if finished_run(results, t.recipe) is None]
    return trials + reruns, waiting, still, bool(held + held_reruns)


def next_runs(spec: SweepSpec, trials: list[Trial], results: Path) -> list[Trial]:
    """The runs `bench sweep` would start now, read from the finished runs without training any: the unfinished
    trials, the next local points of each cell whose trials have all finished, the unfinished reruns of each cell
    whose local stage has ended. Empty: the sweep is complete (its local stages may have stopped short of the
    bound `--list` counts)."""
    finished = {t.name: run for t in trials if (run := finished_run(results, t.recipe)) is not None}
    ranked, _ = ranked_trials(trials, finished, spec)
    local, pending = local_stage(spec, trials, ranked, finished, results, None) if spec.local else ([], [])
    ranked, _ = ranked_trials(trials + local, finished, spec)
    reruns = [t for t in all_reruns(spec, ranked) if finished_run(results, t.recipe) is None]
    return [t for t in trials if t.name not in finished] + pending + reruns


def own_finished_runs(spec: SweepSpec, results: Path) -> list[tuple[dict, dict]]:
    """(recipe, meta) of each finished run under `results` that this sweep made (tags.sweep: its name), not the
    other runs a folder may hold (a suite's, another sweep's); a damaged run is the analysis' to name."""
    out = []
    for run in rundir.runs_in(results):  # none before the first run finished (the folder: its space, claims)
        try:
            recipe, meta = rundir.read_recipe_and_meta(run)
        except UserError:
            continue
        if meta.get("status") in FINISHED and (recipe.get("tags") or {}).get("sweep") == spec.name:
            out.append((recipe, meta))
    return out


def measured_speed(finished: list[tuple[dict, dict]]) -> float | None:
    """Training images a second with evaluation included, the median over the sweep's finished runs
    (own_finished_runs, on this machine): what `--list` times the rest of the sweep by; None before any finished."""
    speeds = []
    for _, meta in finished:
        seconds = (meta.get("train_time_s") or 0) + (meta.get("eval_time_s") or 0)
        if meta.get("train_images_per_s") and seconds > 0:
            speeds.append(meta["train_images_per_s"] * meta["train_time_s"] / seconds)
    return float(np.median(speeds)) if speeds else None


def run_counts(spec: SweepSpec, trials: list[Trial], images: int | None = None) -> dict[str, float]:
    """The runs the sweep will train and the training epochs they take (at most: every run to its budget): its
    trials, the local stage's points (at most 2 x steps + extend a cell), and (every cell trained, no matched pair
    at the same point) reruns.top x seeds reruns a cell and 2 x seeds matched runs a pair and batch, each at its
    cell's epochs; with `images` (an epoch's), their optimizer steps too."""
    epochs = {t.batch: t.recipe.epochs for t in trials}  # a cell's trials share its budget
    seeds = len(spec.reruns.seeds)
    per_batch = len(spec.arms) * spec.reruns.top * seeds + len(spec.reruns.matched) * 2 * seeds
    # the local stage: ±1 .. ±steps around each cell's best, then up to `extend` further out on one side
    local = 2 * spec.local.steps + spec.local.extend if spec.local else 0
    counts = {
        "trials": len(trials),
        "local": local * len(spec.arms) * len(spec.batches),
        "reruns": per_batch * len(spec.batches),
        "trial_epochs": sum(t.recipe.epochs for t in trials),
        "local_epochs": local * len(spec.arms) * sum(epochs.values()),
        "rerun_epochs": per_batch * sum(epochs.values()),
    }
    if images:  # `images` training images an epoch: the optimizer steps of all of them
        counts["steps"] = sum(t.recipe.epochs * images / t.batch for t in trials) + sum(
            (local * len(spec.arms) + per_batch) * e * images / b for b, e in epochs.items()
        )
    return counts


def local_stage(
    spec: SweepSpec, trials: list[Trial], ranked: dict, finished: dict, results: Path, progress: Progress | None
) -> tuple[list[Trial], list[Trial]]:
    """Round after round, the next local points of every ranked cell (next_local_steps), centred on its best
    quasi-random trial, until no cell steps further; returns the local trials (`finished` gets their runs) and
    those other processes hold. Deterministic given the finished trials, so a resumed sweep finds the same points.
    `progress` None: train nothing, only read what finished (next_runs); the rest is returned as held."""
    centers = {cell: members[0] for cell, members in ranked.items()}
    tried: dict[tuple, list[int]] = {cell: [] for cell in centers}
    local: list[Trial] = []
    held: list[Trial] = []
    while batch := [
        t
        for cell, center in centers.items()
        if cell in ranked  # a cell whose local point did not finish steps no further
        for t in local_trials(spec, center, next_local_steps(spec, ranked[cell], tried[cell]))
    ]:
        if progress is None:
            done = {t.name: run for t in batch if (run := finished_run(results, t.recipe)) is not None}
            others = [t for t in batch if t.name not in done]
        else:
            with progress.bar(len(batch), "trial", f"local {spec.name}") as bar:
                done, others = run_trials(batch, results, spec, bar, progress)  # a held point leaves its cell waiting
        finished.update(done)
        held += others
        for t in batch:
            tried[(t.arm, t.batch)].append(t.recipe.tags["local_step"])
        local += batch
        ranked = ranked_trials(trials + local, finished, spec)[0]
    return local, held


def write_space(spec: SweepSpec, results: Path) -> Path:
    """`<results>/<name>.sweep.yaml`: the sweep as run (arms, their fixed keys and search space, the local stage,
    budget, selection), beside its runs, so the tuning table knows what was searched and what was held fixed
    without the runs' recipes carrying it (their identity stays as it was)."""
    path = Path(results) / f"{spec.name}.sweep.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(spec.model_dump(mode="json", exclude={"base"}), sort_keys=False)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def trial_table(spec: SweepSpec, trials: list[Trial], images: int | None = None) -> str:
    """The trials as a markdown table (bench sweep --list): each one's budget as the sweep declares it and, with
    `images` (an epoch's), the whole steps it runs (an images budget rounds to the nearest step, so its epochs are
    not the declared ones to the last digit)."""
    keys = list(dict.fromkeys(k for t in trials for k in t.point))
    head = ["name", "arm", "batch", "budget", "steps", *keys]
    rows = [
        [
            t.name,
            t.arm,
            str(t.batch),
            budget_words(budget_at(spec, t.batch)),
            f"{math.ceil(t.recipe.epochs * images / t.batch - 1e-9):,}" if images else "—",
            *(_show(t.point[k]) if k in t.point else "—" for k in keys),
        ]
        for t in trials
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def budget_words(budget: Budget) -> str:
    """'5 epochs', '1,000 steps', '85,000 images': a budget as the sweep file gives it."""
    unit = next(k for k in ("epochs", "steps", "images") if getattr(budget, k) is not None)
    return f"{getattr(budget, unit):,g} {unit}"


# a run's role -> its run_counts keys (count, epochs)
ROLE_COUNTS = {
    "trial": ("trials", "trial_epochs"),
    "local": ("local", "local_epochs"),
    **dict.fromkeys(("rerun", "rerun_top", "matched"), ("reruns", "rerun_epochs")),
}


def finished_counts(finished: list[tuple[dict, dict]]) -> dict[str, float]:
    """The sweep's finished runs (own_finished_runs) in run_counts' keys: how many of each kind, and their epochs at
    their budgets (what run_counts counts them at), so that the bound less these is what is left; and the seconds
    they took (training and evaluation), the pace a stop at the target gives (the bound assumes none stops)."""
    done = dict.fromkeys([key for keys in ROLE_COUNTS.values() for key in keys] + ["seconds"], 0.0)
    for recipe, meta in finished:
        tags = recipe["tags"]
        if tags.get("role") in ROLE_COUNTS:
            count, epochs = ROLE_COUNTS[tags["role"]]
            done[count] += 1
            done[epochs] += recipe["epochs"]
            done["seconds"] += (meta.get("train_time_s") or 0) + (meta.get("eval_time_s") or 0)
    return done


def _show(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
