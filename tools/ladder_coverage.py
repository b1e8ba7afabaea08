"""Coverage of the scaling table's intervals in simulated ladders (docs/algorithms.md quotes its output):

    OMP_NUM_THREADS=1 python tools/ladder_coverage.py [--ladder committed|field|field16] [--studies 300]
        [--draws 200] [--only fit|ratio|estimates]

No training: steps to result are drawn about S(B) = S_min (1 + B_noise / B) with 8% lognormal noise, 5 seeds a batch,
read on the study's evaluation grid, a miss where they exceed the batch's budget. Two ladders: the committed one
(64-1,024, 650 steps at 64 as its LARS, a grid of 1/24 of the steps, 131,072 images at every batch, the ratio at
95%) and the field study's (64-2,048, 530 steps at 64 as its LARS's best trials, an evaluation every 0.1 epoch of
17,000 images, its budgets by batch, the ratio at 1 - 0.05/3 for its 3 arms against LARS). Three worlds: the model;
the top batch stalls (its steps 1.5 x the model's, so reruns miss a budget the model says they meet); and batch
offsets (each batch's 5 reruns share one lognormal offset of 6%, as a selected lr a little off its best shifts
them together). For each: how often the critical batch's 95% profile interval holds the true one (20% above linear
scaling from 64, the model's curve), its median estimate over the truth, how often the lack-of-fit test fires,
how often the checks flag the fit (not robust, or misses the fit does not explain) and the coverage of the studies
they do not flag; and how often the seed-paired bootstrap ratio of two arms holds the true ratio, and how often
the 95% interval of its smallest resolvable ratio holds the true one (exp(z sd), sd the log ratio's spread over
the studies)."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import stats

from bench.analysis import ladder
from bench.analysis.critical import LACK_OF_FIT_ALPHA

LADDERS = {  # batches, steps at 64, budget (images) by batch, grid (steps) at a batch and steps, ratio level
    "committed": (
        np.array([64, 128, 256, 512, 1024]),
        650.0,
        dict.fromkeys([64, 128, 256, 512, 1024], 131072),
        lambda b, steps: max(1.0, round(steps / 24)),
        0.95,
    ),
    "field": (
        np.array([64, 128, 256, 512, 1024, 2048]),
        530.0,
        {64: 85000, 128: 85000, 256: 102000, 512: 136000, 1024: 204000, 2048: 340000},
        lambda b, steps: max(1.0, round(1700 / b)),
        1 - 0.05 / 3,
    ),
}
LADDERS["field16"] = (  # the widened field study's (recipes/sweeps/field.yaml): 16-2,048, 64's budget below it
    np.array([16, 32, 64, 128, 256, 512, 1024, 2048]),
    2120.0,  # about 4 x 530 at 16: the linear regime
    {16: 85000, 32: 85000, 64: 85000, 128: 85000, 256: 102000, 512: 136000, 1024: 204000, 2048: 340000},
    lambda b, steps: max(1.0, round(1700 / b)),
    1 - 0.05 / 6,
)
WORLDS = {"model": (1.0, 0.0), "top batch stalls (1.5 x)": (1.5, 0.0), "batch offsets (6%)": (1.0, 0.06)}
# alpha of S(B) = S_min (1 + (B_noise / B)^alpha): the model, LARS's refit, a stronger bend, the other way (alpha < 1
# caps the critical batch at B0 1.2^(1 / (1 - alpha)) whatever B_noise: 614 from 16 at 0.95, 40 at 0.8)
BENT = (1.0, 1.16, 1.4, 0.95)


def arm(
    ladder_name: str,
    b_noise: float,
    rng,
    stall: float,
    offset: float,
    noise: float = 0.08,
    seeds: int = 5,
    alpha: float = 1.0,
):
    batches, at_first, budgets, grid_of, _ = LADDERS[ladder_name]
    rows = []
    for b in batches:
        bent = (1 + (b_noise / b) ** alpha) / (1 + (b_noise / batches[0]) ** alpha)
        mean = at_first * bent * (stall if b == batches[-1] else 1.0)
        mean *= np.exp(offset * rng.standard_normal())  # the batch's reruns shifted together
        grid = grid_of(b, mean)
        steps = np.ceil(mean * np.exp(noise * rng.standard_normal(seeds)) / grid) * grid
        budget = budgets[int(b)] / b
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
    return 0.2 * b_noise + 1.2 * 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ladder", choices=sorted(LADDERS), default="committed")
    parser.add_argument("--studies", type=int, default=300)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument(
        "--only", choices=["fit", "ratio", "estimates"], help="one of the tables (default: fit and ratio)"
    )
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    if args.only == "estimates":
        estimates_table(args, rng)
        return
    if args.only != "ratio":
        fit_table(args, rng)
    if args.only != "fit":
        ratio_table(args, rng)
    print(f"\n{args.studies} studies a row ({args.studies // 2} for the ratios, {args.draws} bootstrap draws each).")


def fit_table(args, rng) -> None:
    top = f"{LADDERS[args.ladder][0][-1]:,}"
    print(
        f"| world | B_noise | critical batch (from 64) | interval covers | median estimate / truth | misses at {top} "
        "| lack of fit found | checks flag the fit | covers when not flagged |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for world, (stall, offset) in WORLDS.items():
        for b_noise in (150.0, 500.0, 2000.0):
            covered, ratio, misses, flagged, clean_covered, lack = 0, [], 0, 0, 0, 0
            for _ in range(args.studies):
                cells = arm(args.ladder, b_noise, rng, stall, offset)
                f = ladder.fit_ladder(cells)
                _, low, high = f.critical
                check = ladder.checks(cells, f)
                flag = bool(check.outside(f) or check.unexplained())
                covered += low <= critical(b_noise) <= high
                flagged += flag
                lack += f.lack_of_fit_p < LACK_OF_FIT_ALPHA
                clean_covered += not flag and low <= critical(b_noise) <= high
                ratio.append(f.critical[0] / critical(b_noise))
                misses += int(np.isinf(cells["rerun_steps"].iloc[-1]).sum())
            print(
                f"| {world} | {b_noise:,.0f} | {critical(b_noise):,.0f} | {covered / args.studies:.1%} | "
                f"{np.median(ratio):.2f} | {misses / args.studies:.2f} of 5 | {lack / args.studies:.1%} | "
                f"{flagged / args.studies:.1%} | "
                + (f"{clean_covered / (args.studies - flagged):.1%} |" if flagged < args.studies else "— |")
            )


def ratio_table(args, rng) -> None:
    level = LADDERS[args.ladder][-1]
    print()
    print(
        f"| world | B_noise X / reference | true ratio | {level:.2%} interval covers | median resolvable ratio "
        "| true resolvable ratio | its 95% interval covers |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    z = stats.t.ppf(1 - (1 - level) / 2, 4) + stats.t.ppf(ladder.POWER, 4)  # 5 seeds
    for world, (stall, offset) in WORLDS.items():
        for bx, by in ((500.0, 500.0), (1000.0, 500.0)):
            covered, resolvable, points, ranges = 0, [], [], []
            studies = args.studies // 2
            for _ in range(studies):
                x, y = (arm(args.ladder, b, rng, stall, offset) for b in (bx, by))
                r = ladder.ratios(x, y, level, draws=args.draws)["curve"]
                truth = critical(bx) / critical(by)
                covered += r is not None and r.low <= truth <= r.high
                resolvable.append(r.resolvable if r else np.nan)
                if r is not None and 0 < r.point < np.inf:
                    points.append(np.log(r.point))
                    ranges.append(r.resolvable_range)
            true_resolvable = float(np.exp(z * np.std(points, ddof=1)))  # the se the studies' spread says
            held = np.mean([low <= true_resolvable <= high for low, high in ranges])
            print(
                f"| {world} | {bx:,.0f} / {by:,.0f} | {critical(bx) / critical(by):.2f} | {covered / studies:.1%} | "
                f"{np.nanmedian(resolvable):.2f} | {true_resolvable:.2f} | {held:.1%} |"
            )


def estimates_table(args, rng) -> None:
    """The three estimates of the scaling table (the curve, the bent curve, model-free) in worlds whose true curve is
    bent (alpha != 1): how often each 95% interval holds the true critical batch (critical.critical3 of the world's
    curve, from the smallest batch), its median estimate over the truth, how often alpha = 1's F test rejects at
    5%; and how often each ratio interval (at the ladder's corrected level) holds the true ratio of two arms, and
    how often the combined word (scaling.combined_word) is wrong (a direction the truth does not have)."""
    from bench.analysis import critical, scaling

    batches, level = LADDERS[args.ladder][0], LADDERS[args.ladder][-1]
    noise = np.geomspace(1.0, 1e6, 2000)  # each world's B_noise set by its true critical batch, whatever its alpha

    def b_noise_for(crit: float, alpha: float) -> float:
        return float(np.interp(crit, critical.critical3(noise, np.full(len(noise), alpha), batches[0]), noise))

    def truth(b_noise: float, alpha: float) -> float:
        return float(critical.critical3(np.array([b_noise]), np.array([alpha]), batches[0])[0])

    print(
        "| alpha | B_noise | true critical batch | curve covers | bent covers | model-free covers | curve / truth | "
        "bent / truth | model-free / truth | alpha = 1 rejected |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for alpha in BENT:
        cap = batches[0] * 1.2 ** (1 / (1 - alpha)) if alpha < 1 else np.inf
        for b_noise in (b_noise_for(crit, alpha) for crit in (160.0, 600.0) if crit < 0.9 * cap):
            true = truth(b_noise, alpha)
            held, ratio, rejected = {e: 0 for e in ladder.ESTIMATES}, {e: [] for e in ladder.ESTIMATES}, 0
            for _ in range(args.studies):
                cells = arm(args.ladder, b_noise, rng, 1.0, 0.0, alpha=alpha)
                d = ladder.arm_draws(cells, [1, 2, 3, 4, 5], float(batches[0]), args.draws)
                alt = ladder.alternatives(cells, d)
                bent = alt.bent
                found = {
                    "curve": ladder.fit_ladder(cells).critical,
                    "bent curve": (bent.critical, bent.critical_low, bent.critical_high),
                    "model-free": alt.model_free,
                }
                for e, (point, low, high) in found.items():
                    held[e] += low <= true <= high
                    ratio[e].append(point / true)
                rejected += alt.alpha.p < 0.05
            n = args.studies
            print(
                f"| {alpha:g} | {b_noise:,.0f} | {true:,.0f} | "
                + " | ".join(f"{held[e] / n:.1%}" for e in ladder.ESTIMATES)
                + " | "
                + " | ".join(f"{np.nanmedian(ratio[e]):.2f}" for e in ladder.ESTIMATES)
                + f" | {rejected / n:.1%} |"
            )
    print()
    print(
        f"| alpha | B_noise X / reference | true ratio | curve covers ({level:.2%}) | bent covers | model-free covers "
        "| word wrong |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for alpha in BENT:
        by = b_noise_for(160.0, alpha)
        for bx in (by, b_noise_for(240.0, alpha)):  # the same critical batch, and 1.5 x it
            true = truth(bx, alpha) / truth(by, alpha)
            held, wrong, studies = {e: 0 for e in ladder.ESTIMATES}, 0, args.studies // 2
            for _ in range(studies):
                x, y = (arm(args.ladder, b, rng, 1.0, 0.0, alpha=alpha) for b in (bx, by))
                r = ladder.ratios(x, y, level, draws=args.draws)
                for e, v in r.items():
                    held[e] += v is not None and v.low <= true <= v.high
                if all(v is not None for v in r.values()):
                    word = scaling.combined_word(r)
                    wrong += (word == "larger" and true <= 1) or (word == "smaller" and true >= 1)
            print(
                f"| {alpha:g} | {bx:,.0f} / {by:,.0f} | {true:.2f} | "
                + " | ".join(f"{held[e] / studies:.1%}" for e in ladder.ESTIMATES)
                + f" | {wrong / studies:.1%} |"
            )


if __name__ == "__main__":
    main()
