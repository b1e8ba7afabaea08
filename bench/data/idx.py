"""The MNIST family's idx files to the folder layout (`bench data idx`).

Reads the four files MNIST, Fashion-MNIST, KMNIST and EMNIST are distributed as
(``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``, each optionally gzipped; EMNIST's ``emnist-<split>-`` prefixed
ones too) and writes ``<out>/{train,val}/<class>/<index>.png``: grey, lossless, the test set
as val/. Class folders are named so that their sorted order is the label order (the folder
layout's rule): the dataset's class names where it is known (prefixed with the label when the
names would not sort in label order), else the label itself.

idx format (LeCun's): a 4-byte magic number, 0x00 0x00, the element type (0x08 = unsigned
byte) and the number of dimensions, then each dimension as a big-endian int32, then the data.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
from PIL import Image

from bench import files
from bench.errors import UserError

# Class names in label order, by dataset (what --names accepts besides "labels").
NAMES = {
    "mnist": [str(d) for d in range(10)],
    "fashion-mnist": [
        "T-shirt-top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle-boot",
    ],
    "kmnist": ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"],
}
SPLITS = {"train": "train", "val": "t10k"}  # bench's split: the files' prefix
UBYTE = 0x08
NAME_CHOICES = ("auto", "labels", *sorted(NAMES))  # `bench data idx --names`


def find(root: Path, split: str, kind: str) -> Path:
    """The idx file of a split ("train" or "t10k") and kind ("images" or "labels"), gzipped or not."""
    rank = 3 if kind == "images" else 1
    pattern = re.compile(rf"(.*-)?{split}-{kind}[-.]idx{rank}-ubyte(\.gz)?")
    found = sorted(p for p in root.iterdir() if pattern.fullmatch(p.name))
    if not found:
        raise UserError(f"{root}: no {split}-{kind}-idx{rank}-ubyte[.gz] file (the MNIST family's idx files)")
    if len(found) > 1:
        raise UserError(
            f"{root}: several {split}-{kind} idx files ({', '.join(p.name for p in found)}); "
            "keep one dataset per folder"
        )
    return found[0]


def read(path: Path, rank: int) -> np.ndarray:
    """An idx file of unsigned bytes with `rank` dimensions, as a numpy array; anything else is a UserError."""
    try:
        data = path.read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise UserError(f"{path}: cannot be read ({e})") from None
    magic = data[:4]
    expected = bytes([0, 0, UBYTE, rank])
    if magic != expected:
        raise UserError(
            f"{path}: not an idx{rank} file of unsigned bytes (magic {magic.hex()}, expected {expected.hex()})"
        )
    header = 4 + 4 * rank
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(rank))
    size = int(np.prod(shape))
    if len(data) != header + size:
        raise UserError(
            f"{path}: {len(data) - header} bytes of data where its header {shape} says {size}; "
            "the file is cut off or damaged"
        )
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def class_names(names: str, labels: list[int]) -> dict[int, str]:
    """Folder name per label: the dataset's names, or the labels, sorting in label order."""
    if names == "labels":
        width = len(str(max(labels)))
        return {label: f"{label:0{width}d}" for label in labels}
    known = NAMES[names]
    if max(labels) >= len(known):
        raise UserError(
            f"--names {names}: label {max(labels)} has no name ({names} has {len(known)} classes); use --names labels"
        )
    folders = {label: known[label] for label in labels}
    if sorted(folders.values()) != [folders[label] for label in sorted(folders)]:
        width = len(str(max(labels)))
        folders = {label: f"{label:0{width}d}_{name}" for label, name in folders.items()}
    return folders


def guess_names(root: Path) -> str:
    """The dataset a folder of idx files holds, from its path (Debian's /usr/share/datasets/fashion-mnist, ...)."""
    text = str(root.resolve()).lower()
    for name in ("fashion-mnist", "kmnist"):
        if name in text or name.replace("-", "_") in text:
            return name
    return "mnist" if "mnist" in text and "emnist" not in text else "labels"


def convert(
    root: str | Path,
    out: str | Path,
    per_class: int | None = None,
    val_per_class: int | None = None,
    classes: list[str] | None = None,
    names: str = "auto",
    seed: int = 0,
) -> dict[str, int]:
    """Write the idx dataset in `root` to `out` in the folder layout; returns images per split.

    per_class / val_per_class: a balanced subset, that many images of each class drawn without
    replacement by a generator seeded with `seed` (the same files every time); classes: keep only
    these (folder names or labels)."""
    root, out = Path(root), Path(out)
    if not root.is_dir():
        raise UserError(f"{root}: not a directory (expected the folder holding the idx files)")
    if out.exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    splits = {}
    for split, prefix in SPLITS.items():
        image_file = find(root, prefix, "images")
        images, labels = read(image_file, 3), read(find(root, prefix, "labels"), 1)
        if len(images) != len(labels):
            raise UserError(f"{root}: {prefix} has {len(images)} images but {len(labels)} labels")
        if image_file.name.startswith("emnist-"):
            images = images.transpose(0, 2, 1)  # EMNIST stores each image transposed
        splits[split] = (images, labels)
    present = sorted(set(splits["train"][1].tolist()))
    folders = class_names(guess_names(root) if names == "auto" else names, present)
    if classes:
        by_name = {v: k for k, v in folders.items()} | {str(k): k for k in folders}
        unknown = [c for c in classes if c not in by_name]
        if unknown:
            raise UserError(f"--classes: no class '{unknown[0]}' (classes: {', '.join(folders.values())})")
        folders = {by_name[c]: folders[by_name[c]] for c in classes}
    rng = np.random.default_rng(seed)
    chosen = {}
    for split, limit, option in (("train", per_class, "--per-class"), ("val", val_per_class, "--val-per-class")):
        labels = splits[split][1]
        picked = []
        for label in sorted(folders):
            where = np.flatnonzero(labels == label)
            if limit is not None and limit > len(where):  # a subset that is not the size asked for is not made
                fewest = min(int((labels == k).sum()) for k in folders)
                raise UserError(
                    f"{option} {limit}: class '{folders[label]}' has {len(where)} {split} images in {root}; "
                    f"at most {fewest} a class"
                )
            if limit is not None and limit < len(where):
                where = np.sort(rng.choice(where, limit, replace=False))
            picked.append(where)
        chosen[split] = np.sort(np.concatenate(picked))

    def fill(tmp: Path) -> None:
        for split, (images, labels) in splits.items():
            for folder in folders.values():
                (tmp / split / folder).mkdir(parents=True)
            for i in chosen[split]:
                Image.fromarray(images[i]).save(tmp / split / folders[int(labels[i])] / f"{i:05d}.png")

    files.write_atomically(out, fill)
    return {split: len(index) for split, index in chosen.items()}
