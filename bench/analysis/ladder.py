"""The critical batch from the whole batch ladder (`bench table scaling`, the steps figure).

Every rerun of every batch enters one fit of McCandlish et al. 2018's steps to result

    S(B) = S_min (1 + B_noise / B),   i.e.   images(B) = S(B) B = E_min (1 + B / B_noise),  E_min = S_min B_noise

by least squares in log steps (equal weights: each rerun one point, so lognormal noise of one size at every
batch), each rerun's steps read at the middle of its last evaluation interval (S - G/2: the target was crossed
somewhere in the G steps before the evaluation that saw it). A rerun that missed the target ran its whole budget
of steps without reaching it: it is a lower bound (S > budget), which costs the fit only when the curve passes
below it (a one-sided squared residual: a censored point's penalty, not Tobit's likelihood, so a curve that
passes exactly through a batch's bounds costs nothing there; the misses' chance below checks it). B_noise is found on a fine log grid (a
step of 1/64 octave; the profile's E_min is exact at each grid point), so the fit never fails to converge and ∞
(pure linear scaling, the limit of the model) is a value like any other.

The critical batch is Zhang et al. 2024's: where images to result are 20% above perfect linear scaling from the
ladder's smallest batch B0 (the fit's images at B0, times B / B0 in steps' terms):
images(B) / images(B0) = (B_noise + B) / (B_noise + B0) = 1.2 at B_crit = 0.2 B_noise + 1.2 B0. A sweep may take
linear scaling from the fit's small-batch limit instead (`scaling: {linear_from: zero}`: B_crit = 0.2 B_noise,
which does not move with the ladder but extrapolates below it); the table prints that batch-0 reference beside
the headline either way.

The interval is the profile-likelihood one: the B_noise whose best fit's residual sum of squares exceeds the
minimum by at most F(1, df; 95%) s², s² the residual variance on df = the points that cost the fit (every reached
rerun and each miss the curve passes below) - 2 degrees of freedom, at least the rounding of the evaluation grid,
(G / S)² / 12, so a perfect fit on the grid is not a certain one; B_crit is monotone in B_noise, so its interval
is B_noise's mapped. The reruns of a batch share its selected lr, so a batch can sit off the curve as a whole (a
selection a little off its best lr): the lack-of-fit test compares the batches' scatter about the curve (the
residual sum of squares less the reruns' scatter within their batches, on its df less theirs) with the reruns'
within-batch scatter (F test, 5%); where the batches scatter more, s² is the batches' (the lack-of-fit mean
square, on its df), so the interval widens to what the batch means can say instead of holding each batch's
selection fixed. The selection's uncertainty: where a cell's selection was a near tie and its runner-up was
rerun, both points are equally valid selections; the fit is repeated for every combination and the interval is
the hull of all their intervals and points, so it contains every such selection's estimate.

A fit is checked before it is believed (`checks`): the fitted steps beside the observed median at each batch; the
chance, under the fit and its residual spread, of as many misses as a batch shows or more; the estimate with each
batch left out; and the estimate at the targets 1 point below and above (where the runs went on past the
target). The critical batch is "not robust" when one of those estimates falls outside its interval, and "not
resolved" when the interval spans more than a factor of 2.

Two arms' critical batches are compared by a bootstrap over the reruns' seeds, paired (`ratio`): each draw takes
the same seeds (with replacement) in every cell of both arms (the arms share seeds, hence initialisation and data
order), refits both and keeps the log ratio; the interval is the point times exp(± t se), se the draws' standard
deviation scaled by sqrt(n / (n - 1)) and t Student's on n - 1 degrees of freedom for n seeds (a percentile
interval from 5 seeds covered 33 of 40 simulated studies for 95% asked), at the level corrected for the arms compared;
the smallest ratio it would resolve at 80% power is exp((t_level + t_power) se). A bootstrap rather than a joint
profile because the two arms' fits share nothing but their seeds, which only a
resampling of the seeds carries into the ratio; its coverage by simulation is in docs/algorithms.md.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd

from bench.analysis import critical, power
from bench.analysis.critical import EXCESS, GRID_REACH

if TYPE_CHECKING:
    from bench.analysis.results import Study
    from bench.rundir import Run

LEVEL = 0.95
RESOLVED = 2.0  # an interval wider than this factor does not locate the critical batch
GRID_STEP = 2 ** (1 / 64)  # the B_noise grid's spacing
MISSES_ALPHA = 0.05  # a batch's misses are "not explained by the fit" when their chance under it is below this
TARGET_SHIFT = 1.0  # points: the robustness fits' targets, below and above the declared one
BOOTSTRAP_DRAWS = 1000
POWER = 0.8
LINEAR_FROM = ("smallest", "zero")  # the sweep key scaling.linear_from: the ladder's smallest batch (default) or 0


@dataclass(frozen=True)
class Fit:
    """B_noise with its interval (0 / ∞ at the ends of the grid); nan when too few reruns reached the target.
    `base`: the batch linear scaling is measured from (the ladder's smallest; 0 = the fit's small-batch limit)."""

    b_noise: float
    low: float
    high: float
    alternatives: tuple[float, ...] = ()  # the near-tied selections' B_noise (the hull holds them all)
    e_min: float = math.nan  # the images a vanishingly small batch needs: S(B) = E_min (1 / B + 1 / B_noise)
    spread: float = math.nan  # the residual standard deviation in log steps
    base: float = 0.0
    lack_of_fit_p: float = math.nan  # the batches' scatter about the curve against the reruns' (nan: no test)

    @property
    def critical(self) -> tuple[float, float, float]:
        """The critical batch, point and interval: 20% above linear scaling from `base`."""
        return tuple((EXCESS - 1) * v + EXCESS * self.base for v in (self.b_noise, self.low, self.high))

    @property
    def critical_at_zero(self) -> tuple[float, float, float]:
        """The batch-0 reference: 20% above the fit's small-batch limit, (EXCESS - 1) x B_noise."""
        return tuple((EXCESS - 1) * v for v in (self.b_noise, self.low, self.high))

    @property
    def resolved(self) -> bool:
        return within_factor(*self.critical[1:])

    @property
    def found(self) -> bool:
        return self.b_noise == self.b_noise

    def steps(self, batch) -> np.ndarray:
        """The fitted steps to result at `batch`."""
        return self.e_min * (1 / np.asarray(batch, float) + 1 / self.b_noise)


