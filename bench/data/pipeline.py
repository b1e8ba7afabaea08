"""Data behind one interface, whatever the backend.

`build()` turns a recipe's data section into a `Data` object that gives the
runner this rank's training micro-batches for any range of steps, and the
validation and train-eval batches (each image exactly once over all ranks).

Loaders (`data.loader`, registered in loaders.py): "dali" (decoding on the GPU
when `device` is CUDA, else on the CPU), "torchvision" (the reference), "random"
(random tensors on the device, no I/O); "auto" = dali when nvidia.dali imports,
else torchvision. All give the same images in the same order with the same crops
(sampling.py, augment.py). A batch is (images (N, 3, S, S) normalised, labels int64 (N,)),
see output.py; it is on `data.device` for dali and random and on the CPU
(pinned when CUDA is there) for torchvision: the runner's `.to(device)` covers
both. Unreadable images are skipped with a warning and counted in
`data.unreadable.files` (or an error with `data.strict`).
"""

from __future__ import annotations

import copy
import functools
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import torch

from bench import catalog
from bench.data import folder as folder_layout
from bench.data import images, loaders, sampling
from bench.data.output import Options
from bench.errors import BenchWarning, UserError
from bench.recipe import DataSpec


def dali_available() -> bool:
    return catalog.LOADERS["dali"].available()


def resolve_loader(loader: str) -> str:
    """The registered loader a recipe's `data.loader` names (auto: the first available of catalog.AUTO_LOADERS;
    old aliases), or one sentence when the one named cannot run here."""
    loader = catalog.LOADER_ALIASES.get(loader, loader)
    if loader == "auto":
        chosen = next(name for name in catalog.AUTO_LOADERS if catalog.LOADERS[name].available())
        for name in catalog.AUTO_LOADERS[: catalog.AUTO_LOADERS.index(chosen)]:
            _warn_fallback(name, chosen)
        return chosen
    record = catalog.LOADERS[loader]
    if not record.available():
        others = " or ".join(n for n in catalog.AUTO_LOADERS if n != loader and catalog.LOADERS[n].available())
        raise UserError(
            f"key 'data.loader' is '{loader}' but {record.requires} does not import; "
            f"install {record.install}, or set data.loader to {others} or auto"
        )
    return loader


@functools.cache
def _warn_fallback(name: str, chosen: str) -> None:  # once a process: a run builds its data more than once
    record = catalog.LOADERS[name]
    warnings.warn(record.fallback(chosen, record.import_error()), BenchWarning, stacklevel=3)


