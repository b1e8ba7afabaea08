"""Which training images make up each micro-batch: a pure function of the step.

Training reads one endless stream: epoch e is a permutation of the training set
seeded by (seed, e), and the epochs are concatenated. Optimizer step s takes
stream positions [s*B, (s+1)*B). Inside that global batch, micro-batch m is
positions [m*b, (m+1)*b), and rank r of W owns micro-batches
r*A .. r*A + A-1 (A = accumulation steps). Consequences:

- the global batch, and each micro-batch, are the same images whatever the
  world size, so 1x8, 2x4 and 4x2 (ranks x micro-batches) compute the same step;
- a global batch larger than the dataset simply spans several epochs, and
  "epochs" means images seen / training-set size;
- every image of an epoch is seen exactly once before the next epoch starts,
  and resuming at step s needs nothing but s.

Each sample also carries an augmentation seed derived from its stream
position, so random crops do not depend on worker count or world size.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np


class StepStream:
    """step_images: the images one step of the stream takes (the plan's batch: the global batch, or under
    adaptive batching the chunk a step takes a whole number of, bench/engine/plan.py)."""

    def __init__(self, n: int, step_images: int, micro_batch: int, rank: int, world: int, seed: int):
        if step_images % (micro_batch * world):
            raise ValueError("step_images must be a multiple of micro_batch * world")
        self.n, self.step_images, self.micro_batch = n, step_images, micro_batch
        self.rank, self.world, self.seed = rank, world, seed
        self.accum_steps = step_images // (micro_batch * world)
        self._perm_epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        return self._perm

    def positions(self, step: int, micro: int) -> range:
        """Stream positions of this rank's `micro`-th micro-batch of `step`."""
        m = self.rank * self.accum_steps + micro
        start = step * self.step_images + m * self.micro_batch
        return range(start, start + self.micro_batch)

    def micro_batch_samples(self, step: int, micro: int) -> list[tuple[int, int]]:
        """[(image index, augmentation seed)] of one micro-batch."""
        out = []
        for p in self.positions(step, micro):
            epoch, offset = divmod(p, self.n)
            out.append((int(self._permutation(epoch)[offset]), (self.seed << 40) + p))
        return out

    def iterate(self, start_step: int, end_step: int) -> Iterator[list[tuple[int, int]]]:
        """This rank's micro-batches for steps [start_step, end_step), in order."""
        for step in range(start_step, end_step):
            for micro in range(self.accum_steps):
                yield self.micro_batch_samples(step, micro)


def eval_shard(n: int, rank: int, world: int) -> range:
    """Rank r evaluates images r, r+W, r+2W, ...: every image exactly once overall."""
    return range(rank, n, world)


def holdout_indices(n_train: int, holdout: float) -> np.ndarray:
    """The training images held out of training for hyperparameter selection (recipe key data.holdout:
    a fraction below 1, else a count): the same images for every run and seed (a fixed generator), so
    every trial of a sweep is selected on the same held-out images and trains on the same others."""
    count = round(holdout * n_train) if holdout < 1 else int(holdout)
    return np.sort(np.random.default_rng(1).permutation(n_train)[:count])


def train_eval_subset(n_train: int, size: int) -> np.ndarray:
    """The fixed train-eval subset: the same images for every run and seed (seed 0)."""
    return np.sort(np.random.default_rng(0).permutation(n_train)[: min(size, n_train)])