NO_FIT = Fit(math.nan, math.nan, math.nan)


def within_factor(low: float, high: float) -> bool:
    return 0 < low and math.isfinite(high) and high <= RESOLVED * low


def _grid(batches: np.ndarray) -> np.ndarray:
    """B_noise candidates on a lattice anchored at 1 (the same points for every ladder), then ∞."""
    low, high = (math.floor(math.log(v, GRID_STEP)) for v in (batches.min() / GRID_REACH, batches.max() * GRID_REACH))
    return np.append(GRID_STEP ** np.arange(low, high + 1.0), math.inf)


class Profile(NamedTuple):
    grid: np.ndarray  # B_noise candidates
    rss: np.ndarray  # each one's least residual sum of squares in log steps
    levels: np.ndarray  # and its log E_min
    s2: float  # the interval's variance (the batches' where they scatter more than their reruns)
    df: int  # its degrees of freedom
    lack_of_fit_p: float  # nan: no test (too few batches or reruns)
    spread: float  # one rerun's residual standard deviation in log steps


def profile(batches, steps, ran, grids) -> Profile:
    """The B_noise grid, each point's least residual sum of squares and log E_min, and the interval's variance
    after the lack-of-fit test (module docstring). `steps`: a rerun's steps to the target (inf: a miss, a lower
    bound at the steps it `ran`)."""
    r = critical.readings(batches, steps, ran, grids)
    grid = _grid(r.batches)
    shape = np.log(1 / r.batches[None, :] + 1 / grid[:, None])  # log S = log E_min + log(1/B + 1/B_noise)
    return Profile(grid, *critical.least_squares(shape, r, params=2))