@dataclass
class Data:
    spec: DataSpec
    root: Path
    layout: folder_layout.Folder
    stream: sampling.StepStream
    train_eval_indices: list[int]
    rank: int
    world: int
    loader: str = "torchvision"
    device: torch.device = torch.device("cpu")
    opts: Options | None = None
    unreadable: images.Unreadable = field(default_factory=images.Unreadable)
    cache: dict = field(default_factory=dict, repr=False)  # what is built once: evaluation batches, DALI's pipelines

    def __post_init__(self):
        if self.opts is None:
            s = self.spec
            self.opts = Options(s.image_size, s.crop_scale_min, s.random_flip, s.workers, augment=s.augment, pad=s.pad)
        self.backend: loaders.Loader = loaders.get(self.loader)

    @property
    def num_classes(self) -> int:
        return len(self.layout.classes)

    @property
    def train_size(self) -> int:
        return len(self.layout.train)

    @property
    def val_size(self) -> int:
        return len(self.layout.val)

    def train(self, start_step: int, end_step: int) -> Iterator:
        """This rank's micro-batches for steps [start_step, end_step), accum_steps per step."""
        return self.backend.train(self, start_step, end_step)

    def samples(self, start_step: int, end_step: int) -> Iterator[list[tuple[int, int]]]:
        """(image index, augmentation seed) of each of this rank's micro-batches for those steps."""
        stream = copy.copy(self.stream)  # its permutation cache is its own (DALI reads it on a thread)
        return stream.iterate(start_step, end_step)

    def _eval(self, name: str, split: folder_layout.Split, indices) -> Iterable:
        if name not in self.cache:
            mine = [indices[i] for i in sampling.eval_shard(len(indices), self.rank, self.world)]
            batch = self.spec.eval_batch
            self.cache[name] = self.backend.evaluation(
                self, split, [mine[j : j + batch] for j in range(0, len(mine), batch)]
            )
        return self.cache[name]

    def val(self, images: int | None = None) -> Iterable:
        """This rank's share of the validation set (every image once over all ranks); iterable repeatedly.
        `images`: a fixed subset of that many, spread evenly over the set (recipe eval.curve_images)."""
        if images is None or images >= self.val_size:
            return self._eval("val", self.layout.val, range(self.val_size))
        return self._eval(f"val{images}", self.layout.val, [i * self.val_size // images for i in range(images)])

    @property
    def holdout_size(self) -> int:
        return len(self.layout.holdout)

    def holdout(self) -> Iterable:
        """The held-out training images (data.holdout) with validation transforms, every one once."""
        return self._eval("holdout", self.layout.holdout, range(self.holdout_size))

    def train_eval(self) -> Iterable:
        """Training images with validation transforms, the same subset every time."""
        return self._eval("train_eval", self.layout.train, self.train_eval_indices)


def resolve_root(spec: DataSpec) -> Path:
    """The dataset folder: what its catalog record's root function makes of the recipe's data.<reads> (the given
    path, or the cached generated dataset)."""
    record = catalog.dataset(spec.dataset)
    return Path(record.load("root")(getattr(spec, record.reads)))


def scan(spec: DataSpec, loader: str) -> folder_layout.Folder:
    """The dataset's layout; a loader that reads no files (random) on a dataset with a virtual layout needs none."""
    record = catalog.dataset(spec.dataset)
    if not loaders.get(loader).READS_FILES and record.virtual:
        return record.load("virtual")(getattr(spec, record.reads))
    return folder_layout.read(resolve_root(spec), record.layout)


def default_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def build(
    spec: DataSpec,
    step_images: int,
    micro_batch: int,
    rank: int,
    world: int,
    seed: int,
    device: torch.device | str | None = None,
    dtype: str = "float32",
    channels_last: bool = False,
    layout: folder_layout.Folder | None = None,
) -> Data:
    """The data of one rank. `step_images`: the plan's batch (sampling.StepStream). `device`: where the model
    runs (default: the current CUDA device, else
    the CPU); DALI decodes on it when it is a GPU. `dtype` ("float32" or "bfloat16") and
    `channels_last` shape the image batches. `layout`: the dataset's layout when the caller has scanned it already
    (scan(spec, loader): the runner reads the classes before the plan), else scanned here."""
    loader = resolve_loader(spec.loader)
    device = torch.device(device) if device is not None else default_device()
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    layout = scan(spec, loader) if layout is None else layout
    if spec.holdout:
        held = sampling.holdout_indices(len(layout.train), spec.holdout)
        if not 0 < len(held) < len(layout.train):
            raise UserError(
                f"key 'data.holdout' is {spec.holdout:g}: that holds out {len(held)} of the "
                f"{len(layout.train)} training images; at least one must be held out and one kept"
            )
        layout = layout.hold_out(held.tolist())
    stream = sampling.StepStream(len(layout.train), step_images, micro_batch, rank, world, seed)
    size = spec.train_eval_size or len(layout.val)
    subset = sampling.train_eval_subset(len(layout.train), size).tolist()
    opts = Options(
        spec.image_size,
        spec.crop_scale_min,
        spec.random_flip,
        spec.workers,
        dtype,
        channels_last,
        spec.augment,
        spec.pad,
    )
    return Data(
        spec, layout.root, layout, stream, subset, rank, world, loader, device, opts, images.Unreadable(spec.strict)
    )
