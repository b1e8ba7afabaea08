"""Peak memory of one optimizer step at a small and a huge global batch (accumulation).

Each global batch runs in a fresh process (so its peak is its own): a small
model, small random images (the random loader, no I/O), one full step of
`global_batch` images through micro-batches of `--micro-batch`. Reported: the
process's peak resident memory (and peak CUDA memory on a GPU), and the ratio
huge / small. Accumulation should make the ratio about 1 (target: < 1.10).
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

from bench.errors import ArgumentParser, count


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


def measure(global_batch: int, args) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "bench.perf.memory",
        "--child",
        "--global-batch",
        str(global_batch),
        "--micro-batch",
        str(args.micro_batch),
        "--image-size",
        str(args.image_size),
        "--model",
        args.model,
        "--optimizer",
        args.optimizer,
    ]
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "BENCH_CACHE": cache})
    if done.returncode:
        raise RuntimeError(f"memory benchmark child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="bench perf memory", description=__doc__.split("\n")[0])
    p.add_argument("--small", type=count(1), default=1024, help="small global batch (default %(default)s)")
    p.add_argument("--huge", type=count(1), default=98304, help="huge global batch (default %(default)s)")
    p.add_argument("--micro-batch", type=count(1), default=256)
    p.add_argument("--image-size", type=count(1), default=16)
    p.add_argument("--model", default="test_resnet")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--global-batch", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.child:  # the children inherit checked arguments
        from bench.recipe import check_model_name

        check_model_name(args.model, "bench perf memory --model")
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
