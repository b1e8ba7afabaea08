"""`bench data ...`: dataset commands: the converters (generate, convert; each built from its record in
catalog.CONVERTERS) and check.

    bench data synth | digits | cifar | idx ... --out DIR
    bench data check DIR
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from pathlib import Path

from bench import catalog
from bench.data import folder
from bench.errors import count


def _summary(out: Path) -> str:
    layout = folder.scan(out)
    return f"wrote {len(layout.train)} train and {len(layout.val)} val images in {len(layout.classes)} classes to {out}"


def cmd_convert(record: catalog.Converter, args) -> int:
    """`bench data <converter>`: its function with the arguments its record declares, then what it wrote."""
    record.load()(**{a.keyword: getattr(args, a.keyword) for a in record.arguments})
    print(_summary(Path(args.out)))
    return 0


TYPES = {"str": str, "int": int, "count": count(1), "list": lambda text: text.split(",") if text else None}


def add_converter(data, record: catalog.Converter) -> None:
    """The subcommand of a converter record: its arguments, as the record declares them."""
    s = data.add_parser(record.name, help=record.help)
    for a in record.arguments:
        options = {"type": TYPES[a.type]} if a.type != "str" else {}
        if a.flag.startswith("-"):
            options |= {"default": a.default} | ({"required": True} if a.required else {})
        options |= {k: v for k, v in (("help", a.help), ("metavar", a.metavar)) if v is not None}
        if a.choices:
            options["choices"] = list(catalog.resolve(a.choices))
        s.add_argument(a.flag, **options)
    s.set_defaults(func=functools.partial(cmd_convert, record))


def cmd_check(args) -> int:
    from bench.data import images

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


def add_parsers(sub) -> None:
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    for record in catalog.CONVERTERS.values():
        add_converter(data, record)

    s = data.add_parser(
        "check", help="classes, images per split and unreadable files of a dataset (exit 1 when some are unreadable)"
    )
    s.add_argument("dir", metavar="DIR", help="the dataset folder (a recipe's data.path)")
    s.add_argument("--workers", type=count(0), default=0, help="processes decoding (default 0: all cores)")
    s.set_defaults(func=cmd_check)
