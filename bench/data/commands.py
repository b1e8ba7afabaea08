"""`bench data ...`: dataset commands (generate, convert, check)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from bench.data.idx import NAMES
from bench.errors import UserError, count


def _new_out(path: str) -> Path:
    out = Path(path)
    if out.exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    return out


def _summary(out: Path) -> str:
    from bench.data import folder

    layout = folder.scan(out)
    return f"wrote {len(layout.train)} train and {len(layout.val)} val images in {len(layout.classes)} classes to {out}"


def cmd_synth(args) -> int:
    from pydantic import ValidationError

    from bench.data import synthetic
    from bench.recipe import describe_error

    try:
        spec = synthetic.SynthSpec(classes=args.classes, train_per_class=args.train_per_class,
                                   val_per_class=args.val_per_class, size=args.size, width=args.width,
                                   height=args.height, quality=args.quality, seed=args.seed)
    except ValidationError as e:
        raise UserError(f"bench data synth: {describe_error(e)}") from None
    out = _new_out(args.out)
    images = spec.classes * (spec.train_per_class + spec.val_per_class)
    synthetic.write_dataset(out, spec, workers=args.workers or (os.cpu_count() or 1 if images >= 1000 else 1))
    print(_summary(out))
    return 0


def cmd_digits(args) -> int:
    from bench.data import digits
    from bench.recipe import DigitsData

    if args.size < 8:
        raise UserError(f"bench data digits: --size must be at least 8 (got {args.size})")
    out = _new_out(args.out)
    digits.write_dataset(out, DigitsData(size=args.size))
    print(_summary(out))
    return 0


def cmd_cifar(args) -> int:
    from bench.data import cifar

    counts = cifar.convert(args.archive, args.out)
    print(f"wrote {counts['train']} train and {counts['val']} val images to {args.out}")
    return 0


def cmd_idx(args) -> int:
    from bench.data import idx

    idx.convert(args.dir, args.out, per_class=args.per_class, val_per_class=args.val_per_class,
                         classes=args.classes.split(",") if args.classes else None, names=args.names, seed=args.seed)
    print(_summary(Path(args.out)))
    return 0



def cmd_check(args) -> int:
    from bench.data import folder, images

    root = Path(args.dir)
    lists = (root / "train.txt").is_file() and not (root / "train").is_dir()
    layout = folder.scan_lists(root) if lists else folder.scan(root)
    print(f"{root}: {'file lists' if lists else 'folder layout'}, {len(layout.classes)} classes")
    files = []
    for name in ("train", "val"):
        split = getattr(layout, name)
        per_class = Counter(split.labels)
        counts = [per_class.get(c, 0) for c in range(len(layout.classes))]
        print(f"  {name}: {len(split)} images, {min(counts)}-{max(counts)} per class")
        files += split.files
    if not lists:
        ignored = sum(1 for p in root.glob("*/*/*") if p.is_file() and p.suffix.lower() not in folder.IMAGE_SUFFIXES)
        if ignored:
            print(f"  ignored: {ignored} files without an image suffix ({', '.join(folder.IMAGE_SUFFIXES)})")
    bad = images.unreadable_files(files, args.workers or os.cpu_count() or 1)
    print(f"  unreadable: {len(bad)}")
    for path in bad:
        print(f"    {path}")
    return 1 if bad else 0


def add_parser(sub) -> None:
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    s = data.add_parser("synth", help="write the generated ImageNet-layout dataset")
    s.add_argument("--out", required=True)
    s.add_argument("--classes", type=int, default=10)
    s.add_argument("--train-per-class", type=int, default=100)
    s.add_argument("--val-per-class", type=int, default=30)
    s.add_argument("--size", type=int, default=72, help="square images of this side (default: %(default)s)")
    s.add_argument("--width", type=int, help="image width instead of --size (ImageNet-like: 500)")
    s.add_argument("--height", type=int, help="image height instead of --size (ImageNet-like: 375)")
    s.add_argument("--quality", type=int, default=90, help="JPEG quality (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--workers", type=int, default=0, help="processes (default: all cores from 1000 images on)")
    s.set_defaults(func=cmd_synth)

    s = data.add_parser("digits", help="export scikit-learn's handwritten digits (1,797 images, 10 classes)")
    s.add_argument("--out", required=True)
    s.add_argument("--size", type=int, default=32, help="upscaled image side (default: %(default)s)")
    s.set_defaults(func=cmd_digits)

    s = data.add_parser("cifar", help="convert cifar-10-python.tar.gz or cifar-100-python.tar.gz to the layout")
    s.add_argument("archive", metavar="ARCHIVE")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_cifar)

    s = data.add_parser("idx", help="convert the MNIST family's idx files (MNIST, Fashion-MNIST, KMNIST, EMNIST) "
                                     "to the layout, the test set as val/")
    s.add_argument("dir", metavar="DIR", help="the folder holding train-images-idx3-ubyte[.gz] and the other three "
                                              "(Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist)")
    s.add_argument("--out", required=True)
    s.add_argument("--per-class", type=count(1), help="training images per class, drawn with --seed (default: all)")
    s.add_argument("--val-per-class", type=count(1), help="validation images per class (default: all)")
    s.add_argument("--classes", help="comma-separated class names or labels to keep (default: all)")
    s.add_argument("--names", choices=["auto", "labels", *sorted(NAMES)], default="auto",
                   help="class folder names: the dataset's, or the labels (default: guessed from DIR's path)")
    s.add_argument("--seed", type=int, default=0, help="seed of the subset draw (default: %(default)s)")
    s.set_defaults(func=cmd_idx)

    s = data.add_parser("check", help="classes, images per split and unreadable files of a dataset "
                                      "(exit 1 when some are unreadable)")
    s.add_argument("dir", metavar="DIR")
    s.add_argument("--workers", type=int, default=0, help="processes decoding (default: all cores)")
    s.set_defaults(func=cmd_check)
