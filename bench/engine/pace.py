"""Where a run stands in its recipe's schedule, and how large its next step's batch is.

A run moves along the recipe's schedule in steps of a reference batch; `epochs` means that
schedule's length, epochs x train size / reference batch schedule steps:

- fixed batch (the default): the reference is the global batch and each step is one schedule
  step, so the run takes ceil(epochs x train size / global batch) steps.
- scale-invariant (optimizers that declare pace = "scale_invariant", AdaScale's): the reference
  is one gradient group, AdaScale's base batch, and each step advances the schedule by the optimizer's gain in [1, k] ("scale-invariant
  iterations", step += gain). The recipe's lr and schedule are those of the base batch; a run at
  any scale ends at the same point of that schedule, having seen more images than epochs x train
  size when the gain stays below k.
- adaptive batch (recipe `adaptive_batch`): the batch is a whole number of min_batch chunks,
  steered by the similarity of the two halves' gradients (SimiGrad) or declared by images seen
  (`by_images`, a batch schedule); the reference is the first
  batch B0 = global_batch and each step advances by batch / B0, so images seen drive the epochs;
  lr x sqrt(batch / B0).

The data stream is read in chunks of the plan's global batch (for adaptive batches the plan is
made for min_batch), so a step of m chunks takes the next m x accum_steps micro-batches of each
rank; the stream position is images seen / chunk.
"""

from __future__ import annotations

import math

from bench.engine.plan import BatchPlan
from bench.recipe import Recipe
from bench.schedule import lr_at


class Pace:
    def __init__(self, recipe: Recipe, plan: BatchPlan, train_size: int, scale_invariant: bool):
        self.recipe, self.plan, self.train_size = recipe, plan, train_size
        self.adaptive = recipe.adaptive_batch
        self.scale_invariant = scale_invariant  # the optimizer's pace: AdaScale's gain per step
        self.chunk = plan.batch
        if self.adaptive:
            self.reference = recipe.global_batch
        elif scale_invariant:
            self.reference = plan.batch // plan.gsnr_groups
        else:
            self.reference = plan.batch
        self.images_total = recipe.epochs * train_size  # of the schedule, in reference-batch images
        self.schedule_steps = math.ceil(self.images_total / self.reference - 1e-9)  # a whole step is not one more
        self.steps_per_epoch = train_size / self.reference

    @property
    def fixed(self) -> bool:
        """Whether the number of steps is known in advance."""
        return not (self.adaptive or self.scale_invariant)

    @property
    def total_steps(self) -> int | None:
        return self.schedule_steps if self.fixed else None

    def start(self, progress) -> None:
        if not progress.chunks:
            progress.chunks = self.recipe.global_batch // self.chunk

    def last_chunk(self) -> int:
        """An end for the data stream no run can pass (it is read lazily)."""
        if self.adaptive:
            return math.ceil(self.images_total / self.chunk) + self.adaptive.max_batch // self.chunk
        return self.schedule_steps  # each step takes one chunk and advances the schedule by >= 1

    def batch(self, progress) -> int:
        return progress.chunks * self.chunk

    def lr(self, progress) -> float:
        """The learning rate of the next step, as bench.schedule.lr_at decides it from this pace's inputs: the
        schedule position and SimiGrad's batch rule (lr x sqrt(batch / B0)); AdaScale's optimizer multiplies it
        by its gain in its step."""
        return lr_at(
            math.floor(progress.position),
            self.recipe.optimizer.lr,
            self.schedule_steps,
            self.steps_per_epoch,
            self.recipe.schedule,
            factor=math.sqrt(self.batch(progress) / self.reference) if self.adaptive else 1.0,
        )

    def done(self, progress) -> bool:
        return progress.position * self.reference >= self.images_total

    def epoch(self, progress) -> float:
        """Progress through the recipe's schedule in epochs (scale-invariant ones for AdaScale)."""
        return progress.position * self.reference / self.train_size

    def crossed(self, before: float, after: float, every_epochs: float) -> bool:
        """Whether the schedule passed a multiple of `every_epochs` between two positions."""
        interval = every_epochs * self.train_size
        return math.floor(after * self.reference / interval) > math.floor(before * self.reference / interval)

    def advance(self, progress, gain: float = 1.0, similarity: float | None = None) -> None:
        """Account for the step just taken (its batch: progress.chunks chunks) and pick the next batch."""
        progress.images += self.batch(progress)
        progress.step += 1
        if self.adaptive:
            progress.position = progress.images / self.reference
            self._steer(progress, similarity)
        elif self.scale_invariant:
            progress.position += gain
        else:
            progress.position = progress.step

    def _steer(self, progress, similarity: float | None) -> None:
        """SimiGrad's controller on m, the batch in chunks: grow it while the halves disagree (similarity
        below the target), shrink it while they agree, within bounds. rule "proportional" (bench's):
        m -> max(m + 1, round(m (1 + adjust))) up, min(m - 1, round(m / (1 + adjust))) down; rule
        "authors" (their DeepSpeed fork's running code, adjust = 0.1 there): m -> max(m + 1, floor(m (1 + adjust)))
        up, max(1, min(m - 1, floor(m (1 - adjust)))) down: about adjust down, at least one chunk. (An older
        variant in their test_record.md, max(1, m - 1, floor(0.9 m)), took one chunk down; bench does not offer it.)"""
        a = self.adaptive
        if a.by_images is not None:  # a declared schedule: the batch of the last threshold passed
            batch = self.recipe.global_batch
            for images, b in sorted(a.by_images.items()):
                if progress.images >= images:
                    batch = b
            progress.chunks = batch // self.chunk
            return
        if similarity is not None:
            progress.similarity_sum += similarity
            progress.similarity_count += 1
        if progress.similarity_count < a.every_steps:
            return
        mean = progress.similarity_sum / progress.similarity_count
        progress.similarity_sum, progress.similarity_count = 0.0, 0
        m = progress.chunks
        if a.rule == "authors":  # SimiGrad's DeepSpeed fork: by adjust both ways, floored, at least one chunk
            if mean < a.target_similarity:
                m = max(m + 1, math.floor(m * (1 + a.adjust)))
            elif mean > a.target_similarity:
                m = max(1, min(m - 1, math.floor(m * (1 - a.adjust))))
        elif mean < a.target_similarity:  # proportional: x (1 + adjust) both ways, rounded half up
            m = max(m + 1, math.floor(m * (1 + a.adjust) + 0.5))
        elif mean > a.target_similarity:
            m = min(m - 1, math.floor(m / (1 + a.adjust) + 0.5))
        progress.chunks = min(max(m, a.min_batch // self.chunk), a.max_batch // self.chunk)
