"""Where the images are: the ImageNet folder layout, or file lists.

- folder: <root>/{train,val}/<class>/<image>. Classes are the sorted folder
  names of train/ (as torchvision's ImageFolder); val/ must hold the same
  classes. Files with other suffixes than .JPEG/.jpg/.png are ignored.
- filelist: <root>/{train,val}.txt, one image a line, "<path relative to
  root> <label>" (DALI's file_list format); labels are 0..C-1 and every label
  has training images.

Layout problems are `UserError`s naming the path. Files are not opened here:
unreadable ones are found (and skipped) when read, or by `bench data check`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from bench.errors import UserError

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


@dataclass(frozen=True)
class Split:
    files: Sequence[str]
    labels: Sequence[int]

    def __len__(self) -> int:
        return len(self.files)


@dataclass(frozen=True)
class Folder:
    root: Path
    classes: tuple[str, ...]
    train: Split
    val: Split
    holdout: Split = Split((), ())  # training images held out of training (data.holdout), see hold_out()

    def train_digest(self) -> str:
        """A short hash of the training file list (paths relative to the root, and labels): a resumed run checks
        that it trains on the images its checkpoint was trained on, wherever the folder now is."""
        prefix = f"{self.root}/"
        text = "\n".join(
            f"{f[len(prefix) :] if f.startswith(prefix) else f}\t{label}"
            for f, label in zip(map(str, self.train.files), self.train.labels)
        )
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def hold_out(self, indices: Sequence[int]) -> "Folder":
        """This layout with the training images at `indices` moved from train to holdout."""
        held = set(indices)
        keep = [i for i in range(len(self.train)) if i not in held]
        pick = lambda split, idx: Split(tuple(split.files[i] for i in idx), tuple(split.labels[i] for i in idx))
        return replace(self, train=pick(self.train, keep), holdout=pick(self.train, sorted(held)))


def _classes(root: Path, split: str, classes: tuple[str, ...] | None) -> tuple[str, ...]:
    """The class folders of a split (sorted), checked against train/'s `classes`."""
    base = root / split
    if not base.is_dir():
        idx = any("idx" in p.name and "ubyte" in p.name for p in root.iterdir()) if root.is_dir() else False
        hint = f"; these are idx files: `bench data idx {root} --out DIR` converts them" if idx else ""
        raise UserError(f"{root}: missing split folder '{split}/' (expected {root}/{split}/<class>/<image>){hint}")
    found = tuple(sorted(d.name for d in base.iterdir() if d.is_dir()))
    if not found:
        flat = any(p.suffix.lower() in IMAGE_SUFFIXES for p in base.iterdir())
        hint = "; ImageNet's flat val/ must first be sorted into class folders (e.g. with valprep.sh)" if flat else ""
        raise UserError(f"{base}: no class folders (expected {base}/<class>/<image>){hint}")
    if classes is not None and found != classes:
        extra = sorted(set(found) ^ set(classes))[:3]
        raise UserError(
            f"{base}: classes differ from train/ (e.g. {', '.join(extra)}); both splits need the same class folders"
        )
    return found


_EMPTY = "{}: empty class folder (no .JPEG/.jpg/.png files)"


