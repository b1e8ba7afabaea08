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
    budget: {epochs: 3}                     # or {steps: N} or {images: N}, per run
    select: {split: holdout, metric: top1}  # holdout | validation; top1 | steps_to_target (validation only)
    reruns: {seeds: [1, 2, 3], top: 2, matched: [[vrgd_lars, lars]]}

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
- Reruns use seeds other than the trials' seed, so the quoted figures carry no selection luck.
- Each trial is claimed by an exclusive lock on `<results>/<name>/.claim` while it trains, so
  several processes (or nodes on a shared file system) can run one sweep: a trial is trained once.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from bench import catalog
from bench import recipe as recipe_mod
from bench.engine.rundir import FINISHED, prune_checkpoints
from bench.errors import UserError
from bench.suite import Preempted, finished_run


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Axis(_Strict):
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


class Arm(_Strict):
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


class Budget(_Strict):
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


class Select(_Strict):
    split: Literal["holdout", "validation"] = Field(
        "holdout", description="holdout: a part of the training set (recipe data.holdout) kept out of training"
    )
    metric: Literal["top1", "steps_to_target"] = "top1"


class Reruns(_Strict):
    seeds: list[NonNegativeInt] = Field(min_length=1)
    top: PositiveInt = Field(
        1,
        description="rerun the best `top` trials of each cell (the runner-up's reruns show "
        "whether a near-tie selection mattered)",
    )
    matched: list[tuple[str, str]] = Field(
        default_factory=list,
        description="pairs of arms each rerun at the other's selected point too (a 2 x 2 of arm x point per batch)",
    )


class SweepSpec(_Strict):
    name: str
    base: Path
    set: dict[str, Any] = Field(default_factory=dict)
    batches: list[PositiveInt] = Field(min_length=1)
    arms: dict[str, Arm] = Field(min_length=1)
    search: Literal["quasirandom", "grid"] = "quasirandom"
    trials: PositiveInt | None = None
    studies: PositiveInt = 1
    seed: NonNegativeInt = 0
    trial_seed: NonNegativeInt = 0
    budget: Budget
    select: Select = Select()
    reruns: Reruns
    keep_checkpoints: bool = Field(
        False,
        description="trials keep their final checkpoint (reruns always do, as recipe key checkpoint.keep_final says)",
    )

    @model_validator(mode="after")
    def _consistent(self):
        if len(set(self.batches)) != len(self.batches):
            raise ValueError("batches: each batch once")
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


@dataclass(frozen=True)
class Trial:
    name: str
    arm: str
    batch: int
    role: str  # "trial" or "rerun"
    index: int  # trial number (reruns: the best trial's)
    study: int
    point: dict  # the searched keys' values
    recipe: recipe_mod.Recipe = field(compare=False, repr=False)


