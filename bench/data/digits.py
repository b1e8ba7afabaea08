"""The digits dataset: scikit-learn's bundled handwritten digits in the folder layout.

Real data, small: 1,797 8x8 grey images of the digits 0-9 (the UCI "optical
recognition of handwritten digits" test set, shipped inside scikit-learn, no
download). Exported upscaled (bicubic) to size x size PNGs in
``<out>/{train,val}/<digit>/<digit>_<index>.png``. The split is fixed: within
each class, in scikit-learn's order, every fifth image (positions 4, 9, 14,
...) is validation: 1,442 train and 355 val images.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from PIL import Image

from bench import files
from bench.data import synthetic
from bench.errors import UserError
from bench.recipe import DigitsData

VERSION = 1  # bump when the export changes, so caches are regenerated
VAL_EVERY = 5


def load() -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 8, 8) in 0..255, labels (N,))."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UserError("the digits dataset needs scikit-learn (pip install scikit-learn)") from None
    digits = load_digits()
    return np.round(digits.images * (255 / 16)).astype(np.uint8), digits.target.astype(int)


def split_of(position_in_class: int) -> str:
    return "val" if position_in_class % VAL_EVERY == VAL_EVERY - 1 else "train"


def write_dataset(out, spec: DigitsData):
    """Write the dataset to `out` atomically."""
    pixels, labels = load()

    def fill(tmp):
        seen: dict[int, int] = {}
        for index, (image, label) in enumerate(zip(pixels, labels)):
            position = seen[label] = seen.get(label, -1) + 1
            folder = tmp / split_of(position) / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            big = Image.fromarray(image, mode="L").resize((spec.size, spec.size), Image.BICUBIC)
            big.save(folder / f"{label}_{index:04d}.png")

    return files.write_atomically(out, fill)


def write(out, size: int = 32):
    """`bench data digits`: write the dataset with images of side `size` to the new folder `out`."""
    if size < 8:
        raise UserError(f"bench data digits: --size must be at least 8 (got {size})")
    if Path(out).exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    return write_dataset(Path(out), DigitsData(size=size))


def cache_key(spec: DigitsData) -> str:
    text = ",".join(f"{k}={v}" for k, v in sorted(spec.model_dump().items()))
    return f"digits-v{VERSION}-" + hashlib.sha1(text.encode()).hexdigest()[:12]


def cached(spec: DigitsData):
    return synthetic.cached_dataset(cache_key(spec), lambda path: write_dataset(path, spec))