def _scan_split(root: Path, split: str, classes: tuple[str, ...] | None) -> tuple[tuple[str, ...], Split]:
    base = root / split
    found = _classes(root, split, classes)
    files, labels = [], []
    for label, name in enumerate(found):
        images = sorted(p for p in (base / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise UserError(_EMPTY.format(base / name))
        files += [str(p) for p in images]
        labels += [label] * len(images)
    return found, Split(tuple(files), tuple(labels))


def not_there(root: Path) -> UserError:
    """The error for a dataset folder that is not there; a relative data.path names the directory it was resolved
    against (the working directory), which a recipe read from elsewhere does not show."""
    where = "" if root.is_absolute() else f" (a relative path is resolved against the working directory, {Path.cwd()})"
    return UserError(f"{root}: dataset directory does not exist{where}")


def check(root: str | Path, filelist: bool = False) -> None:
    """The layout's shape, without listing every image (`bench validate`): the folder, its split folders and
    the same class folders in both, each holding an image (the first one found), or its two file lists."""
    root = Path(root)
    if not root.is_dir():
        raise not_there(root)
    if filelist:
        for split in ("train", "val"):
            if not (root / f"{split}.txt").is_file():
                raise UserError(
                    f"{root}: missing file list '{split}.txt' (lines '<image path relative to {root}> <label>')"
                )
        return
    classes = _classes(root, "train", None)
    _classes(root, "val", classes)
    for split in ("train", "val"):
        for name in classes:
            with os.scandir(root / split / name) as entries:
                if not any(Path(e.name).suffix.lower() in IMAGE_SUFFIXES for e in entries):
                    raise UserError(_EMPTY.format(root / split / name))


def first_image(root: str | Path, filelist: bool = False) -> str | None:
    """One training image without listing them all (the first of the first class folder, or train.txt's first
    line); None where the layout has none."""
    root = Path(root)
    try:
        if filelist:
            with open(root / "train.txt") as lines:
                name = next((line.strip().rpartition(" ")[0] for line in lines if line.strip()), "")
            return str(root / name.strip()) if name.strip() else None
        for folder in sorted(d for d in (root / "train").iterdir() if d.is_dir()):
            images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if images:
                return str(images[0])
    except OSError:
        return None
    return None


def class_count(root: str | Path, filelist: bool = False) -> int | None:
    """The number of classes where cheap to know: the class folders of train/ (None for file lists, whose
    labels are known only after reading every line, and for a layout that is not there)."""
    try:
        return None if filelist else len(_classes(Path(root), "train", None))
    except (OSError, UserError):
        return None


def given(path: str | Path) -> Path:
    """The folder of a dataset the recipe names by its data.path (the root function of folder and filelist)."""
    return Path(path)


def read(root: str | Path, layout: str) -> Folder:
    """The dataset at `root` in its layout ("folder" or "filelist": its catalog record's)."""
    return scan_lists(root) if layout == "filelist" else scan(root)


def scan(root: str | Path) -> Folder:
    root = Path(root)
    if not root.is_dir():
        raise not_there(root)
    classes, train = _scan_split(root, "train", None)
    _, val = _scan_split(root, "val", classes)
    return Folder(root, classes, train, val)


def _read_list(root: Path, split: str) -> tuple[list[str], list[int]]:
    path = root / f"{split}.txt"
    if not path.is_file():
        raise UserError(f"{root}: missing file list '{split}.txt' (lines '<image path relative to {root}> <label>')")
    files, labels = [], []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        name, _, label = line.strip().rpartition(" ")
        if not name or not label.isdigit():
            raise UserError(f"{path}:{number}: expected '<image path> <label>' with an integer label, got {line!r}")
        files.append(str(root / name.strip()))
        labels.append(int(label))
    if not files:
        raise UserError(f"{path}: no images listed")
    if not Path(files[0]).is_file():
        raise UserError(f"{path}:1: {files[0]} does not exist (paths are relative to {root})")
    return files, labels


def scan_lists(root: str | Path) -> Folder:
    """The dataset described by <root>/train.txt and <root>/val.txt."""
    root = Path(root)
    if not root.is_dir():
        raise not_there(root)
    train_files, train_labels = _read_list(root, "train")
    val_files, val_labels = _read_list(root, "val")
    n = max(train_labels) + 1
    missing = sorted(set(range(n)) - set(train_labels))
    if missing:
        raise UserError(f"{root / 'train.txt'}: label {missing[0]} has no training images (labels must be 0..{n - 1})")
    if max(val_labels) >= n:
        raise UserError(f"{root / 'val.txt'}: label {max(val_labels)} does not occur in train.txt (labels 0..{n - 1})")
    classes = tuple(str(c) for c in range(n))
    return Folder(
        root, classes, Split(tuple(train_files), tuple(train_labels)), Split(tuple(val_files), tuple(val_labels))
    )


class _Counted(Sequence):
    """n items, item i computed from i: stands for files or labels that need not exist."""

    def __init__(self, n: int, item):
        self.n, self.item = n, item

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.item(j) for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.item(i % self.n)


def virtual(classes: Sequence[str], train_per_class: int, val_per_class: int) -> Folder:
    """A layout of the given shape with no files behind it (for the synthetic loader)."""

    def split(name: str, per_class: int) -> Split:
        n = per_class * len(classes)
        return Split(_Counted(n, lambda i: f"<{name} image {i}>"), _Counted(n, lambda i: i // per_class))

    return Folder(Path("<no files>"), tuple(classes), split("train", train_per_class), split("val", val_per_class))