def is_sweep_file(path: str | Path) -> bool:
    """Whether `path` reads as a sweep file (a mapping with `arms`) rather than a recipe."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    return isinstance(raw, dict) and "arms" in raw


def load(path: str | Path) -> SweepSpec:
    path = Path(path)
    raw = recipe_mod.read_yaml(path, "sweep")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a sweep file is a YAML mapping (base, batches, arms, budget, reruns, ...)")
    raw.setdefault("name", path.stem)
    try:
        recipe_mod.check_path_component(str(raw["name"]), "name")
        spec = SweepSpec.model_validate(raw)
    except ValueError as e:  # pydantic's ValidationError is a ValueError too
        message = recipe_mod.describe_error(e, SweepSpec) if isinstance(e, ValidationError) else str(e)
        raise UserError(f"{path}: {message}") from None
    base = (path.parent / spec.base).resolve()
    if not base.is_file():
        raise UserError(f"{path}: key 'base': no recipe file at {base}")
    return spec.model_copy(update={"base": base})


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
        "global_batch": batch,
        "epochs": epochs,
        "seed": seed,
        "name": name,
        **{k: _round(v) for k, v in point.items()},
    }
    assignments = [f"{k}={json.dumps(v)}" for k, v in sets.items()]
    recipe = recipe_mod.load(spec.base, assignments)
    return recipe.model_copy(update={"tags": {**recipe.tags, **tags}})


def _train_size(spec: SweepSpec) -> int:
    """Training images after the holdout, read from the data (only budgets in steps or images need it)."""
    from bench.data import build

    recipe = recipe_mod.load(spec.base, [f"{k}={json.dumps(v)}" for k, v in spec.set.items()])
    return build(recipe.data, 1, 1, 0, 1, 0, device="cpu").train_size


def expand(path: str | Path, spec: SweepSpec) -> list[Trial]:
    """Every trial of the sweep, in running order (round-robin over cells); bad input raises UserError."""
    train_size = None if spec.budget.epochs is not None else _train_size(spec)
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
                spec, label, batch, point, spec.budget.epochs_at(batch, train_size or 1), spec.trial_seed, name, tags
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
    """An exclusive lock on <results>/<name>/.claim: held while this process trains the trial; released
    when the process ends, however it ends."""

    def __init__(self, results: Path, name: str):
        folder = Path(results) / name
        folder.mkdir(parents=True, exist_ok=True)
        self._file = open(folder / ".claim", "w")

    def take(self, wait: bool = False) -> bool:
        """The lock, if free (or, with `wait`, once its holder lets go)."""
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            return True
        except BlockingIOError:
            self._file.close()
            return False

    def release(self) -> None:
        self._file.close()


def selection_score(run: Path, recipe: recipe_mod.Recipe, select: Select) -> tuple:
    """Sort key of a finished trial (larger is better): (reached, -steps, top1) for steps_to_target,
    (top1,) for top1; a diverged trial or one with no evaluation scores lowest."""
    from bench.analysis.results import read_metrics

    column = "holdout_top1" if select.split == "holdout" else "val_top1"
    status = json.loads((run / "meta.json").read_text()).get("status")
    metrics = read_metrics(run)
    if status != "completed" or not len(metrics) or not math.isfinite(metrics[column].iloc[-1]):
        return (-math.inf,) * (3 if select.metric == "steps_to_target" else 1)
    top1 = float(metrics[column].iloc[-1])
    if select.metric == "top1":
        return (top1,)
    reached = metrics[metrics[column] >= recipe.target_top1]
    return (1.0, -float(reached["step"].iloc[0]), top1) if len(reached) else (0.0, 0.0, top1)


@dataclass
class Progress:
    done: int = 0
    best: dict = field(default_factory=dict)  # (arm, batch) -> (score, trial name)


def run_trials(trials: list[Trial], results: Path, spec: SweepSpec, bar, progress: Progress) -> dict[str, Path]:
    """Train every trial not finished yet; returns name -> finished run. A trial another process holds
    (a job array's other tasks) is left to it until this process has nothing else to do, then waited
    for: every process ends with the same finished trials, so each picks the same best and no rerun is
    left to a process that has already gone."""
    finished, held_elsewhere = {}, []
    for trial in trials:
        run = finished_run(results, trial.recipe)
        if run is None:
            claim = Claim(results, trial.name)
            if not claim.take():
                held_elsewhere.append(trial)
                continue
            run = _train_claimed(trial, results, claim, bar)
        _finished(trial, run, finished, spec, bar, progress)
    for trial in held_elsewhere:
        bar.set_postfix_str(f"waiting for {trial.name} (another process)")
        claim = Claim(results, trial.name)
        claim.take(wait=True)
        _finished(trial, _train_claimed(trial, results, claim, bar), finished, spec, bar, progress)
    return finished


def _train_claimed(trial: Trial, results: Path, claim: Claim, bar) -> Path | None:
    """Train a claimed trial unless another process finished it meanwhile; the finished run, if any."""
    from bench.engine.train import train

    try:
        run = finished_run(results, trial.recipe)
        if run is None:
            bar.set_postfix_str(f"{trial.name} ...")
            done = train(trial.recipe, results, progress=False)
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
        if trial.role == "trial":
            score = selection_score(run, trial.recipe, spec.select)
            cell = (trial.arm, trial.batch)
            if cell not in progress.best or score > progress.best[cell][0]:
                progress.best[cell] = (score, trial.name)
            if not spec.keep_checkpoints:  # a trial is read for its curve only: its disk goes back
                prune_checkpoints(run, 0)
    bar.update(1)
    bar.set_postfix_str(_best_so_far(progress) if trial.role == "trial" else f"rerun {trial.name} done")


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


def this_platform() -> str:
    """The kernel platform this process trains on, as results.kernels names a run's."""
    import torch

    from bench.analysis.results import kernels
    from bench.engine.rundir import versions

    cuda = torch.cuda.is_available()
    return kernels(
        {
            "device": "cuda" if cuda else "cpu",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "versions": versions(),
        }
    )


def check_provenance(spec: SweepSpec, results: Path, allow_dirty: bool, allow_mixed_kernels: bool) -> None:
    """A study's runs come from one clean commit and one kernel platform: refuse to start or resume from an
    uncommitted tree (unless allow_dirty), or on a platform other than that of the study's finished runs
    (unless allow_mixed_kernels); warn when the finished runs came from another commit."""
    from bench.analysis.results import kernels
    from bench.engine.rundir import git_commit

    commit = git_commit()
    if commit and commit.endswith("+dirty") and not allow_dirty:
        raise UserError(
            f"sweep {spec.name}: bench's code has uncommitted changes (git status in "
            f"{Path(__file__).parent}); a study's runs come from one clean commit: commit them, or pass "
            "--allow-dirty (the verdict then warns)"
        )
    done = [json.loads(m.read_text()) for m in sorted(Path(results).glob("*/*/meta.json"))]
    done = [m for m in done if m.get("status") in FINISHED]
    theirs = sorted({kernels(m) for m in done})
    here = this_platform()
    if theirs and theirs != [here] and not allow_mixed_kernels:
        pin = sorted({m.get("cpu_capability") for m in done if m.get("cpu_capability")})
        hint = f"ATEN_CPU_CAPABILITY={pin[0].lower()} where this CPU has it, or " if len(pin) == 1 else ""
        raise UserError(
            f"{results}: the study's finished runs used {'; '.join(theirs)} and this process would use "
            f"{here}; a study's pairs come from one kernel platform: resume it on theirs ({hint}the "
            "same machine type), or pass --allow-mixed-kernels (the verdict then warns)"
        )
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
    single study (the median over studies of each study's best is then one study's luck)."""
    out = []
    if spec.search == "quasirandom":
        for label, arm in spec.arms.items():
            wanted = 2 ** (len(arm.space) + 1)
            if spec.trials < wanted:
                out.append(
                    f"arms.{label}: {spec.trials} trials for {len(arm.space)} searched keys; a quasi-random "
                    f"search resolves them from about {wanted} (2^(d+1)) trials a study"
                )
    if spec.studies == 1:
        out.append(
            "studies: 1; headline sweeps use at least 2 (AlgoPerf: 3 studies x 5 trials), each its own "
            "scramble, so the best point's luck is seen"
        )
    return out


def run_sweep(
    path: str | Path,
    results: Path,
    only: str | None = None,
    allow_dirty: bool = False,
    allow_mixed_kernels: bool = False,
) -> tuple[list[Trial], list[str]]:
    """Run the trials, then the reruns of each cell's best trial; returns (all trials and reruns, waiting
    cells). `only`: run just the trials whose names contain it (no reruns). Refuses an uncommitted tree or a
    kernel platform other than the study's (check_provenance)."""
    from tqdm import tqdm

    spec = load(path)
    trials = expand(path, spec)
    check_provenance(spec, results, allow_dirty, allow_mixed_kernels)
    for warning in search_warnings(spec):
        print(f"bench: warning: {path}: {warning}", file=sys.stderr)
    chosen = [t for t in trials if only in t.name] if only else trials
    if only and not chosen:
        raise UserError(f"--only {only!r}: no trial of {path} has that in its name (see bench sweep {path} --list)")
    progress = Progress()
    with tqdm(total=len(chosen), unit="trial", desc=f"sweep {spec.name}", dynamic_ncols=True) as bar:
        finished = run_trials(chosen, results, spec, bar, progress)
    if only:
        return chosen, []
    ranked, waiting = ranked_trials(trials, finished, spec)
    reruns = all_reruns(spec, ranked)
    with tqdm(total=len(reruns), unit="run", desc=f"reruns {spec.name}", dynamic_ncols=True) as bar:
        run_trials(reruns, results, spec, bar, progress)
    return trials + reruns, waiting


def trial_table(trials: list[Trial]) -> str:
    """The trials as a markdown table (bench sweep --list)."""
    keys = list(dict.fromkeys(k for t in trials for k in t.point))
    head = ["name", "arm", "batch", "epochs", *keys]
    rows = [
        [
            t.name,
            t.arm,
            str(t.batch),
            f"{t.recipe.epochs:g}",
            *(_show(t.point[k]) if k in t.point else "—" for k in keys),
        ]
        for t in trials
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def _show(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
