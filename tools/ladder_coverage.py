"""Coverage of the scaling table's intervals in simulated ladders (docs/algorithms.md quotes its output):

    OMP_NUM_THREADS=1 python tools/ladder_coverage.py [--studies 300] [--draws 200]

No training: steps to result are drawn about S(B) = S_min (1 + B_noise / B) (650 steps at 64, as the committed
ladder's LARS) with 8% lognormal noise, 5 seeds at each
of 64-1,024, read on an evaluation grid of 1/24 of the steps, a miss where they exceed a 131,072-image budget. Two
worlds: the model, and the misspecification the committed ladder showed (the top batch stalls: its steps 1.5 x the
model's, so reruns miss a budget the model says they meet). For each: how often the critical batch's 95% profile
interval holds the true one (20% above linear scaling from 64, the model's curve without the stall), its median
estimate over the truth, how often the fit's checks flag it (not robust, or misses the fit does not explain) and
the coverage of the studies they do not flag; and how often the seed-paired bootstrap ratio of two arms holds the
true ratio."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.analysis import ladder

LADDER = np.array([64, 128, 256, 512, 1024])
BUDGET = 131072
STEPS_AT_64 = 650.0  # the committed ladder's LARS median at batch 64


def arm(b_noise: float, rng, stall: float, noise: float = 0.08, seeds: int = 5) -> pd.DataFrame:
    rows = []
    for b in LADDER:
        mean = STEPS_AT_64 * (1 + b_noise / b) / (1 + b_noise / LADDER[0]) * (stall if b == LADDER[-1] else 1.0)
        grid = max(1.0, round(mean / 24))
        steps = np.ceil(mean * np.exp(noise * rng.standard_normal(seeds)) / grid) * grid
        budget = BUDGET / b
        rows.append(
            {
                "global_batch": int(b),
                "near_tie": False,
                "runner_up_rerun_steps": (),
                "rerun_steps": tuple(np.where(steps > budget, np.inf, steps)),
                "rerun_ran": tuple(np.minimum(steps, budget)),
                "rerun_grid": (grid,) * seeds,
                "rerun_seeds": tuple(range(1, seeds + 1)),
                "rerun_budget": float(budget),
            }
        )
    return pd.DataFrame(rows)


def critical(b_noise: float) -> float:
    return 0.2 * b_noise + 1.2 * LADDER[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--studies", type=int, default=300)
    parser.add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(
        "| world | B_noise | critical batch (from 64) | interval covers | median estimate / truth | misses at 1,024 "
        "| checks flag the fit | covers when not flagged |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for world, stall in (("model", 1.0), ("top batch stalls (1.5 x)", 1.5)):
        for b_noise in (150.0, 500.0, 2000.0):
            covered, ratio, misses, flagged, clean_covered = 0, [], 0, 0, 0
            for _ in range(args.studies):
                cells = arm(b_noise, rng, stall)
                f = ladder.fit_ladder(cells)
                _, low, high = f.critical
                check = ladder.checks(cells, f)
                flag = bool(check.outside(f) or check.unexplained())
                covered += low <= critical(b_noise) <= high
                flagged += flag
                clean_covered += not flag and low <= critical(b_noise) <= high
                ratio.append(f.critical[0] / critical(b_noise))
                misses += int(np.isinf(cells["rerun_steps"].iloc[-1]).sum())
            print(
                f"| {world} | {b_noise:,.0f} | {critical(b_noise):,.0f} | {covered / args.studies:.1%} | "
                f"{np.median(ratio):.2f} | {misses / args.studies:.2f} of 5 | {flagged / args.studies:.1%} | "
                + (f"{clean_covered / (args.studies - flagged):.1%} |" if flagged < args.studies else "— |")
            )
    print()
    print("| world | B_noise X / reference | true ratio | 95% interval covers | median resolvable ratio |")
    print("|---|---|---:|---:|---:|")
    for world, stall in (("model", 1.0), ("top batch stalls (1.5 x)", 1.5)):
        for bx, by in ((500.0, 500.0), (1000.0, 500.0)):
            covered, resolvable = 0, []
            studies = args.studies // 2
            for _ in range(studies):
                r = ladder.ratio(arm(bx, rng, stall), arm(by, rng, stall), 0.95, draws=args.draws)
                truth = critical(bx) / critical(by)
                covered += r is not None and r.low <= truth <= r.high
                resolvable.append(r.resolvable if r else np.nan)
            print(
                f"| {world} | {bx:,.0f} / {by:,.0f} | {critical(bx) / critical(by):.2f} | {covered / studies:.1%} | "
                f"{np.nanmedian(resolvable):.2f} |"
            )
    print(f"\n{args.studies} studies a row ({args.studies // 2} for the ratios, {args.draws} bootstrap draws each).")


if __name__ == "__main__":
    main()
