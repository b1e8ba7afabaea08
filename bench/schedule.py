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


def lr_at(
    step: int, peak: float, total_steps: int, steps_per_epoch: float, spec: ScheduleSpec, factor: float = 1.0
) -> float:
    """The learning rate of optimizer step `step` (0-based) of `total_steps`: the one place a run's lr is decided,

        lr = shape(step) x factor      shape: warm-up, then the decay, from `peak` (to spec.end_lr)

    and where each input comes from:

    - peak: the recipe's optimizer.lr; spec: its schedule (warm-up, decay).
    - step, total_steps, steps_per_epoch: the schedule position in steps of the pace's reference batch
      (bench/engine/pace.py): the step count at a fixed batch, the sum of AdaScale's gains (scale-invariant
      steps), images seen / the first batch for SimiGrad's adaptive batch.
    - factor: the pace's batch rule, sqrt(batch / first batch) for SimiGrad's adaptive batch, else 1.
    - AdaScale's gain is the one factor not known here: it is measured from the gradients of the step itself,
      inside the optimizer's step(). The runner hands this lr to the optimizer (group["lr"]) and the optimizer
      multiplies it by its gain in one place, GroupOptimizer._lr (bench/optim/groups.py, AdaScale._lr); the
      events log records this lr and the gain beside it.
    """
    warmup = min(round(spec.warmup_epochs * steps_per_epoch), total_steps)
    if step < warmup:
        lr = peak * (step + 1) / warmup
    elif spec.decay == "constant":
        lr = peak
    elif spec.decay == "step":
        epoch = step / steps_per_epoch
        lr = peak * spec.step_factor ** sum(epoch >= m for m in spec.milestones)
    else:
        span = max(total_steps - 1 - warmup, 1)
        progress = min((step - warmup) / span, 1.0)
        if spec.decay == "poly":
            shape = (1.0 - progress) ** spec.power
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        lr = spec.end_lr + (peak - spec.end_lr) * shape
    return lr * factor
