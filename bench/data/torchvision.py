"""The torchvision backend: the reference input pipeline, correct everywhere.

Decode with Pillow (as torchvision's ImageFolder), then the transforms of
augment.py: training = random-resized crop and flip drawn from each sample's
own seed (so batches do not depend on the worker count), validation = resize
the shorter side to size/0.875 and centre crop; both normalised with the
ImageNet mean and std. A DataLoader with `workers` processes and pinned memory
(when CUDA is there) runs it; evaluation loaders keep their workers between
evaluations. Unreadable files are dropped from their batch and reported (see
images.py).
"""

from __future__ import annotations

from functools import partial
from typing import Iterable, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as F

from bench.data import augment, images
from bench.data.output import Options


def train_image(image, crop: augment.Crop, size: int) -> torch.Tensor:
    """Crop (outside the image: black, as PIL crops) resized to size x size, + flip, as uint8 CHW."""
    image = F.resized_crop(image, crop.top, crop.left, crop.height, crop.width, [size, size], antialias=True)
    if crop.flip:
        image = F.horizontal_flip(image)
    return F.pil_to_tensor(image)


def eval_image(image, size: int, how: str = "resized_crop") -> torch.Tensor:
    """Resize the shorter side to size/0.875, centre crop (pad_crop: resize the whole image), as uint8 CHW."""
    g = augment.eval_geometry(image.width, image.height, size, how)
    image = F.resize(image, [g.resize_height, g.resize_width], antialias=True)
    return F.pil_to_tensor(F.crop(image, g.top, g.left, size, size))


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 (..., 3, H, W) -> float32 normalised with the ImageNet mean and std."""
    return F.normalize(F.to_dtype(images, torch.float32, scale=True), augment.MEAN, augment.STD)


class _Images(Dataset):
    """Items are (index, seed) pairs; seed None means the evaluation transform."""

    def __init__(self, files: Sequence[str], labels: Sequence[int], opts: Options):
        self.files, self.labels, self.opts = files, labels, opts

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, item: tuple[int, int | None]):
        index, seed = item
        path = self.files[index]
        try:
            image = images.decode(path)
        except images.UnreadableImage:
            return None, self.labels[index], path
        if seed is None:
            pixels = eval_image(image, self.opts.size, self.opts.augment)
        else:
            crop = augment.train_window(seed, image.width, image.height, self.opts)
            pixels = train_image(image, crop, self.opts.size)
        return normalise(pixels), self.labels[index], path


def _collate(opts: Options, items):
    """Stack the readable samples; return the paths of the others beside them."""
    good = [(x, y) for x, y, _ in items if x is not None]
    bad = [path for x, _, path in items if x is None]
    size = opts.size
    stacked = torch.stack([x for x, _ in good]) if good else torch.empty(0, 3, size, size)
    return opts.finish(stacked), torch.tensor([y for _, y in good], dtype=torch.int64), bad


def _loader(files, labels, opts: Options, batches, persistent: bool) -> DataLoader:
    return DataLoader(
        _Images(files, labels, opts),
        batch_sampler=batches,
        num_workers=opts.workers,
        collate_fn=partial(_collate, opts),
        pin_memory=torch.cuda.is_available(),
        persistent_workers=persistent and opts.workers > 0,
    )


def _report(loader: Iterable, unreadable: images.Unreadable, train: bool) -> Iterator:
    for batch, labels, bad in loader:
        unreadable.report(bad)
        if train:
            unreadable.check_not_empty(len(labels), bad)
        elif not len(labels):
            continue
        yield batch, labels


READS_FILES = True


def train(data, start_step: int, end_step: int) -> Iterator:
    """The loader protocol (bench/data/loaders.py)."""
    split = data.layout.train
    return train_batches(split.files, split.labels, data.opts, data.samples(start_step, end_step), data.unreadable)


def evaluation(data, split, index_batches: list[list[int]]) -> "EvalBatches":
    return EvalBatches(split.files, split.labels, data.opts, index_batches, data.unreadable)


def train_batches(
    files, labels, opts: Options, samples: Iterable[list[tuple[int, int]]], unreadable: images.Unreadable
) -> Iterator:
    """One (images, labels) per list of (index, augmentation seed) in `samples`."""
    return _report(_loader(files, labels, opts, samples, persistent=False), unreadable, train=True)


class EvalBatches:
    """The evaluation batches of fixed index lists; iterable any number of times, workers kept."""

    def __init__(self, files, labels, opts: Options, index_batches: list[list[int]], unreadable: images.Unreadable):
        batches = [[(i, None) for i in b] for b in index_batches]
        self.loader = _loader(files, labels, opts, batches, persistent=True)
        self.unreadable = unreadable

    def __iter__(self) -> Iterator:
        return _report(self.loader, self.unreadable, train=False)
