"""The batch plan: how a batch is split over ranks, GSNR groups and micro-batches.

    batch        = world_size x accum_steps x micro_batch
    gsnr_groups  = world_size x groups per rank;  a group = accum_steps / groups-per-rank
                   consecutive micro-batches on one rank

A group is what a VRGD optimizer treats as one device's gradient (the paper's
k); plain optimizers simply average the groups. By default every micro-batch
is a group (k = world_size x accum_steps). `micro_batch: auto` takes the
largest micro-batch not above the cap that divides a group, so accumulation
covers the rest.

With ghost BatchNorm (`model.bn_batch`) a micro-batch may hold several whole
groups (groups_per_micro; each group whole BatchNorm batches, so that a group's
loss depends on its own images only), and by default every bn_batch images are
a group: micro_batch 64 with bn_batch 8 computes the groups of micro_batch 8.
`micro_batch: auto` then takes the largest multiple of bn_batch not above the
cap that divides a group or is a whole number of groups.

The plan's `batch` is the recipe's global_batch; under adaptive batching (SimiGrad) it is the
chunk, adaptive_batch.min_batch, the unit a step takes a whole number of (the controller scales
that number; the recipe's global_batch is then the first batch and the lr's reference). The run's meta
keeps the plan's batch under the key `batch` (plan.as_dict); runs written before 2026-11-24 named it
`global_batch`, which the run record upgrades (rundir.upgraded_meta; the analysis reads it as Run.plan_batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench import catalog
from bench.errors import UserError

DEFAULT_MICRO_BATCH_CAP = 256


def ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


@dataclass(frozen=True)
class BatchPlan:
    batch: int  # the images one pass of the plan takes (module docstring)
    world_size: int
    accum_steps: int
    micro_batch: int
    gsnr_groups: int

    @property
    def micro_per_group(self) -> int:
        return max(1, self.accum_steps * self.world_size // self.gsnr_groups)

    @property
    def groups_per_micro(self) -> int:
        return max(1, self.gsnr_groups // (self.accum_steps * self.world_size))

    def __str__(self) -> str:
        return (
            f"{ranks(self.world_size)} x {self.accum_steps} micro-batches x {self.micro_batch} images"
            f" = batch {self.batch}; {self.gsnr_groups} gradient group{'s' * (self.gsnr_groups != 1)}"
            + (
                f" of {self.micro_per_group} micro-batch(es)"
                if self.groups_per_micro == 1
                else f", {self.groups_per_micro} a micro-batch"
            )
        )

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "world_size": self.world_size,
            "accum_steps": self.accum_steps,
            "micro_batch": self.micro_batch,
            "gsnr_groups": self.gsnr_groups,
        }


def make_plan(
    batch: int,
    micro_batch: int | str,
    world_size: int,
    gsnr_groups: int | None = None,
    cap: int = DEFAULT_MICRO_BATCH_CAP,
    key: str = "global_batch",
    bn_batch: int | None = None,
) -> BatchPlan:
    """The plan of `batch` (the recipe's `key`: global_batch, or adaptive_batch.min_batch); `bn_batch`: ghost
    BatchNorm's batch (model.bn_batch), which lets a micro-batch hold whole groups."""
    if batch % world_size:
        raise UserError(f"{key} {batch} cannot be split evenly over {ranks(world_size)}")
    per_rank = batch // world_size
    if gsnr_groups is not None and gsnr_groups % world_size:
        raise UserError(
            f"gsnr_groups {gsnr_groups} is not a multiple of the {ranks(world_size)} "
            "(each rank contributes whole groups)"
        )
    if gsnr_groups is None and bn_batch:
        if per_rank % bn_batch:
            raise UserError(f"model.bn_batch {bn_batch} does not divide the per-rank batch {per_rank}")
        gsnr_groups = batch // bn_batch
    groups_per_rank = 1 if gsnr_groups is None else gsnr_groups // world_size
    if per_rank % groups_per_rank:
        raise UserError(
            f"gsnr_groups {gsnr_groups} does not divide {key} {batch} into equal groups over {ranks(world_size)}"
        )
    group = per_rank // groups_per_rank
    whole = bool(bn_batch) and group % bn_batch == 0  # a micro-batch may hold whole groups
    if micro_batch == "auto":
        fits = [
            d
            for d in range(1, min(cap, per_rank) + 1)
            if (group % d == 0 or (whole and d % group == 0 and per_rank % d == 0))
            and (not bn_batch or d % bn_batch == 0)
        ]
        if not fits:
            raise UserError(
                f"micro_batch auto: model.bn_batch {bn_batch} is above the largest micro-batch that fits, {cap}"
            )
        micro_batch = max(fits)
    if bn_batch and micro_batch > group and not whole:
        raise UserError(
            f"gsnr_groups {gsnr_groups}: a group of {group} images is not whole BatchNorm batches of model.bn_batch "
            f"{bn_batch} (its gradient would depend on other groups' images)"
        )
    if whole and micro_batch > group:
        if micro_batch % group or per_rank % micro_batch:
            raise UserError(
                f"micro_batch {micro_batch} is not a whole number of groups of {group} images dividing the per-rank "
                f"batch {per_rank}"
            )
    elif group % micro_batch:
        what = f"group of {group} images" if gsnr_groups else f"per-rank batch {per_rank}"
        raise UserError(
            f"micro_batch {micro_batch} does not divide the {what} ({key} {batch} over {ranks(world_size)})"
        )
    accum_steps = per_rank // micro_batch
    return BatchPlan(
        batch,
        world_size,
        accum_steps,
        micro_batch,
        gsnr_groups if gsnr_groups is not None else world_size * accum_steps,
    )


def recipe_plan(recipe, world_size: int, memory_cap: int | None = None, groups: bool = True) -> BatchPlan:
    """The checked plan of `recipe` on `world_size` ranks: the runner, the launchers (`bench run --nproc`,
    `bench submit`) and `bench validate` call this, so an impossible plan is refused before any worker starts or
    script is written. `memory_cap`: the largest micro-batch the device holds (the runner's probe,
    engine/memory.py), for auto. groups=False leaves out the check that an optimizer which keeps the gradient
    groups apart has two (validate, where micro_batch auto's group count is the device's to decide)."""
    key = "adaptive_batch.min_batch" if recipe.adaptive_batch else "global_batch"  # SimiGrad's chunk is the unit
    batch = recipe.adaptive_batch.min_batch if recipe.adaptive_batch else recipe.global_batch
    cap = min(recipe.engine.micro_batch_cap, memory_cap or recipe.engine.micro_batch_cap)
    plan = make_plan(batch, recipe.micro_batch, world_size, recipe.gsnr_groups, cap, key, recipe.model.bn_batch)
    if groups and catalog.OPTIMIZERS[recipe.optimizer.name].reduces_gradients and plan.gsnr_groups < 2:
        raise UserError(
            f"optimizer '{recipe.optimizer.name}' needs at least 2 gradient groups per step and the "
            f"plan has 1 ({plan}); set gsnr_groups, or a smaller micro_batch"
        )
    return plan
