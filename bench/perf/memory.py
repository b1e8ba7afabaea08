"""Peak memory of one optimizer step at a small and a huge global batch (accumulation), or, with `--fits RECIPE`,
the largest micro-batch of a recipe that fits this machine.

Each global batch runs in a fresh process (so its peak is its own): a small
model, small random images (the random loader, no I/O), one full step of
`global_batch` images through micro-batches of `--micro-batch`. Reported: the
process's peak resident memory (and peak CUDA memory on a GPU), and the ratio
huge / small. Accumulation should make the ratio about 1 (target: < 1.10).

`--fits RECIPE`: the recipe's model, image size, precision, channels_last, ghost BatchNorm and optimizer (its data
replaced by random tensors of its image size, `--classes` labels), one step of one micro-batch per fresh process,
at micro-batches doubling from the BatchNorm batch (or 1) up to the recipe's global batch per rank. A micro-batch
fits when its step ran (no out-of-memory error) within `--headroom` of the device's memory (a GPU's total; on a
CPU, the memory available when the search starts). The answer: the largest that fits, and whether the recipe's
own micro_batch does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from bench.errors import ArgumentParser, UserError, assignment, count, doc_summary


def _recipe(global_batch: int, micro_batch: int, size: int, model: str, optimizer: str):
    from bench.recipe import recipe_from_dict

    train_size = 200
    return recipe_from_dict(
        "bench perf memory",
        {
            "name": "perf-memory",
            "model": {"name": model},
            "data": {
                "dataset": "synthetic",
                "loader": "random",
                "image_size": size,
                "workers": 0,
                "synth": {"classes": 10, "train_per_class": train_size // 10, "val_per_class": 2, "size": 16},
            },
            "global_batch": global_batch,
            "micro_batch": micro_batch,
            "optimizer": {"name": optimizer, "lr": 0.1},
            "epochs": global_batch / train_size,
            "target_top1": 50,
        },
    )


def child(args) -> None:
    """One step at one global batch; prints a JSON line with the peaks."""
    import torch

    from bench.engine import distributed
    from bench.engine.train import Trainer

    trainer = Trainer(
        _recipe(args.global_batch, args.micro_batch, args.image_size, args.model, args.optimizer),
        distributed.Dist(0, 1, 0, distributed.init().device),
    )
    start = time.perf_counter()
    trainer.step(trainer.data.train(0, 1), lr=0.1)
    seconds = time.perf_counter() - start
    out = {
        "global_batch": args.global_batch,
        "accum_steps": trainer.plan.accum_steps,
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if torch.cuda.is_available():
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(out))


def fits_child(path: str) -> None:
    """One step of one micro-batch of the prepared recipe at `path`; a JSON line with its peak (or oom)."""
    import torch

    from bench.engine import distributed
    from bench.engine.train import Trainer
    from bench.recipe import load

    recipe = load(path)
    try:
        trainer = Trainer(recipe, distributed.Dist(0, 1, 0, distributed.init().device))
        trainer.step(trainer.data.train(0, 1), lr=0.0)
    except torch.cuda.OutOfMemoryError:
        print(json.dumps({"oom": True}))
        return
    cuda = torch.cuda.is_available()
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"oom": False, "peak_mib": peak / 2**20}))


def _available_mib() -> tuple[float, str]:
    """The memory a micro-batch may fill, and what it is: a GPU's total, else the CPU's available memory."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.mem_get_info()[1] / 2**20, f"{torch.cuda.get_device_name()} total"
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024, "CPU memory available now"
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**20, "CPU memory"


def _child(args: list[str], cache: str) -> subprocess.CompletedProcess | dict:
    """`python -m bench.perf.memory ARGS` in a fresh process (its peak is its own): the JSON of its last line, or
    the finished process where it failed."""
    cmd = [sys.executable, "-m", "bench.perf.memory", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "BENCH_CACHE": cache})
    return done if done.returncode else json.loads(done.stdout.strip().splitlines()[-1])


