"""The critical batch from the whole batch ladder (`bench table scaling`, the steps figure).

Every rerun of every batch enters one fit of McCandlish et al. 2018's steps to result

    S(B) = S_min (1 + B_noise / B),   i.e.   images(B) = S(B) B = E_min (1 + B / B_noise),  E_min = S_min B_noise

by least squares in log steps (equal weights: each rerun one point, so lognormal noise of one size at every
batch), each rerun's steps read at the middle of its last evaluation interval (S - G/2: the target was crossed
somewhere in the G steps before the evaluation that saw it). A rerun that missed the target ran its whole budget of steps without reaching it: it is a lower bound
(S > budget), which costs the fit only when the curve passes below it (a one-sided squared residual, as a
censored point in a Tobit fit). B_noise is found on a fine log grid (a step of 1/64 octave; the profile's
S_min is exact at each grid point), so the fit never fails to converge and ∞ (pure linear scaling, the
limit of the model) is a value like any other.

The critical batch is Zhang et al. 2024's: where images to result are 20% above perfect linear scaling. The base
of "linear" is the fit's small-batch limit E_min (the images a vanishingly small batch needs), not the ladder's
smallest batch, so the estimate does not move with the ladder: images(B) / E_min = 1 + B / B_noise = 1.2 at
B_crit = 0.2 B_noise. (From the smallest batch B0 instead it would be 0.2 B_noise + 1.2 B0.)

The interval is the profile-likelihood one: the B_noise whose best fit's residual sum of squares exceeds the
minimum by at most F(1, n - 2; 95%) s², s² the residual variance (at least the rounding of the evaluation grid,
(G / S)² / 12, so a perfect fit on the grid is not a certain one). It carries no generator, so it depends on
nothing but the arm's own runs. The selection's uncertainty: where a cell's selection was a near tie and its
runner-up was rerun, both points are equally valid selections; the fit is repeated for every combination and
the interval is the hull of all their intervals and points, so it contains every such selection's estimate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

EXCESS = 1.2  # Zhang et al. 2024: the critical batch is where images to result are 20% above linear scaling
LEVEL = 0.95
RESOLVED = 2.0  # an interval wider than this factor does not locate the critical batch
GRID_STEP = 2 ** (1 / 64)  # the B_noise grid's spacing
GRID_REACH = 64.0  # the grid spans the ladder / 64 to the ladder x 64, then ∞


@dataclass(frozen=True)
class Fit:
    """B_noise with its interval (0 / ∞ at the ends of the grid); nan when too few reruns reached the target."""

    b_noise: float
    low: float
    high: float
    alternatives: tuple[float, ...] = ()  # the near-tied selections' B_noise (the hull holds them all)

    @property
    def critical(self) -> tuple[float, float, float]:
        """The critical batch, point and interval: (EXCESS - 1) x B_noise."""
        return tuple((EXCESS - 1) * v for v in (self.b_noise, self.low, self.high))

    @property
    def resolved(self) -> bool:
        return 0 < self.low and math.isfinite(self.high) and self.high <= RESOLVED * self.low

    @property
    def found(self) -> bool:
        return self.b_noise == self.b_noise


NO_FIT = Fit(math.nan, math.nan, math.nan)


def _grid(batches: np.ndarray) -> np.ndarray:
    """B_noise candidates on a lattice anchored at 1 (the same points for every ladder), then ∞."""
    low, high = (math.floor(math.log(v, GRID_STEP)) for v in (batches.min() / GRID_REACH, batches.max() * GRID_REACH))
    return np.append(GRID_STEP ** np.arange(low, high + 1.0), math.inf)


def profile(batches, steps, ran, grids) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The B_noise grid, each point's least residual sum of squares in log steps, s² and the point count.
    `steps`: a rerun's steps to the target (inf: a miss, a lower bound at the steps it `ran`)."""
    b, s, bound, g = (np.asarray(v, float) for v in (batches, steps, ran, grids))
    grid = _grid(b)
    shape = np.log(1 / b[None, :] + 1 / grid[:, None])  # log S = log E_min + log(1/B + 1/B_noise)
    reached = np.isfinite(s)
    g = np.where(reached & np.isfinite(g), g, 0.0)
    middle = np.where(reached, s - g / 2, bound)  # the target was crossed within the grid's G steps before S
    target = np.log(middle)[None, :] - shape  # each point's log E_min
    # the level: the mean of the reached points and the bounds above it; try each count of bounds above
    bounds_desc = -np.sort(-np.where(reached, -np.inf, target), axis=1)[:, : int((~reached).sum())]
    base_sum, base_n = (target * reached).sum(axis=1), reached.sum()
    levels = [base_sum / base_n] + [
        (base_sum + bounds_desc[:, :k].sum(axis=1)) / (base_n + k) for k in range(1, bounds_desc.shape[1] + 1)
    ]
    rss = np.full(len(grid), np.inf)
    for level in levels:
        resid = target - level[:, None]
        resid = np.where(reached, resid, np.maximum(resid, 0.0))  # a bound costs only when the curve is below it
        rss = np.minimum(rss, (resid**2).sum(axis=1))  # the convex objective's minimum is at one of these levels
    n = len(s)
    rounding = np.mean((g[reached] / middle[reached]) ** 2) / 12 if reached.any() else 0.0
    return grid, rss, max(float(rss.min()) / max(n - 2, 1), float(rounding)), n


