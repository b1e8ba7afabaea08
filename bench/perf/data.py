"""Input pipeline throughput: DALI vs torchvision images/s on one dataset folder.

    bench perf data --root DIR [--size 224] [--batch 64] [--threads N] [--rounds 5] [--batches 10]

Both backends run the suite's own training (or validation) path on the same
images with the same crops, output size and normalisation (they share
augment.py), with the same number of CPU threads (DALI) and DataLoader
workers (torchvision). Rounds alternate between the backends; each round is a
fresh iterator over the next `--batches` micro-batches of the step stream,
timed after `--threads` warm-up batches (so worker start-up and batches made
while waiting for the first are not counted). The page cache is warmed first,
so both read from memory, and each backend has one untimed round first (DALI
keeps its pipeline between rounds as it does between training calls).
Reported: images/s per round, the medians, and the ratio of each DALI variant
to torchvision; also the CPU time per image over a whole round (process,
threads and DataLoader workers, their start-up included), which other load
on the machine disturbs far less than wall-clock rates. When a GPU is there,
DALI with decoding on the GPU ("mixed") is measured too; torchvision decodes
on the CPU in every case.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

import torch

from bench.data import folder
from bench.errors import ArgumentParser, UserError, count, doc_summary


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="bench perf data", description=doc_summary(__doc__))
    p.add_argument("--root", required=True, help="dataset folder (train/ and val/, or train.txt and val.txt)")
    p.add_argument(
        "--split", choices=("train", "val"), default="train", help="which path to time (default: %(default)s)"
    )
    p.add_argument("--size", type=count(1), default=224, help="output image side (default: %(default)s)")
    p.add_argument("--batch", type=count(1), default=64, help="images per batch (default: %(default)s)")
    p.add_argument(
        "--threads",
        type=count(1),
        default=os.cpu_count() or 1,
        help="DALI CPU threads = torchvision workers (default: all cores, %(default)s)",
    )
    p.add_argument("--rounds", type=count(1), default=5, help="timed rounds per backend (default: %(default)s)")
    p.add_argument("--batches", type=count(1), default=10, help="timed batches per round (default: %(default)s)")
    p.add_argument("--crop-scale-min", type=float, default=0.08, help="random-resized-crop area lower bound")
    p.add_argument(
        "--augment",
        choices=("resized_crop", "pad_crop"),
        default="resized_crop",
        help="the training crop timed (recipe key data.augment; default: %(default)s)",
    )
    return p


def _contenders() -> dict[str, tuple[str, str]]:
    from bench.data import dali_available

    found = {"torchvision": ("torchvision", "cpu")}
    if dali_available():
        found["dali-cpu"] = ("dali", "cpu")
        if torch.cuda.is_available():
            found["dali-mixed"] = ("dali", "cuda")
    return found


def _warm_page_cache(files) -> None:
    for path in files:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def _data(args, root: Path, dataset: str, loader: str, device: str):
    from bench.data import build
    from bench.recipe import DataSpec

    spec = DataSpec(
        dataset=dataset,
        path=root,
        image_size=args.size,
        crop_scale_min=args.crop_scale_min,
        augment=args.augment,
        loader=loader,
        workers=args.threads,
        eval_batch=args.batch,
    )
    return build(spec, args.batch, args.batch, 0, 1, seed=0, device=device)


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished children (DataLoader workers)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _round(args, data, first_step: int) -> tuple[float, float]:
    """(images/s after the warm-up batches, CPU milliseconds per image over the whole round)."""
    warmup = max(1, args.threads)
    cpu = _cpu_seconds()
    if args.split == "train":
        batches = data.train(first_step, first_step + warmup + args.batches)
    else:
        batches = iter(data.val())
    images, timed, start = 0, 0, None
    for i, (x, _) in enumerate(batches):
        if i == warmup:
            start = time.perf_counter()
        images += len(x)
        if i >= warmup:
            timed += len(x)
        if i + 1 == warmup + args.batches:
            break
    seconds = time.perf_counter() - start if start is not None else 0.0
    batches.close()  # torchvision's workers exit here, and their CPU time is counted
    del batches
    if timed == 0:
        raise UserError(
            f"{data.root}: too few {args.split} images for {warmup} warm-up and {args.batches} timed "
            f"batches of {args.batch}; lower --batch or --batches"
        )
    return timed / seconds, 1000 * (_cpu_seconds() - cpu) / images


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv[1:] if argv[:1] == ["--"] else argv)
    root = Path(args.root)
    dataset = "filelist" if (root / "train.txt").is_file() and not (root / "train").is_dir() else "folder"
    layout = folder.scan_lists(root) if dataset == "filelist" else folder.scan(root)
    split = getattr(layout, args.split)
    _warm_page_cache(split.files)
    contenders = _contenders()
    crop = f"{args.augment}, " if args.split == "train" else ""
    print(
        f"bench perf data: {root} ({args.split}, {len(split)} images), {crop}{args.size}px, batch {args.batch}, "
        f"{args.threads} DALI threads / DataLoader workers, {args.rounds} rounds of {args.batches} timed batches"
    )
    if "dali-cpu" not in contenders:
        print("nvidia.dali does not import: torchvision only")

    data = {name: _data(args, root, dataset, *how) for name, how in contenders.items()}
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    steps_per_round = max(1, args.threads) + args.batches
    for name in contenders:  # an untimed round each: pipelines built, buffers grown, code paths warm
        _round(args, data[name], 0)
    for r in range(args.rounds):
        order = list(contenders) if r % 2 == 0 else list(reversed(contenders))  # alternate who goes first
        for name in order:
            rate, ms = _round(args, data[name], (r + 1) * steps_per_round)
            rates[name].append(rate)
            cpu[name].append(ms)
        print(
            f"round {r + 1}: "
            + ", ".join(f"{name} {rates[name][-1]:.0f} img/s ({cpu[name][-1]:.2f} cpu ms/img)" for name in contenders)
        )

    medians = {name: statistics.median(v) for name, v in rates.items()}
    cpu_medians = {name: statistics.median(v) for name, v in cpu.items()}
    print(
        "median: "
        + ", ".join(f"{name} {medians[name]:.0f} img/s ({cpu_medians[name]:.2f} cpu ms/img)" for name in contenders)
    )
    for name in contenders:
        if name != "torchvision":
            print(
                f"ratio {name} / torchvision: {medians[name] / medians['torchvision']:.2f}x img/s, "
                f"{cpu_medians['torchvision'] / cpu_medians[name]:.2f}x fewer cpu ms/img"
            )
    print(
        "(img/s = images of the timed batches / wall time from the end of the warm-up batches to the last one; "
        "cpu ms/img = CPU time of the process, its threads and its finished worker processes over the whole "
        "round / images of the round; same images, crops, size and normalisation for every backend; page cache warm)"
    )
    return 0