def _probe(recipe, micro_batch: int, classes: int, folder: str) -> dict:
    """The recipe at one micro-batch, its data random tensors: a fresh process runs one step of it."""
    import yaml

    raw = recipe.model_dump(mode="json")
    raw.update(global_batch=micro_batch, micro_batch=micro_batch, epochs=1.0, target_top1=50)
    raw["data"] = {
        "dataset": "synthetic",
        "loader": "random",
        "image_size": recipe.data.image_size,
        "workers": 0,
        "synth": {"classes": classes, "train_per_class": -(-micro_batch // classes), "val_per_class": 1, "size": 16},
    }
    path = os.path.join(folder, f"mb{micro_batch}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(raw, f)
    done = _child(["--fits-child", path], folder)
    if isinstance(done, dict):
        return done
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]  # -9: the kernel's out-of-memory killer
    return {"oom": done.returncode == -9 or "out of memory" in done.stderr.lower(), "error": last}


def fits(args) -> int:
    """Doubling micro-batches of the recipe until one does not fit; prints each and the answer."""
    from bench.recipe import load

    recipe = load(args.fits, args.set)
    limit, what = _available_mib()
    budget = args.headroom * limit
    per_rank = max(1, recipe.global_batch // max(1, args.ranks))
    micro_batch, rows = max(1, recipe.model.bn_batch or 1), []
    print(
        f"{recipe.name}: {recipe.model.name} at {recipe.data.image_size} px, {recipe.engine.precision}; "
        f"budget {budget:,.0f} MiB ({args.headroom:.0%} of {limit:,.0f} MiB, {what})"
    )
    print(f"{'micro-batch':>11} {'peak MiB':>9}  fits")
    with tempfile.TemporaryDirectory() as folder:
        while micro_batch <= per_rank:
            got = _probe(recipe, micro_batch, args.classes, folder)
            if "error" in got and not got["oom"]:
                raise RuntimeError(f"bench perf memory --fits: micro-batch {micro_batch}: {got['error']}")
            ok = not got["oom"] and got["peak_mib"] <= budget
            print(f"{micro_batch:>11} {got.get('peak_mib', float('nan')):>9,.0f}  {'yes' if ok else 'no'}")
            rows.append((micro_batch, ok))
            if not ok:
                break
            micro_batch *= 2
    fitting = [m for m, ok in rows if ok]
    if not fitting:
        print(f"no micro-batch fits: {rows[0][0]} already exceeds the budget")
        return 0
    own = recipe.micro_batch
    verdict = "(auto: the run picks its own)" if own == "auto" else "fits" if own <= fitting[-1] else "does not fit"
    last, ok = rows[-1]
    reach = "the recipe's global batch per rank: nothing larger to try" if ok else f"{last} does not"
    print(f"largest micro-batch that fits: {fitting[-1]} ({reach}); the recipe's micro_batch {own} {verdict}")
    return 0


def measure(global_batch: int, args) -> dict:
    sizes = {"--global-batch": global_batch, "--micro-batch": args.micro_batch, "--image-size": args.image_size}
    sizes.update({"--model": args.model, "--optimizer": args.optimizer})
    with tempfile.TemporaryDirectory() as cache:
        done = _child(["--child", *(str(x) for pair in sizes.items() for x in pair)], cache)
    if not isinstance(done, dict):
        raise RuntimeError(f"memory benchmark child failed:\n{done.stderr[-2000:]}")
    return done


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="bench perf memory", description=doc_summary(__doc__))
    p.add_argument("--small", type=count(1), default=1024, help="small global batch (default %(default)s)")
    p.add_argument("--huge", type=count(1), default=98304, help="huge global batch (default %(default)s)")
    p.add_argument("--micro-batch", type=count(1), default=256)
    p.add_argument("--image-size", type=count(1), default=16)
    p.add_argument("--model", default="test_resnet")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--fits", metavar="RECIPE", help="the largest micro-batch of RECIPE that fits this machine")
    p.add_argument(
        "--set", action="append", default=[], type=assignment, metavar="KEY=VALUE", help="with --fits: override a key"
    )
    p.add_argument("--classes", type=count(1), default=1000, help="with --fits: labels (default %(default)s, ImageNet)")
    p.add_argument("--ranks", type=count(1), default=1, help="with --fits: ranks sharing the global batch (default 1)")
    p.add_argument(
        "--headroom", type=float, default=0.9, help="with --fits: the share of memory a step may fill (default 0.9)"
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--fits-child", help=argparse.SUPPRESS)
    p.add_argument("--global-batch", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fits_child:
        fits_child(args.fits_child)
        return 0
    if args.fits:
        if not 0 < args.headroom <= 1:
            raise UserError(f"bench perf memory --headroom {args.headroom}: a share of memory, in (0, 1]")
        return fits(args)
    if not args.child:  # the children inherit checked arguments
        from bench.models import check_name

        check_name(args.model, "bench perf memory --model")
        for batch in (args.small, args.huge):
            _recipe(batch, args.micro_batch, args.image_size, args.model, args.optimizer)
    if args.child:
        child(args)
        return 0
    rows = [measure(b, args) for b in (args.small, args.huge)]
    print(
        f"{'global batch':>12} {'accum':>6} {'step s':>8} {'peak RSS MiB':>13}"
        + (f" {'peak CUDA MiB':>14}" if "peak_cuda_mib" in rows[0] else "")
    )
    for r in rows:
        line = f"{r['global_batch']:>12} {r['accum_steps']:>6} {r['seconds']:>8.1f} {r['peak_rss_mib']:>13.0f}"
        print(line + (f" {r['peak_cuda_mib']:>14.0f}" if "peak_cuda_mib" in r else ""))
    ratio = rows[1]["peak_rss_mib"] / rows[0]["peak_rss_mib"]
    verdict = "PASS" if ratio < 1.10 else "MISS"
    print(f"peak RSS ratio {args.huge} / {args.small}: {ratio:.3f} ({verdict}: target < 1.10)")
    if "peak_cuda_mib" in rows[0]:
        print(f"peak CUDA ratio: {rows[1]['peak_cuda_mib'] / rows[0]['peak_cuda_mib']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
