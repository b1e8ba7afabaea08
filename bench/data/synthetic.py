"""The embedded default dataset: deterministic, learnable, ImageNet-layout JPEGs.

Each class is a combination of three cues that survive the usual ImageNet
augmentations (random-resized crop, horizontal flip): the hue of an object, the
spatial frequency of the grating drawn on it, and its shape. Every cue is
jittered per image so that neighbouring classes overlap: a small ResNet learns
the classes well above chance but not perfectly, and with few images per class
it overfits, so the train/validation gap the suite measures is visible.

Files: ``<out>/{train,val}/<wnid>/<wnid>_<i>.JPEG`` with ImageNet-style wnids
``n%08d``, size x size pixels, or width x height (an ImageNet-shaped folder:
1000 classes of 500x375 JPEGs at quality 90). The bytes depend only on the
arguments (each image has its own seeded generator), so the same seed gives
the same files, however many processes write them.
"""

from __future__ import annotations

import hashlib
import io
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from bench import files
from bench.data import folder
from bench.errors import UserError
from bench.recipe import SynthData as SynthSpec

SHAPES = ("disc", "square", "ring", "diamond")
GENERATOR_VERSION = 1  # bump when render() changes, so caches are regenerated


def cache_key(spec: SynthSpec) -> str:
    """A short stable name for the cache directory of this dataset."""
    text = ",".join(f"{k}={v}" for k, v in sorted(spec.model_dump().items()))
    return f"synth-v{GENERATOR_VERSION}-" + hashlib.sha1(text.encode()).hexdigest()[:12]


def wnid(c: int) -> str:
    return f"n{c:08d}"


def _class_cues(spec: SynthSpec, c: int) -> tuple[float, float, str]:
    """Hue in [0, 1), grating frequency in cycles per object, shape name."""
    rng = np.random.default_rng([spec.seed, 7919, c])
    hue = (c * 0.61803398875 + rng.uniform(0, 0.1)) % 1.0  # golden-ratio spread
    freq = 2.0 + 6.0 * ((c * 0.3819660113 + rng.uniform(0, 0.1)) % 1.0)
    return hue, freq, SHAPES[c % len(SHAPES)]


