"""Reading image files, and what happens to the ones that cannot be read.

An unreadable file (not an image, truncated, corrupt) is never a crash or a
hang in the middle of an epoch: the backends drop it from its batch and
report it here. `Unreadable` warns once per newly found file, naming it, and
keeps the set so the runner can count them; with `strict` it raises a
`UserError` naming the path instead.
"""

from __future__ import annotations

import io
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Iterable

from PIL import Image

from bench.data import folder
from bench.errors import BenchWarning, UserError

# What Pillow raises for files that are not (complete) images.
DECODE_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


class UnreadableImage(Exception):
    """Raised by `read_header` and `decode`; carries the path."""


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, or None when it is not found (Pillow decides then)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _SOF:
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def read_header(path: str) -> tuple[bytes, int, int]:
    """The file's bytes and its stored (width, height), from the header only (cheap: the JPEG
    frame header is parsed here, other formats by Pillow)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        size = _jpeg_size(data) if data[:3] == b"\xff\xd8\xff" else None
        if size is None or 0 in size:
            with Image.open(io.BytesIO(data)) as image:
                size = image.size
    except DECODE_ERRORS as e:
        raise UnreadableImage(path) from e
    return data, size[0], size[1]


def _unreadable(path: str) -> str | None:
    try:
        decode(path, draft=(64, 64))  # a reduced-scale JPEG decode still reads every byte
    except UnreadableImage:
        return path
    return None


def unreadable_files(files: Iterable[str], workers: int = 1) -> list[str]:
    """The files that do not decode (`bench data check`; a data.strict run before its first step), in order."""
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            return [p for p in pool.map(_unreadable, files, chunksize=64) if p]
    return [p for p in map(_unreadable, files) if p]


def decode(path: str, draft: tuple[int, int] | None = None) -> Image.Image:
    """The whole image as RGB. `draft` lets JPEG decoding stop at a reduced scale (checks only)."""
    try:
        with Image.open(path) as image:
            if draft:
                image.draft("RGB", draft)
            return image.convert("RGB")
    except DECODE_ERRORS as e:
        raise UnreadableImage(path) from e


class Unreadable:
    """The unreadable files found so far, and the policy for new ones."""

    def __init__(self, strict: bool = False):
        self.strict = strict
        self.files: set[str] = set()

    def report(self, paths: Iterable[str]) -> None:
        new = sorted(set(paths) - self.files)
        if not new:
            return
        if self.strict:
            raise UserError(
                f"{new[0]}: unreadable image (not an image, truncated or corrupt); "
                "remove it, or set data.strict: false to skip such files with a warning"
            )
        self.files.update(new)
        warnings.warn(
            f"skipped {len(new)} unreadable image(s) ({len(self.files)} so far): {', '.join(new)}", BenchWarning
        )

    def check_not_empty(self, batch_size: int, paths: list[str]) -> None:
        """A training micro-batch needs at least one image."""
        if batch_size == 0:
            raise UserError(
                f"every image of a micro-batch is unreadable ({', '.join(paths)}); "
                "run `bench data check` on the dataset and remove them"
            )


UPSCALE_WARN = 2  # data.image_size above this many times the dataset's own images: a warning


def native_size(spec) -> tuple[int, str] | None:
    """The longer side of a dataset's own images and what says so, where that is cheap to know: a generated
    dataset's recipe section (digits: the size it is exported at), else one training image's header. None
    where it is not (a folder that is not there, an unreadable image)."""
    if spec.dataset == "synthetic":
        s = spec.synth
        return max(s.width or s.size, s.height or s.size), "key 'data.synth'"
    if spec.dataset == "digits":
        return spec.digits.size, "key 'data.digits.size'"
    path = folder.first_image(spec.path, spec.dataset == "filelist")
    try:
        _, width, height = read_header(path) if path else (None, 0, 0)
    except (UnreadableImage, OSError):
        return None
    return (max(width, height), path) if path else None


def upscale_warning(spec) -> str | None:
    """One sentence when data.image_size is more than UPSCALE_WARN times the dataset's own images, else None."""
    found = native_size(spec)
    if found is None or spec.image_size <= UPSCALE_WARN * found[0]:
        return None
    size, source = found
    return (
        f"data.image_size {spec.image_size} is {spec.image_size / size:.0f}x the dataset's own {size} px images "
        f"({source}): the model sees upscaled pixels and no more detail, at {(spec.image_size / size) ** 2:.0f}x "
        f"the compute; train at data.image_size {size} with a small-image model such as resnet20_cifar"
    )
