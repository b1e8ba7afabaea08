"""Rerun committed runs at this checkout and say whether each repeats bitwise: a study's runs come from one
training commit, so a later commit may add runs to a tree only if it trains the committed ones to the same numbers.

    python tools/rerun_check.py results/field-ladder/field-ladder-nesterov-b64-best-seed1 ... [--out DIR]

Each run directory's resolved recipe.yaml is trained again (bench's own runner, into --out, a temporary folder by
default) and its metrics.csv compared with the committed one, every column but the timers (train_time_s), as
the text the runs wrote: equal means every digit of every evaluation. Run it on the platform the committed runs
name (their meta.json's cpu_capability: ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=1 for
the Fashion-MNIST studies). Prints one line a run and exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from pathlib import Path

TIMERS = {"train_time_s"}


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMERS} for row in csv.DictReader(f)]


def committed_run(path: Path) -> Path:
    """The timestamped run directory under a recipe's folder (or the run directory itself)."""
    if (path / "recipe.yaml").is_file():
        return path
    found = sorted(p.parent for p in path.glob("*/recipe.yaml"))
    if not found:
        raise SystemExit(f"rerun_check: {path}: no run directory (recipe.yaml) in it")
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="committed run directories (or their recipe folders)")
    parser.add_argument("--out", type=Path, help="where the reruns go (default: a temporary folder)")
    args = parser.parse_args(argv)
    from bench import api
    from bench.rundir import read_meta

    out = args.out or Path(tempfile.mkdtemp(prefix="rerun-check-"))
    differ = 0
    for given in args.runs:
        old = committed_run(given)
        recipe = api.load_recipe(old / "recipe.yaml")
        new = api.run(recipe, out=out)
        a, b = rows(old / "metrics.csv"), rows(new / "metrics.csv")
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if first is None and len(a) == len(b):
            verdict = f"bitwise equal ({len(a)} evaluations, every column but {', '.join(sorted(TIMERS))})"
        else:
            differ += 1
            at = first if first is not None else min(len(a), len(b))
            verdict = f"DIFFERS from evaluation {at} ({len(a)} committed rows, {len(b)} rerun)"
        commits = read_meta(old).get("git_commit", "?")[:12], read_meta(new).get("git_commit", "?")[:12]
        print(f"{recipe.name}: {commits[0]} -> {commits[1]}: {verdict}", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
