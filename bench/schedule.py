"""Learning-rate schedules: linear warm-up, then cosine, poly, step or constant.

Positions are measured in epochs (images seen / training-set size), so a recipe
means the same schedule at any global batch. Choices where the papers differ:

- Warm-up is linear from lr/W to lr over the first W steps (step s gets
  lr*(s+1)/W): the first step already moves, as in Goyal et al. and MLPerf.
- poly and cosine decay from the peak at the end of warm-up to `end_lr` at the
  last step, as in the MLPerf LARS reference (poly) and the TF ResNet recipe
  (cosine).
"""

from __future__ import annotations

import math

from bench.recipe import ScheduleSpec


def lr_at(step: int, peak: float, total_steps: int, steps_per_epoch: float, spec: ScheduleSpec) -> float:
    """The learning rate for optimizer step `step` (0-based) of `total_steps`."""
    warmup = min(round(spec.warmup_epochs * steps_per_epoch), total_steps)
    if step < warmup:
        return peak * (step + 1) / warmup
    if spec.decay == "constant":
        return peak
    if spec.decay == "step":
        epoch = step / steps_per_epoch
        return peak * spec.step_factor ** sum(epoch >= m for m in spec.milestones)
    span = max(total_steps - 1 - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    if spec.decay == "poly":
        shape = (1.0 - progress) ** spec.power
    else:
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    return spec.end_lr + (peak - spec.end_lr) * shape