def fit(batches, steps, ran, grids, level: float = LEVEL, base: float = 0.0) -> Fit:
    """B_noise and its profile interval from one selection's reruns (one entry per rerun)."""
    from scipy import stats

    b, s = np.asarray(batches, float), np.asarray(steps, float)
    if len(set(b[np.isfinite(s)])) < 2 or len(s) < 3:  # two parameters: two batches that reached it, one spare
        return NO_FIT
    p = profile(batches, steps, ran, grids)
    inside = p.grid[p.rss - p.rss.min() <= stats.f.ppf(level, 1, p.df) * p.s2]
    i = int(np.argmin(p.rss))
    low, high = float(inside.min()), float(inside.max())
    e_min = math.exp(p.levels[i])
    return Fit(
        float(p.grid[i]), 0.0 if low == p.grid[0] else low, high, (), e_min, p.spread, float(base), p.lack_of_fit_p
    )


_RERUN_KEYS = ("rerun_steps", "rerun_ran", "rerun_grid", "rerun_diverged")


def selections(ladder: pd.DataFrame) -> list[list[list[tuple]]]:
    """Per batch of one arm's ladder, the equally valid selections' reruns: the selected point's, and the
    runner-up's too where the selection was a near tie and the runner-up was rerun. Each rerun: (batch, steps to
    the target, steps it ran, grid). A rerun that diverged is left out: it stopped early, so it bounds nothing
    (the claim counts it, `Checks.diverged`)."""
    out = []
    for _, c in ladder.sort_values("global_batch").iterrows():
        options = [_RERUN_KEYS]
        if c["near_tie"] and len(c["runner_up_rerun_steps"]):
            options.append(
                ("runner_up_rerun_steps", "runner_up_rerun_ran", "runner_up_rerun_grid", "runner_up_rerun_diverged")
            )
        out.append([[(c["global_batch"], *r) for r, gone in _reruns(c, keys) if not gone] for keys in options])
    return out


def _reruns(c: pd.Series, keys: tuple[str, ...]) -> list[tuple[tuple, bool]]:
    """A cell's reruns under `keys` (steps, ran, grid, diverged) as ((steps, ran, grid), diverged); a cell without
    the diverged column (a hand-made one) has none diverged."""
    *values, gone = keys
    diverged = c.get(gone)
    rows = list(zip(*(c[k] for k in values)))
    flags = tuple(diverged) if isinstance(diverged, tuple) and len(diverged) == len(rows) else (False,) * len(rows)
    return [(r, bool(d)) for r, d in zip(rows, flags)]


def base_batch(ladder: pd.DataFrame, linear_from: str = "smallest") -> float:
    """The batch linear scaling is measured from: the ladder's smallest, or 0 (the fit's small-batch limit)."""
    return float(ladder["global_batch"].min()) if linear_from == "smallest" else 0.0


def fit_ladder(ladder: pd.DataFrame, linear_from: str = "smallest") -> Fit:
    """One arm's fit (`ladder`: its cells.cells rows) with the near-tied selections inside its interval."""
    base = base_batch(ladder, linear_from)
    fits = []
    for choice in itertools.product(*selections(ladder)):
        reruns = [rerun for cell in choice for rerun in cell]
        fits.append(fit(*zip(*reruns), base=base) if reruns else NO_FIT)
    chosen = fits[0]
    if not chosen.found or not all(f.found for f in fits):
        return chosen
    points = tuple(f.b_noise for f in fits)
    return Fit(
        chosen.b_noise,
        min(min(points), *(f.low for f in fits)),
        max(max(points), *(f.high for f in fits)),
        points[1:],
        chosen.e_min,
        chosen.spread,
        base,
        chosen.lack_of_fit_p,
    )


