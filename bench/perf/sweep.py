"""The sweep's overhead per trial: what a trial costs beyond its training steps and evaluations.

A one-arm sweep of a recipe (default: the demo, at --epochs) runs `--trials` trials through
`bench sweep`'s own machinery in this process (expansion, the finished-run lookup, the claim, the
Trainer with its data pipeline and model, the run directory). Per trial: wall time from the sweep
taking it up to its run being finished, its training time (train_time_s, steps only) and its
evaluation time (eval_time_s, from the run's meta). Overhead = wall - training - evaluation; reported as
a ratio to the training time (target: under 5%), with the expansion time per trial beside it.
The first trial also pays one-time costs (the generated dataset, imports): it is shown, and the
ratio is the median over the others.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.errors import ArgumentParser, UserError, count, doc_summary
from bench.rundir import read_meta

TARGET = 0.05


def parse(argv: list[str]) -> argparse.Namespace:
    p = ArgumentParser(prog="bench perf sweep", description=doc_summary(__doc__))
    p.add_argument("--recipe", default="recipes/demo-sgd.yaml", help="the base recipe (default: %(default)s)")
    p.add_argument("--epochs", type=float, default=2.0, help="training epochs per trial (default: %(default)s)")
    p.add_argument("--trials", type=count(2), default=3, help="trials timed, at least 2 (default: %(default)s)")
    args = p.parse_args(argv)
    if not args.epochs > 0:
        raise UserError("bench perf sweep: --epochs must be above 0")
    if not Path(args.recipe).is_file():
        raise UserError(f"bench perf sweep: --recipe {args.recipe}: no such recipe file")
    return args


def main(argv: list[str]) -> int:
    from tqdm import tqdm

    from bench import sweep

    args = parse(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sweep_file = Path(tmp) / "perf.yaml"
        sweep_file.write_text(
            yaml.safe_dump(
                {
                    "base": str(Path(args.recipe).resolve()),
                    "batches": [yaml.safe_load(Path(args.recipe).read_text()).get("global_batch", 100)],
                    "arms": {"base": {"space": {"seed": {"values": list(range(args.trials))}}}},
                    "search": "grid",
                    "budget": {"epochs": args.epochs},
                    "select": {"split": "validation"},
                    "reruns": {"seeds": [10_000]},
                }
            )
        )
        start = time.perf_counter()
        spec = sweep.load(sweep_file)
        trials = sweep.expand(sweep_file, spec)
        expand_s = (time.perf_counter() - start) / len(trials)
        rows = []
        for trial in trials:
            start = time.perf_counter()
            with tqdm(total=1, disable=True) as bar, contextlib.redirect_stdout(io.StringIO()):
                [run] = sweep.run_trials([trial], Path(tmp) / "results", spec, bar, sweep.Progress())[0].values()
            wall = time.perf_counter() - start
            meta = read_meta(run)
            train, evaluation = meta["train_time_s"], meta["eval_time_s"]
            rows.append((trial.name, wall, train, evaluation, wall - train - evaluation))
    print(f"sweep overhead per trial: {args.recipe}, {args.epochs:g} epochs, {len(rows)} trials in one process")
    print(f"{'trial':<28}{'wall s':>9}{'train s':>9}{'eval s':>9}{'overhead s':>12}{'overhead/train':>16}")
    for name, wall, train, evaluation, overhead in rows:
        print(f"{name:<28}{wall:9.2f}{train:9.2f}{evaluation:9.2f}{overhead:12.2f}{overhead / train:16.4f}")
    ratio = statistics.median(r[4] / r[2] for r in rows[1:])
    verdict = "PASS" if ratio < TARGET else "MISS"
    print(f"expansion: {expand_s * 1000:.1f} ms per trial (once per sweep command)")
    print(f"overhead / training time, median of trials 2-{len(rows)}: {ratio:.4f} (target < {TARGET}: {verdict})")
    print(
        "overhead = wall time from taking the trial up to its finished run, less its training steps "
        "(train_time_s) and evaluations (eval_time_s): lookup, claim, data pipeline, model, run directory."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