def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    i = int(h * 6) % 6
    f = h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    return np.array([(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i])


def _shape_mask(shape: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Soft-edged mask of a unit shape in object coordinates (u, v)."""
    if shape == "disc":
        d = np.hypot(u, v)
    elif shape == "square":
        d = np.maximum(abs(u), abs(v))
    elif shape == "ring":
        d = abs(np.hypot(u, v) - 0.7) / 0.3
    else:  # diamond
        d = abs(u) + abs(v)
    return np.clip((1.0 - d) * 8.0, 0.0, 1.0)


def render(spec: SynthSpec, c: int, split: str, i: int) -> bytes:
    """One JPEG of class c; a pure function of its arguments."""
    rng = np.random.default_rng([spec.seed, c, 0 if split == "train" else 1, i])
    width, height = spec.width or spec.size, spec.height or spec.size
    n = min(width, height)  # coordinates in units of the shorter side: nothing is stretched
    w, h = width / n, height / n
    y, x = np.mgrid[0:height, 0:width].astype(np.float64) / n

    # Cluttered background: a dim random colour plus a few distractor blobs.
    img = np.empty((height, width, 3))
    img[:] = _hsv_to_rgb(rng.uniform(), rng.uniform(0.1, 0.5), rng.uniform(0.2, 0.6))
    for _ in range(3):
        cx, cy, r = w * rng.uniform(0, 1), h * rng.uniform(0, 1), rng.uniform(0.05, 0.2)
        blob = np.clip((r - np.hypot(x - cx, y - cy)) * 40, 0, 1)[..., None]
        img = img * (1 - blob) + blob * _hsv_to_rgb(rng.uniform(), 0.7, rng.uniform(0.4, 1.0))

    # The object: the class's shape, filled with a grating of the class's frequency
    # in the class's hue, each cue jittered so neighbouring classes overlap.
    hue, freq, shape = _class_cues(spec, c)
    hue = (hue + rng.normal(0, 0.06)) % 1.0
    freq *= np.exp(rng.normal(0, 0.2))
    if rng.uniform() < 0.2:  # sometimes the shape is borrowed from another class
        shape = SHAPES[rng.integers(len(SHAPES))]
    cx, cy = rng.uniform(0.3, 0.7, size=2) * (w, h)
    scale = rng.uniform(0.22, 0.4)
    angle = rng.uniform(0, np.pi)
    u = ((x - cx) * np.cos(angle) + (y - cy) * np.sin(angle)) / scale
    v = (-(x - cx) * np.sin(angle) + (y - cy) * np.cos(angle)) / scale
    grating = 0.5 + 0.5 * np.sin(np.pi * freq * u + rng.uniform(0, 2 * np.pi))
    light = _hsv_to_rgb(hue, rng.uniform(0.5, 0.9), rng.uniform(0.7, 1.0))
    dark = light * rng.uniform(0.1, 0.5)
    fill = dark + grating[..., None] * (light - dark)
    mask = _shape_mask(shape, u, v)[..., None]
    img = img * (1 - mask) + fill * mask

    img += rng.normal(0, 0.08, size=img.shape)
    pixels = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=spec.quality)
    return buf.getvalue()


def _write_class(tmp: Path, spec: SynthSpec, split: str, c: int, count: int) -> None:
    folder = tmp / split / wnid(c)
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"{wnid(c)}_{i}.JPEG").write_bytes(render(spec, c, split, i))


def write_dataset(out: Path, spec: SynthSpec, workers: int = 1) -> Path:
    """Write the dataset to `out` atomically, rendering in `workers` processes."""
    jobs = [
        (split, c, count)
        for split, count in (("train", spec.train_per_class), ("val", spec.val_per_class))
        for c in range(spec.classes)
    ]

    def fill(tmp: Path) -> None:
        if workers <= 1:
            for job in jobs:
                _write_class(tmp, spec, *job)
            return
        with ProcessPoolExecutor(workers) as pool:
            for done in [pool.submit(_write_class, tmp, spec, *job) for job in jobs]:
                done.result()

    return files.write_atomically(out, fill)


def write(
    out: str | Path,
    classes: int = 10,
    train_per_class: int = 100,
    val_per_class: int = 30,
    size: int = 72,
    width: int | None = None,
    height: int | None = None,
    quality: int = 90,
    seed: int = 0,
    workers: int = 0,
) -> Path:
    """`bench data synth`: write the dataset of these settings (SynthSpec's) to the new folder `out`, rendering
    in `workers` processes (0: all cores from 1000 images on)."""
    from pydantic import ValidationError

    from bench.recipe import describe_error

    try:
        spec = SynthSpec(
            classes=classes,
            train_per_class=train_per_class,
            val_per_class=val_per_class,
            size=size,
            width=width,
            height=height,
            quality=quality,
            seed=seed,
        )
    except ValidationError as e:
        raise UserError(f"bench data synth: {describe_error(e)}") from None
    out = Path(out)
    if out.exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    images = spec.classes * (spec.train_per_class + spec.val_per_class)
    return write_dataset(out, spec, workers=workers or (os.cpu_count() or 1 if images >= 1000 else 1))


def cache_root() -> Path:
    """Where generated datasets live: $BENCH_CACHE, else the XDG cache directory."""
    if "BENCH_CACHE" in os.environ:
        return Path(os.environ["BENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bench"


def cached_dataset(key: str, write: Callable[[Path], Path]) -> Path:
    """The cached dataset called `key`, written by `write(path)` on first use and reused after."""
    path = cache_root() / key
    if not path.exists():
        try:
            write(path)
        except FileExistsError:  # another process finished it first
            pass
    return path


def cached(spec: SynthSpec) -> Path:
    """The dataset for `spec`, generated on first use and reused after."""
    return cached_dataset(cache_key(spec), lambda path: write_dataset(path, spec))


def virtual(spec: SynthSpec) -> folder.Folder:
    """The layout of the dataset for `spec` without its files (for a loader that reads none)."""
    return folder.virtual([wnid(c) for c in range(spec.classes)], spec.train_per_class, spec.val_per_class)