@dataclass(frozen=True)
class Checks:
    """What the fit is checked against (`checks`): per batch (ascending) the fitted steps, the misses and their
    chance under the fit; the critical batch with each batch left out, and at the shifted targets."""

    batches: tuple[int, ...]
    fitted: tuple[float, ...]
    misses: tuple[int, ...]
    reruns: tuple[int, ...]  # the reruns that did not diverge
    misses_chance: tuple[float, ...]  # P(as many misses or more | the fit, its spread, each batch's budget)
    left_out: dict = field(default_factory=dict)  # batch -> the critical batch without it (nan: no fit)
    shifted: dict = field(default_factory=dict)  # target -> the critical batch there (nan: no fit; None: unknown)
    diverged: tuple[int, ...] = ()  # per batch: reruns that diverged (left out of the fit)
    medians_cross: tuple[float, float] = (math.nan, math.nan)  # medians_cross(): where the medians pass 1.2 x linear

    def medians_text(self, f: Fit) -> str:
        """Where the reruns' medians pass EXCESS x linear scaling, in words, when that lies outside f's interval."""
        below, above = self.medians_cross
        _, low, high = f.critical
        if below != below or (above >= low and below <= high):
            return ""
        where = (
            f"stays at or under {EXCESS:g} up to {below:,.0f}"
            if math.isinf(above)
            else f"passes {EXCESS:g} between {below:,.0f} and {above:,.0f}"
        )
        return (
            f"the images / linear column (the reruns' medians) {where}, outside the interval (the column measures "
            "from the smallest batch's median, the fit from its curve: read the fitted steps beside it)"
        )

    def outside(self, f: Fit) -> list[str]:
        """The robustness estimates outside f's interval, in words ('without 1,024: 136', 'at 79%: 120')."""
        _, low, high = f.critical
        out = [f"without {b:,}: {batch_text(v)}" for b, v in self.left_out.items() if v == v and not low <= v <= high]
        out += [
            f"at {t:g}%: {batch_text(v)}"
            for t, v in self.shifted.items()
            if v is not None and v == v and not low <= v <= high
        ]
        return out

    def targets_text(self) -> str:
        """The estimates at the shifted targets, in words ('at 79%: 165; at 81%: not measured ...')."""
        return "; ".join(
            f"at {t:g}%: "
            + ("not measured (reruns stopped at the target)" if v is None else ("no fit" if v != v else batch_text(v)))
            for t, v in sorted(self.shifted.items())
        )

    def diverged_text(self) -> str:
        """'1 of 5 diverged at 2,048 (left out of the fit)', or ''."""
        at = [f"{d} of {d + n} at {b:,}" for b, d, n in zip(self.batches, self.diverged, self.reruns) if d]
        return f"reruns diverged, left out of the fit: {', '.join(at)}" if at else ""

    def unexplained(self) -> list[str]:
        """The batches whose misses the fit makes unlikely, in words."""
        return [
            f"{m} of {n} missed at {b:,} (chance {p:.3f} under the fit)"
            for b, m, n, p in zip(self.batches, self.misses, self.reruns, self.misses_chance)
            if m and p < MISSES_ALPHA
        ]


def medians_cross(batches, steps, linear_from: str = "smallest") -> tuple[float, float]:
    """Where the reruns' median steps (per batch, ascending) first pass EXCESS x linear scaling from the smallest
    batch's median: (the batch before, the first batch past it; inf: none passes it); nan where the smallest
    batch's median missed or the sweep measures from batch 0."""
    medians = [float(np.median(s)) if len(s) else math.nan for s in steps]
    if linear_from != "smallest" or not math.isfinite(medians[0]):
        return math.nan, math.nan
    images = [m * b / (medians[0] * batches[0]) for b, m in zip(batches, medians)]
    past = next((i for i, v in enumerate(images) if v > EXCESS), None)  # a missed median (inf) is past it
    below = max(i for i, v in enumerate(images[:past]) if v == v)  # the last batch before with a median
    return float(batches[below]), math.inf if past is None else float(batches[past])


def misses_chance(f: Fit, batch: float, budget: float, misses: int, reruns: int) -> float:
    """The chance of `misses` or more misses among `reruns` at `batch` when each rerun's log steps scatter about
    the fit's with its residual spread and a rerun misses when it would need more than `budget` steps."""
    from scipy import stats

    if not misses:
        return 1.0
    if not (f.found and budget > 0 and f.spread > 0):
        return math.nan
    one = stats.norm.sf((math.log(budget) - math.log(float(f.steps(batch)))) / f.spread)
    return float(stats.binom.sf(misses - 1, reruns, one))


