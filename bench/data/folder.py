"""The ImageNet folder layout: <root>/{train,val}/<class>/<image>.

Classes are the sorted folder names of train/ (as torchvision's ImageFolder);
val/ must hold the same classes. Layout problems are `UserError`s naming the
path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.errors import UserError

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


@dataclass(frozen=True)
class Split:
    files: tuple[str, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.files)


@dataclass(frozen=True)
class Folder:
    root: Path
    classes: tuple[str, ...]
    train: Split
    val: Split


def _scan_split(root: Path, split: str, classes: tuple[str, ...] | None) -> tuple[tuple[str, ...], Split]:
    base = root / split
    if not base.is_dir():
        raise UserError(f"{root}: missing split folder '{split}/' (expected {root}/{split}/<class>/<image>)")
    found = tuple(sorted(d.name for d in base.iterdir() if d.is_dir()))
    if not found:
        raise UserError(f"{base}: no class folders (expected {base}/<class>/<image>)")
    if classes is not None and found != classes:
        extra = sorted(set(found) ^ set(classes))[:3]
        raise UserError(f"{base}: classes differ from train/ (e.g. {', '.join(extra)}); both splits need the same class folders")
    files, labels = [], []
    for label, name in enumerate(found):
        images = sorted(p for p in (base / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise UserError(f"{base / name}: empty class folder (no .JPEG/.jpg/.png files)")
        files += [str(p) for p in images]
        labels += [label] * len(images)
    return found, Split(tuple(files), tuple(labels))


def scan(root: str | Path) -> Folder:
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{root}: dataset directory does not exist")
    classes, train = _scan_split(root, "train", None)
    _, val = _scan_split(root, "val", classes)
    return Folder(root, classes, train, val)
