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
from typing import Iterable

from PIL import Image

from bench.errors import UserError

# What Pillow raises for files that are not (complete) images.
DECODE_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


class UnreadableImage(Exception):
    """Raised by `read_header` and `decode`; carries the path."""


def read_header(path: str) -> tuple[bytes, int, int]:
    """The file's bytes and its stored (width, height), from the header only (cheap)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except DECODE_ERRORS as e:
        raise UnreadableImage(path) from e
    return data, width, height


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
            raise UserError(f"{new[0]}: unreadable image (not an image, truncated or corrupt); "
                            "remove it, or set data.strict: false to skip such files with a warning")
        self.files.update(new)
        warnings.warn(f"skipped {len(new)} unreadable image(s) ({len(self.files)} so far): {', '.join(new)}",
                      stacklevel=2)

    def check_not_empty(self, batch_size: int, paths: list[str]) -> None:
        """A training micro-batch needs at least one image."""
        if batch_size == 0:
            raise UserError(f"every image of a micro-batch is unreadable ({', '.join(paths)}); "
                            "run `bench data check` on the dataset and remove them")