def checks(ladder: pd.DataFrame, f: Fit, shifted: dict | None = None, linear_from: str = "smallest") -> Checks:
    """The checks of one arm's fit `f` (its cells: cells.cells rows with rerun_budget); `shifted`: target -> the
    same cells with their reruns' steps at that target (scaling.cells_at_target; None: not measurable)."""
    cells_sorted = ladder.sort_values("global_batch")
    batches = tuple(int(b) for b in cells_sorted["global_batch"])
    kept = [[r for r, gone in _reruns(c, _RERUN_KEYS) if not gone] for _, c in cells_sorted.iterrows()]
    steps = [np.asarray([r[0] for r in cell], float) for cell in kept]
    misses = tuple(int((~np.isfinite(s)).sum()) for s in steps)
    reruns = tuple(len(s) for s in steps)
    diverged = tuple(len(c["rerun_steps"]) - n for (_, c), n in zip(cells_sorted.iterrows(), reruns))
    budgets = cells_sorted["rerun_budget"].to_numpy(float)
    column = [np.asarray(c, float) for c in cells_sorted["rerun_steps"]]  # the table's medians: diverged as misses
    chances = tuple(misses_chance(f, b, u, m, n) for b, u, m, n in zip(batches, budgets, misses, reruns))
    left_out = {}
    if len(batches) > 2:
        for b in batches:
            rest = cells_sorted[cells_sorted["global_batch"] != b]
            left_out[b] = _critical_point(rest, ladder, linear_from)
    moved = {t: None if c is None else _critical_point(c, ladder, linear_from) for t, c in (shifted or {}).items()}
    return Checks(
        batches,
        tuple(float(v) for v in f.steps(batches)) if f.found else (math.nan,) * len(batches),
        misses,
        reruns,
        chances,
        left_out,
        moved,
        diverged,
        medians_cross(batches, column, linear_from),
    )


def _critical_point(cells_of: pd.DataFrame, ladder: pd.DataFrame, linear_from: str) -> float:
    """The selected point's critical batch from `cells_of`, linear scaling from the whole ladder's base."""
    reruns = [r for cell in selections(cells_of) for r in cell[0]]
    f = fit(*zip(*reruns), base=base_batch(ladder, linear_from)) if reruns else NO_FIT
    return f.critical[0] if f.found else math.nan


@dataclass(frozen=True)
class Ratio:
    """X's critical batch over Y's: the point (the two fits'), the bootstrap interval at `level`, the smallest
    ratio (>= 1, either way) the comparison would resolve at 80% power with its 95% interval (from the se's own
    uncertainty), the draws that gave a ratio, and those among them where an arm had no finite critical batch."""

    point: float
    low: float
    high: float
    level: float
    resolvable: float
    draws: int
    resolvable_range: tuple[float, float] = (math.nan, math.nan)
    unbounded: int = 0

    @property
    def resolvable_text(self) -> str:
        """'1.31x [1.18, 2.05]': the smallest resolvable ratio with its 95% interval."""
        low, high = self.resolvable_range
        return f"{ratio_text(self.resolvable)}x" + (f" [{ratio_text(low)}, {ratio_text(high)}]" if low == low else "")

    @property
    def word(self) -> str:
        return "no difference resolved" if self.low <= 1 <= self.high else ("larger" if self.low > 1 else "smaller")

    @property
    def text(self) -> str:
        """'P [L, H] (level)'."""
        return f"{ratio_text(self.point)} [{ratio_text(self.low)}, {ratio_text(self.high)}] ({self.level:.1%}"


def ratio_text(value: float) -> str:
    """'0.69', '593', '> 10,000', '∞', '—' (none): two decimals where they matter, none past 100, no digits past
    10,000."""
    if value != value:
        return "—"
    if math.isinf(value):
        return "∞"
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}" if value < 1e4 else "> 10,000"


def _seeded(cells_of: pd.DataFrame) -> list[dict]:
    """Per cell (ascending batch): seed -> that seed's rerun (batch, steps, ran, grid), a diverged one left out."""
    out = []
    for _, c in cells_of.sort_values("global_batch").iterrows():
        reruns = _reruns(c, _RERUN_KEYS)
        out.append({seed: (c["global_batch"], *r) for seed, (r, gone) in zip(c["rerun_seeds"], reruns) if not gone})
    return out


