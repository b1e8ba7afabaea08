"""Data behind one interface, whatever the backend.

`build()` turns a recipe's data section into a `Data` object that gives the
runner this rank's training micro-batches for any range of steps, and the
validation and train-eval batches (each image exactly once over all ranks).
Batches are (images float32 NCHW normalised, labels int64) on the CPU; the
runner moves them to its device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from bench.data import folder as folder_layout
from bench.data import sampling, synthetic
from bench.recipe import DataSpec


@dataclass
class Data:
    spec: DataSpec
    root: Path
    layout: folder_layout.Folder
    stream: sampling.StepStream
    train_eval_indices: list[int]
    rank: int
    world: int

    @property
    def num_classes(self) -> int:
        return len(self.layout.classes)

    @property
    def train_size(self) -> int:
        return len(self.layout.train)

    def train(self, start_step: int, end_step: int) -> Iterator:
        """This rank's micro-batches for steps [start_step, end_step), accum_steps per step."""
        from bench.data import torchvision as backend

        split = self.layout.train
        return backend.train_batches(
            split.files, split.labels, self.spec.image_size, self.spec.crop_scale_min,
            self.stream.iterate(start_step, end_step), self.spec.workers,
        )

    def _eval(self, split: folder_layout.Split, indices) -> Iterable:
        from bench.data import torchvision as backend

        mine = [indices[i] for i in sampling.eval_shard(len(indices), self.rank, self.world)]
        return backend.eval_batches(split.files, split.labels, self.spec.image_size, mine,
                                    self.spec.eval_batch, self.spec.workers)

    def val(self) -> Iterable:
        return self._eval(self.layout.val, range(len(self.layout.val)))

    def train_eval(self) -> Iterable:
        """Training images with validation transforms, the same subset every time."""
        return self._eval(self.layout.train, self.train_eval_indices)


def resolve_root(spec: DataSpec) -> Path:
    """The dataset folder: the given path, or the cached generated dataset."""
    if spec.dataset == "folder":
        return Path(spec.path)
    return synthetic.cached(spec.synth)


def build(spec: DataSpec, global_batch: int, micro_batch: int, rank: int, world: int, seed: int) -> Data:
    root = resolve_root(spec)
    layout = folder_layout.scan(root)
    stream = sampling.StepStream(len(layout.train), global_batch, micro_batch, rank, world, seed)
    size = spec.train_eval_size or len(layout.val)
    subset = sampling.train_eval_subset(len(layout.train), size).tolist()
    return Data(spec, root, layout, stream, subset, rank, world)
