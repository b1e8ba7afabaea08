"""The geometry of the ImageNet transforms, shared by every backend.

Both backends ask this module where to crop, so for the same sample they cut
the same window out of the same image and differ only in their decoders and
resize kernels:

- training, `data.augment: resized_crop` (ImageNet): random-resized crop,
  torchvision's algorithm (area fraction uniform in [crop_scale_min, 1], log
  aspect ratio uniform in [3/4, 4/3], ten tries, then a centre crop), drawn
  from the sample's own augmentation seed (sampling.py), then a horizontal flip
  with probability 1/2;
- training, `data.augment: pad_crop` (CIFAR, He et al. 2016 section 4.2): the
  image padded with `pad` black pixels a side, a window of the image's own size
  at a uniformly random whole-pixel offset, resized to size x size (a no-op for
  32 px CIFAR at image_size 32), then the flip;
- validation: resize the shorter side to round(size / 0.875), long side
  truncated as torchvision's Resize, then a centre crop of size x size placed
  as torchvision's CenterCrop; with pad_crop the whole image resized to
  size x size (CIFAR is evaluated on the full 32 px image).

Coordinates are pixels of the decoded image, as stored (EXIF orientation is
ignored, as torchvision's ImageFolder does).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
RATIO = (3 / 4, 4 / 3)
EVAL_CROP_FRACTION = 0.875


class Crop(NamedTuple):
    top: int
    left: int
    height: int
    width: int
    flip: bool


class EvalGeometry(NamedTuple):
    resize_width: int
    resize_height: int
    top: int
    left: int


def train_crop(seed: int, width: int, height: int, scale_min: float, random_flip: bool = True) -> Crop:
    """The random-resized crop (and flip) of one training sample: a pure function of its arguments."""
    rng = np.random.default_rng(seed % 2**64)
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(scale_min, 1.0)
        ratio = math.exp(rng.uniform(*log_ratio))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            top, left = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
            break
    else:  # no window fits: the largest centred one within the aspect bounds
        if width / height < RATIO[0]:
            w, h = width, round(width / RATIO[0])
        elif width / height > RATIO[1]:
            w, h = round(height * RATIO[1]), height
        else:
            w, h = width, height
        top, left = (height - h) // 2, (width - w) // 2
    flip = bool(random_flip and rng.random() < 0.5)
    return Crop(top, left, h, w, flip)


def pad_crop(seed: int, width: int, height: int, pad: int, random_flip: bool = True) -> Crop:
    """CIFAR's crop (and flip) of one training sample: a width x height window of the image padded by `pad`
    pixels a side; top and left lie in [-pad, pad] (negative: the window starts in the padding)."""
    rng = np.random.default_rng(seed % 2**64)
    top, left = (int(v) for v in rng.integers(-pad, pad + 1, size=2))
    return Crop(top, left, height, width, bool(random_flip and rng.random() < 0.5))


def train_window(seed: int, width: int, height: int, opts) -> Crop:
    """The training crop of one sample under the data options `opts` (output.Options): its `augment`."""
    if opts.augment == "pad_crop":
        return pad_crop(seed, width, height, opts.pad, opts.random_flip)
    return train_crop(seed, width, height, opts.crop_scale_min, opts.random_flip)


def eval_geometry(width: int, height: int, size: int, augment: str = "resized_crop") -> EvalGeometry:
    """Resize (shorter side to size/0.875) and centre-crop offsets, exactly as torchvision computes them; with
    pad_crop the whole image resized to size x size."""
    if augment == "pad_crop":
        return EvalGeometry(size, size, 0, 0)
    short = round(size / EVAL_CROP_FRACTION)
    if width <= height:
        rw, rh = short, int(short * height / width)
    else:
        rw, rh = int(short * width / height), short
    return EvalGeometry(rw, rh, int(round((rh - size) / 2.0)), int(round((rw - size) / 2.0)))