ESTIMATES = ("curve", "bent curve", "model-free")  # the critical batch three ways (critical.py's docstring)


class ArmDraws(NamedTuple):
    """One arm's critical batch by each estimate from its selected reruns (`points`) and from each draw of a seed
    bootstrap (`draws`, nan where a draw gives no estimate), and each draw's median steps per batch (`medians`)."""

    points: dict[str, float]
    draws: dict[str, np.ndarray]
    medians: np.ndarray  # draws x batches (ascending)
    batches: np.ndarray
    seeds: int


@functools.lru_cache(maxsize=8)
def _curve_grid(batches: tuple[float, ...]) -> critical.CurveGrid:
    return critical.curve_grid(np.asarray(batches, float))  # the same ladder's grid for every arm and draw


def arm_draws(cells_of: pd.DataFrame, seeds: list, base: float, draws: int = BOOTSTRAP_DRAWS) -> ArmDraws:
    """`cells_of`' selected reruns (near ties off) and `draws` seed-bootstrap draws over `seeds` (the generator
    seeded 0: arms given the same seeds share their draws, so a ratio's draws are paired); `base`: the batch
    linear scaling is measured from (0: the fit's small-batch limit, which only the curve measures from: the
    other two estimates are then nan)."""
    cells = _seeded(cells_of)
    order = [(i, s) for i, cell in enumerate(cells) for s in sorted(cell)]
    flat = [cells[i][s] for i, s in order]
    everything = critical.readings(*zip(*flat))
    position = {key: j for j, key in enumerate(order)}
    batches = np.array(sorted({b for cell in cells for b, *_ in cell.values()}), float)
    others = base > 0 and len(batches) >= 2
    bent = critical.Curve3Draws(_curve_grid(tuple(batches)), everything) if others else None

    def estimates(index: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
        r = critical.Readings(*(v[index] for v in everything))
        f = fit(*zip(*(flat[j] for j in index)), base=base)
        steps = np.where(r.reached, r.middle, np.inf)
        medians = np.array([np.median(steps[r.batches == b]) if (r.batches == b).any() else np.nan for b in batches])
        return {
            "curve": f.critical[0] if f.found else math.nan,
            "bent curve": bent.critical(index) if others else math.nan,
            "model-free": critical.crossing(batches, medians) if others else math.nan,
        }, medians

    points, _ = estimates(np.arange(len(flat)))
    points["curve"] = dataclasses.replace(fit_ladder(cells_of.assign(near_tie=False)), base=base).critical[0]
    rng = np.random.default_rng(0)
    found, medians = {e: [] for e in ESTIMATES}, []
    for _ in range(draws):
        drawn = rng.choice(seeds, size=len(seeds))
        index = np.array([position[(i, s)] for i, cell in enumerate(cells) for s in drawn if s in cell], int)
        one, m = estimates(index) if len(index) else (dict.fromkeys(ESTIMATES, math.nan), batches * math.nan)
        for e in ESTIMATES:
            found[e].append(one[e])
        medians.append(m)
    return ArmDraws(points, {e: np.asarray(v) for e, v in found.items()}, np.asarray(medians), batches, len(seeds))


def ratios(
    x: pd.DataFrame, y: pd.DataFrame, level: float, linear_from: str = "smallest", draws: int = BOOTSTRAP_DRAWS
) -> dict[str, Ratio | None]:
    """X's critical batch over Y's (their cells) by each estimate (ESTIMATES), by the seed-paired bootstrap (module
    docstring); an estimate's ratio is None unless both arms have it. The generator is seeded (0), so the table
    repeats."""
    fx, fy = (fit_ladder(c.assign(near_tie=False), linear_from) for c in (x, y))
    if not (fx.found and fy.found):
        return dict.fromkeys(ESTIMATES)
    base = min(base_batch(x, linear_from), base_batch(y, linear_from)) if linear_from == "smallest" else 0.0
    seeds = sorted({s for c in (x, y) for cell in _seeded(c) for s in cell})
    dx, dy = (arm_draws(c, seeds, base, draws) for c in (x, y))
    return {e: draws_ratio(dx, dy, e, level) for e in ESTIMATES}


def draws_ratio(dx: ArmDraws, dy: ArmDraws, estimate: str, level: float) -> Ratio | None:
    """The ratio of two arms' critical batches by `estimate` from their paired draws (ratios)."""
    logs = np.array([_log_ratio(a, b) for a, b in zip(dx.draws[estimate], dy.draws[estimate])])
    unbounded = int(sum(math.isinf(a) or math.isinf(b) for a, b in zip(dx.draws[estimate], dy.draws[estimate])))
    logs = logs[~np.isnan(logs)]  # a draw that leaves an arm without a fit, or both unbounded, bounds neither end
    point = _log_ratio(dx.points[estimate], dy.points[estimate])
    if len(logs) < len(dx.draws[estimate]) / 2 or dx.seeds < 2 or point != point:
        return None
    low, high, resolvable, resolvable_range = ratio_interval(logs, point, level, dx.seeds)
    return Ratio(math.exp(point), low, high, level, resolvable, len(logs), resolvable_range, unbounded)


def interval_of(d: ArmDraws, estimate: str, level: float = LEVEL) -> tuple[float, float, float]:
    """An arm's critical batch by `estimate` with its seed-bootstrap interval (ratio_interval's, on one arm's log
    critical batch): (point, low, high), nan where there is none."""
    point, values = d.points[estimate], d.draws[estimate]
    logs = np.log(values[~np.isnan(values)])
    if point != point or len(logs) < len(values) / 2 or d.seeds < 2:
        return math.nan, math.nan, math.nan
    low, high, *_ = ratio_interval(logs, math.log(point), level, d.seeds)
    return point, low, high


def _log_ratio(x: float, y: float) -> float:
    """log(x / y) of two critical batches: +∞ where only x has none finite (B_noise = ∞), -∞ where only y has; nan
    where neither has one, or either has no fit."""
    if x != x or y != y or math.isinf(x) and math.isinf(y):
        return math.nan
    return math.log(x) - math.log(y)


def ratio_interval(logs: np.ndarray, point: float, level: float, n: int) -> tuple[float, float, float, tuple]:
    """(low, high) of a ratio at `level` from its bootstrap's log ratios `logs` (±∞: a draw where one arm has no
    finite critical batch) and the log of its point, with n seeds; then the smallest ratio it would resolve at 80%
    power and that ratio's 95% interval (nan where the interval is the draws' percentiles)."""
    from scipy import stats

    tail = (1 - level) / 2
    up, down = np.mean(logs == np.inf), np.mean(logs == -np.inf)
    if up > tail or down > tail or not math.isfinite(point):
        # the seeds do not bound the ratio on a side (more draws than the tail, or the point itself, unbounded; nan:
        # neither arm has a finite critical batch):
        # the draws' percentiles, which an se cannot give (and which cover less than asked at 5 seeds)
        low, high = (float(np.exp(np.quantile(logs, q, method="inverted_cdf"))) for q in (tail, 1 - tail))
        low, high = (0.0 if point == -math.inf else low), (math.inf if point == math.inf else high)
        return low, high, math.nan, (math.nan, math.nan)
    # a percentile interval from 5 seeds covers too rarely (the resampled spread is (n - 1) / n of the real one,
    # and its tails are normal): the log ratio's bootstrap sd, scaled by sqrt(n / (n - 1)), times Student's t on
    # n - 1 degrees of freedom (simulated coverage: docs/algorithms.md); the few draws without a finite critical
    # batch (inside the tail) left out of the sd
    se = float(np.std(logs[np.isfinite(logs)], ddof=1)) * math.sqrt(n / (n - 1))
    t = stats.t.ppf(1 - tail, n - 1)
    z = t + stats.t.ppf(POWER, n - 1)
    resolvable_range = tuple(math.exp(z * se * f) for f in power.sd_interval(n - 1))
    return math.exp(point - t * se), math.exp(point + t * se), math.exp(z * se), resolvable_range


def batch_text(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:,.0f}"


def interval_text(point: float, low: float, high: float) -> str:
    """'P [L, H]' when the interval locates it (within a factor RESOLVED), else the interval alone in words."""
    if point != point:
        return "—"
    if within_factor(low, high):
        return f"{batch_text(point)} [{batch_text(low)}, {batch_text(high)}]"
    if math.isinf(high):
        return f"above {batch_text(low)} (not resolved)" if low > 0 else "anywhere (not resolved)"
    return f"between {batch_text(low)} and {batch_text(high)} (not resolved)"


def crossing(record: Run, steps: float) -> tuple[float, float]:
    """Where in its schedule a run (its record) crossed the target at `steps`: the fraction of its planned steps
    and the lr of the crossing evaluation over the recipe's peak lr (from its recipe and metrics); nan when it
    missed."""
    if not math.isfinite(steps):
        return math.nan, math.nan
    recipe, metrics = record.recipe, record.metrics
    planned = recipe["epochs"] * record.meta["train_size"] / record.batch
    lr = metrics.loc[metrics["step"] == steps, "lr"]
    return steps / planned, float(lr.iloc[0]) / recipe["optimizer"]["lr"] if len(lr) else math.nan


def steps_at(curve: pd.DataFrame, target: float, finished: bool, stopped_at: float | None) -> tuple | None:
    """A rerun's (steps to `target`, steps it ran, grid) from its evaluations (results.to_target's rule); None when
    it cannot be known: the run stopped at a lower target (`stopped_at`) before reaching this one."""
    from bench.analysis.results import to_target

    found = to_target(curve, target, finished)
    if math.isinf(found["steps_to_target"]) and stopped_at is not None and target > stopped_at:
        return None
    return found["steps_to_target"], float(curve["step"].max()), found["steps_to_target_grid"]


def crossings(study: Study, cell: pd.Series) -> tuple[float, float]:
    """A cell's reruns' median crossing position (crossing): fraction of the schedule and lr over its peak."""
    found = np.array([crossing(study.record(run), s) for run, s in zip(cell["reruns"], cell["rerun_steps"])], float)
    found = found[np.isfinite(found[:, 0])] if len(found) else found
    return tuple(float(np.median(found[:, j])) for j in (0, 1)) if len(found) else (math.nan, math.nan)


@dataclass(frozen=True)
class Alternatives:
    """One arm's critical batch beside the curve's (critical.py): the bent curve with alpha and their profile
    intervals, the model-free crossing with its seed-bootstrap interval, the F test of alpha = 1 on the batch
    means, and the batches seen in the linear regime (images / linear within the seeds' noise of 1)."""

    bent: critical.Curve3
    model_free: tuple[float, float, float]
    alpha: critical.AlphaTest
    linear: tuple[int, ...]
    smallest: float

    def near_smallest(self, f: Fit) -> list[str]:
        """The estimates within a factor 2 of the smallest batch, in words ('the curve's 113'): the linear regime
        they measure from is then seen at few batches."""
        points = {
            "the curve's": f.critical[0],
            "the bent curve's": self.bent.critical,
            "the model-free": self.model_free[0],
        }
        return [f"{k} {batch_text(v)}" for k, v in points.items() if v == v and v < 2 * self.smallest]


def alternatives(cells_of: pd.DataFrame, d: ArmDraws, level: float = LEVEL) -> Alternatives:
    """An arm's Alternatives from its cells (near ties off: the selected points' reruns) and its draws."""
    reruns = [r for cell in selections(cells_of.assign(near_tie=False)) for r in cell[0]]
    batches = d.batches
    bent = critical.curve3(*zip(*reruns), level, _curve_grid(tuple(batches))) if len(reruns) else critical.NO_CURVE
    return Alternatives(
        bent if d.points["bent curve"] == d.points["bent curve"] else critical.NO_CURVE,
        interval_of(d, "model-free", level),
        critical.alpha_test(*zip(*reruns)) if reruns else critical.AlphaTest(math.nan, math.nan, math.nan, 0),
        tuple(critical.linear_rungs(batches, d.medians, level)),
        float(batches.min()),
    )
