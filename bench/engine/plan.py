"""The batch plan: how a global batch is split over ranks and micro-batches.

    global_batch = world_size x accum_steps x micro_batch

`micro_batch: auto` takes the largest micro-batch not above `cap` that divides
the per-rank batch, so accumulation covers the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import UserError

DEFAULT_MICRO_BATCH_CAP = 256


@dataclass(frozen=True)
class BatchPlan:
    global_batch: int
    world_size: int
    accum_steps: int
    micro_batch: int

    def __str__(self) -> str:
        return (f"{self.world_size} ranks x {self.accum_steps} micro-batches x {self.micro_batch} images"
                f" = global batch {self.global_batch}")


def make_plan(global_batch: int, micro_batch: int | str, world_size: int, cap: int = DEFAULT_MICRO_BATCH_CAP) -> BatchPlan:
    if global_batch % world_size:
        raise UserError(f"global_batch {global_batch} cannot be split evenly over {world_size} ranks")
    per_rank = global_batch // world_size
    if micro_batch == "auto":
        micro_batch = max(d for d in range(1, min(cap, per_rank) + 1) if per_rank % d == 0)
    if per_rank % micro_batch:
        raise UserError(
            f"micro_batch {micro_batch} does not divide the per-rank batch {per_rank} "
            f"(global_batch {global_batch} / {world_size} ranks)"
        )
    return BatchPlan(global_batch, world_size, per_rank // micro_batch, micro_batch)