def fit(batches, steps, ran, grids, level: float = LEVEL) -> Fit:
    """B_noise and its profile interval from one selection's reruns (one entry per rerun)."""
    from scipy import stats

    b, s = np.asarray(batches, float), np.asarray(steps, float)
    if len(set(b[np.isfinite(s)])) < 2 or len(s) < 3:  # two parameters: two batches that reached it, one spare
        return NO_FIT
    grid, rss, s2, n = profile(batches, steps, ran, grids)
    inside = grid[rss - rss.min() <= stats.f.ppf(level, 1, max(n - 2, 1)) * s2]
    point = float(grid[np.argmin(rss)])
    low, high = float(inside.min()), float(inside.max())
    return Fit(point, 0.0 if low == grid[0] else low, high)


def selections(ladder: pd.DataFrame) -> list[list[list[tuple]]]:
    """Per batch of one arm's ladder, the equally valid selections' reruns: the selected point's, and the
    runner-up's too where the selection was a near tie and the runner-up was rerun. Each rerun: (batch, steps to
    the target, steps it ran, grid)."""
    out = []
    for _, c in ladder.sort_values("global_batch").iterrows():
        options = [("rerun_steps", "rerun_ran", "rerun_grid")]
        if c["near_tie"] and len(c["runner_up_rerun_steps"]):
            options.append(("runner_up_rerun_steps", "runner_up_rerun_ran", "runner_up_rerun_grid"))
        out.append([[(c["global_batch"], *rerun) for rerun in zip(*(c[key] for key in keys))] for keys in options])
    return out


def fit_ladder(ladder: pd.DataFrame) -> Fit:
    """One arm's fit (`ladder`: its tuning.cells rows) with the near-tied selections inside its interval."""
    fits = []
    for choice in itertools.product(*selections(ladder)):
        reruns = [rerun for cell in choice for rerun in cell]
        fits.append(fit(*zip(*reruns)) if reruns else NO_FIT)
    chosen = fits[0]
    if not chosen.found or not all(f.found for f in fits):
        return chosen
    points = tuple(f.b_noise for f in fits)
    return Fit(
        chosen.b_noise,
        min(min(points), *(f.low for f in fits)),
        max(max(points), *(f.high for f in fits)),
        points[1:],
    )


def ratio_interval(x: Fit, y: Fit) -> tuple[float, float, float] | None:
    """x's B_noise over y's, with the interval both 95% intervals allow at once (coverage at least 0.95² ≈ 90%
    for independent arms); None unless both are resolved."""
    if not (x.resolved and y.resolved):
        return None
    return x.b_noise / y.b_noise, x.low / y.high, x.high / y.low


def batch_text(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:,.0f}"


def interval_text(point: float, low: float, high: float, resolved: bool) -> str:
    """'P [L, H]' when the interval locates it (within a factor RESOLVED), else the interval alone in words."""
    if point != point:
        return "—"
    if resolved:
        return f"{batch_text(point)} [{batch_text(low)}, {batch_text(high)}]"
    if math.isinf(high):
        return f"above {batch_text(low)} (not resolved)" if low > 0 else "anywhere (not resolved)"
    return f"between {batch_text(low)} and {batch_text(high)} (not resolved)"


def crossing(run: str, steps: float) -> tuple[float, float]:
    """Where in its schedule a run crossed the target at `steps`: the fraction of its planned steps and the lr of
    the crossing evaluation over the recipe's peak lr (from its recipe.yaml and metrics.csv); nan when it missed."""
    from pathlib import Path

    from bench.rundir import read_metrics, read_recipe_and_meta

    if not math.isfinite(steps):
        return math.nan, math.nan
    recipe, meta = read_recipe_and_meta(Path(run))
    planned = recipe["epochs"] * meta["train_size"] / recipe["global_batch"]
    metrics = read_metrics(Path(run))
    lr = metrics.loc[metrics["step"] == steps, "lr"]
    return steps / planned, float(lr.iloc[0]) / recipe["optimizer"]["lr"] if len(lr) else math.nan


def crossings(cell: pd.Series) -> tuple[float, float]:
    """A cell's reruns' median crossing position (crossing): fraction of the schedule and lr over its peak."""
    found = np.array([crossing(run, s) for run, s in zip(cell["reruns"], cell["rerun_steps"])], float)
    found = found[np.isfinite(found[:, 0])] if len(found) else found
    return tuple(float(np.median(found[:, j])) for j in (0, 1)) if len(found) else (math.nan, math.nan)
