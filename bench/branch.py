"""`bench branch FILE`: the critical batch along training, measured by branching from one small-batch run
(Merrill et al. 2025, "Critical Batch Size Revisited", arXiv 2505.23971; bench/analysis/branching.py reads it).

A branch file names a base recipe, the reference's batch B0, the points to branch from (images seen), the
multipliers k, the windows Δ and the metric:

    name: example                      # default: the file's stem
    base: ../sweeps/base/fashion-mnist-ladder-bn8.yaml   # a recipe, relative to this file
    set: {schedule: {decay: constant, warmup_epochs: 0.5}}   # overrides of the base (as a sweep's set)
    arms:                              # label -> recipe keys (an optimizer and its lr at B0) and its lr rule
      lars: {set: {optimizer: {name: lars, lr: 2.0, momentum: 0.9}}}         # rule: linear (its kind's)
      nadamw: {set: {optimizer: {name: nadamw, lr: 0.003}}, lr_rule: sqrt}
    b0: 64
    points: [4096, 8192]               # images seen at the reference's checkpoints
    k: [2, 4, 8]                       # powers of two (1: a control, the reference continued)
    deltas: [2048, 4096]               # windows in images; each branch is capped at 2 x the largest
    metric: val_top1                   # or train_loss
    seed: 0                            # the reference's
    seeds: [0, 1]                      # the branches' (default: the reference's)

Runs are ordinary run directories under --out: the reference `<name>-<arm>-ref-b<B0>` (role branch_reference,
checkpoint.at_images the points, kept to the end) and each branch `<name>-<arm>-at<point>-k<k>-seed<s>` (role
branch), both tagged with what the analysis reads (a branch also with its reference's name and recipe digest, so a
changed reference makes new branches). A finished run is skipped, so the same command goes on where it stopped;
the analysis reads each branch against the reference run its meta says it branched from (`branched_from`).

Choices where the papers are silent, named:
- The lr at k x B0: the arm's lr x k (linear: SGD, Nesterov, LARS, LARC, Schedule-Free SGD) or x sqrt(k) (sqrt:
  AdamW, NAdamW, LAMB, SOAP, Schedule-Free AdamW), as Merrill et al. and OLMo-core's batch-size scheduler do; the
  default from the optimizer record's `base`, and required for the others (Muon, Lion, Kron, MERIT).
- One branch serves every Δ: it runs to c + 2 x the largest Δ (the trajectory to c + 2Δ is the same run with a
  shorter cap), so a smaller Δ costs nothing more; no early stop at the target (a curve on a validation subset
  would otherwise stop on one set and be read on another).
- Only a constant schedule after warm-up (schedule.decay constant): the length of a branch then changes no lr, as
  in the stable phase of WSD that Merrill et al. branch from; a decay would make a branch's schedule another's.
- A branch keeps the reference's seed's data order and RNG (it continues the reference exactly at k = 1);
  another seed draws the images after the point from its own order and augmentation: the spread over seeds.
- The EMA's decay is the branch batch's (Busbridge et al.'s rule, train.ema_model), its weights carried.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from bench import catalog, rundir
from bench import recipe as recipe_mod
from bench.engine import checkpoint
from bench.errors import UserError
from bench.identity import digest
from bench.recipe import Strict
from bench.suite import Preempted, finished_run

RULES = {"linear": lambda k: k, "sqrt": math.sqrt}
KIND = {  # the lr rule of an optimizer record's base update
    **dict.fromkeys(("sgd", "nesterov", "lars", "larc", "schedulefree_sgd"), "linear"),
    **dict.fromkeys(("adamw", "nadamw", "lamb", "soap", "schedulefree_adamw"), "sqrt"),
}


class BranchArm(Strict):
    set: dict[str, Any] = Field(default_factory=dict, description="recipe keys of this arm (its optimizer, lr at B0)")
    lr_rule: Literal["linear", "sqrt"] | None = Field(None, description="lr x k or x sqrt(k); default: its kind's")


class BranchSpec(Strict):
    name: str
    base: Path = Field(strict=False)
    set: dict[str, Any] = Field(default_factory=dict)
    arms: dict[str, BranchArm] = Field(default_factory=dict)
    b0: PositiveInt
    points: list[PositiveInt] = Field(min_length=1)
    k: list[PositiveInt] = Field(min_length=1)
    deltas: list[PositiveInt] = Field(min_length=1)
    metric: Literal["val_top1", "train_loss"] = "val_top1"
    seed: NonNegativeInt = 0
    seeds: list[NonNegativeInt] | None = None

    @model_validator(mode="after")
    def _consistent(self):
        for k in self.k:
            if k & (k - 1):
                raise ValueError(f"k: {k} is not a power of two (the branches double the batch: 1, 2, 4, 8, ...)")
        unit = self.b0 * max(self.k)
        for key, values in (("points", self.points), ("deltas", self.deltas)):
            for v in values:
                if v % unit:
                    raise ValueError(
                        f"{key}: {v:,} images is not a whole number of steps at the largest branch batch "
                        f"{max(self.k)} x {self.b0} = {unit:,}"
                    )
        for label in self.arms:
            recipe_mod.check_path_component(label, f"arms.{label}")
        return self

    @property
    def branch_seeds(self) -> list[int]:
        return self.seeds if self.seeds is not None else [self.seed]


def is_branch_file(path: str | Path) -> bool:
    """Whether `path` reads as a branch file (a mapping with b0 and points) rather than a recipe or a sweep."""
    return {"b0", "points"} <= recipe_mod.top_keys(path)


def load(path: str | Path) -> BranchSpec:
    return recipe_mod.load_file_spec(path, BranchSpec, "branch", "base, b0, points, k, deltas, ...")


def arms(spec: BranchSpec) -> dict[str, BranchArm]:
    """The file's arms, or one named after the base recipe's optimizer."""
    if spec.arms:
        return spec.arms
    base = recipe_mod.load(spec.base, _assignments(spec.set), models=False)
    return {base.optimizer.name: BranchArm()}


def _assignments(sets: dict) -> list[str]:
    return [f"{k}={json.dumps(v)}" for k, v in sets.items()]


def epochs_for(images: int, train_size: int) -> float:
    """Epochs that make a schedule of exactly `images`: images / train_size, lowered by an ulp where the product
    rounds above `images` (which would add a step: engine/pace.py's end is position x batch >= epochs x size)."""
    epochs = images / train_size
    while epochs * train_size > images:
        epochs = math.nextafter(epochs, 0.0)
    return epochs


def lr_rule(path: Path, label: str, arm: BranchArm, optimizer: str) -> str:
    record = catalog.OPTIMIZERS[optimizer]
    rule = arm.lr_rule or KIND.get(record.base)
    if rule is None:
        raise UserError(
            f"{path}: key 'arms.{label}.lr_rule': required for {optimizer} (its update, {record.base}, is neither "
            "SGD/LARS-type, linear, nor Adam-type, sqrt): give linear or sqrt"
        )
    return rule


def _recipe(spec: BranchSpec, label: str, arm: BranchArm, sets: dict, tags: dict) -> recipe_mod.Recipe:
    recipe = recipe_mod.load(spec.base, _assignments({**spec.set, **arm.set, **sets}))
    return recipe.model_copy(update={"tags": {**recipe.tags, "branching": spec.name, "arm": label, **tags}})


def reference(spec: BranchSpec, label: str, arm: BranchArm, train_size: int) -> recipe_mod.Recipe:
    """The reference run of an arm: the base at B0 as long as the last point's branches (point + 2 x the largest
    Δ: its curve then brackets every window's end with evaluations on the same images as theirs, the full
    evaluation at its end left aside), with its points kept."""
    end = max(spec.points) + 2 * max(spec.deltas)
    sets = {
        "global_batch": spec.b0,
        "epochs": epochs_for(end, train_size),
        "seed": spec.seed,
        "name": f"{spec.name}-{label}-ref-b{spec.b0}",
        "checkpoint.at_images": sorted(spec.points),
        "eval.stop_at_target": False,
    }
    return _recipe(spec, label, arm, sets, {"role": "branch_reference", "b0": spec.b0})


def branch(
    path: Path,
    spec: BranchSpec,
    label: str,
    arm: BranchArm,
    ref: recipe_mod.Recipe,
    point: int,
    k: int,
    seed: int,
    train_size: int,
) -> recipe_mod.Recipe:
    """A branch: the reference's recipe at k x B0 with the lr by the arm's rule, to point + 2 x the largest Δ."""
    rule = lr_rule(path, label, arm, ref.optimizer.name)
    sets = {
        "global_batch": k * spec.b0,
        "optimizer.lr": float(f"{ref.optimizer.lr * RULES[rule](k):.6g}"),
        "epochs": epochs_for(point + 2 * max(spec.deltas), train_size),
        "seed": seed,
        "name": f"{spec.name}-{label}-at{point}-k{k}-seed{seed}",
        "eval.stop_at_target": False,
    }
    tags = {
        "role": "branch",
        "b0": spec.b0,
        "point": point,
        "k": k,
        "deltas": ",".join(map(str, sorted(spec.deltas))),
        "metric": spec.metric,
        "lr_rule": rule,
        "reference": f"{ref.name}@{digest(ref.model_dump(mode='json', exclude={'logging'}))}",  # a new one: rerun
    }
    return _recipe(spec, label, arm, sets, tags)


def check_reference(path: Path, ref: recipe_mod.Recipe) -> None:
    """What branching needs of the reference's recipe: a fixed batch and a constant schedule (module docstring)."""
    record = catalog.OPTIMIZERS[ref.optimizer.name]
    if ref.adaptive_batch or record.pace != "fixed":
        raise UserError(f"{path}: branching needs a fixed batch pace; {ref.optimizer.name} or adaptive_batch moves it")
    if ref.schedule.decay != "constant":
        raise UserError(
            f"{path}: branching reads a constant schedule (schedule.decay is {ref.schedule.decay}): a branch's length "
            "would change its lr; set schedule.decay: constant (the stable phase Merrill et al. branch from)"
        )


def train_size(spec: BranchSpec) -> int:
    """Training images after the holdout, read from the data."""
    from bench.data import build

    recipe = recipe_mod.load(spec.base, _assignments(spec.set))
    return build(recipe.data, 1, 1, 0, 1, 0, device="cpu").train_size


def plan(path: Path, spec: BranchSpec) -> list[tuple[recipe_mod.Recipe, list[tuple[recipe_mod.Recipe, int]]]]:
    """Every arm's reference and its branches (recipe, point), all bad input first."""
    size = train_size(spec)
    out = []
    for label, arm in arms(spec).items():
        ref = reference(spec, label, arm, size)
        check_reference(path, ref)
        branches = [
            (branch(path, spec, label, arm, ref, point, k, seed, size), point)
            for point in sorted(spec.points)
            for k in sorted(spec.k)
            for seed in spec.branch_seeds
        ]
        out.append((ref, branches))
    return out


def run_branching(path: Path, results: Path, allow_mixed_kernels: bool = False) -> list[tuple[str, str]]:
    """Train what is not finished yet: each arm's reference, then its branches, on the platform of the finished
    runs (a branch's numbers are read against its reference's); returns (run, what happened)."""
    path = Path(path)
    spec = load(path)
    rundir.refuse_another_platform(Path(results), allow_mixed_kernels)
    inputs = (path, spec.base)
    outcomes = []
    for ref, branches in plan(path, spec):
        ref_dir = _ensure(ref, results, inputs, outcomes, None)
        kept = checkpoint.kept(ref_dir)
        for recipe, point in branches:
            if point not in kept:
                raise UserError(
                    f"{path}: the reference {ref_dir} has no checkpoint at {point:,} images "
                    f"({checkpoint.kept_file(ref_dir, point).name}); run it again (delete {ref_dir}) to make its points"
                )
            _ensure(recipe, results, inputs, outcomes, (kept[point], recipe.seed == ref.seed))
    return outcomes


def _ensure(recipe, results: Path, inputs, outcomes: list, branch_from) -> Path:
    """The finished run of `recipe`, trained (or resumed) here if there is none."""
    from bench.engine.train import train

    done = finished_run(results, recipe)
    if done is not None:
        outcomes.append((recipe.name, "skipped (finished before)"))
        return done
    run = train(recipe, results, progress=False, inputs=inputs, branch_from=branch_from)
    status = run.meta.get("status")
    if status == "preempted":
        raise Preempted(f"{recipe.name} checkpointed in {run.path}", run.meta.get("stopped_by"))
    if status != "completed" and branch_from is None:  # a branch that diverged is a result: it needed more than 2Δ
        raise UserError(f"{recipe.name} ended {status} ({run.meta.get('reason')}) in {run.path}: nothing to branch on")
    outcomes.append((recipe.name, status + (f" ({run.meta['reason']})" if run.meta.get("reason") else "")))
    return run.path
