"""The torchvision backend: the reference input pipeline, correct everywhere.

Training: decode (Pillow, as torchvision's ImageFolder), random-resized crop (area crop_scale_min..1, aspect 3/4..4/3),
horizontal flip, normalise. Validation (and train-eval): resize the shorter
side to size/0.875, centre crop. Each training sample's randomness comes from
its own seed (see sampling.py), so results do not depend on the worker count.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset
from PIL import Image
from torchvision.transforms import v2

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def train_transform(size: int, crop_scale_min: float) -> v2.Compose:
    return v2.Compose([
        v2.RandomResizedCrop(size, scale=(crop_scale_min, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])


def eval_transform(size: int) -> v2.Compose:
    return v2.Compose([
        v2.Resize(round(size / 0.875), antialias=True),
        v2.CenterCrop(size),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])


class _Images(Dataset):
    """Items are (index, seed) pairs; seed None means no randomness is used."""

    def __init__(self, files: Sequence[str], labels: Sequence[int], transform):
        self.files, self.labels, self.transform = files, labels, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, item: tuple[int, int | None]):
        index, seed = item
        with Image.open(self.files[index]) as f:
            image = f.convert("RGB")
        if seed is None:
            return self.transform(image), self.labels[index]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.transform(image), self.labels[index]


def _loader(dataset: _Images, batches, workers: int) -> DataLoader:
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=False,
    )


def train_batches(files, labels, size, crop_scale_min, stream_batches, workers) -> Iterator:
    return iter(_loader(_Images(files, labels, train_transform(size, crop_scale_min)), stream_batches, workers))


def eval_batches(files, labels, size, indices: Sequence[int], batch: int, workers: int) -> DataLoader:
    batches = [[(i, None) for i in indices[j : j + batch]] for j in range(0, len(indices), batch)]
    return _loader(_Images(files, labels, eval_transform(size)), batches, workers)
