"""The critical batch without leaning on one curve: the readings every estimate shares, the least squares in log
steps of any curve (a miss a one-sided bound), and the two estimates that stand beside the two-parameter fit
(ladder.py) in `bench table scaling`.

Every estimate reads a rerun the same way: its steps to the target at the middle of its last evaluation interval
(S - G/2: the target was crossed somewhere in the G steps before the evaluation that saw it), a rerun that missed
the target a lower bound at the steps it ran.

- **Model-free** (`model_free`): per batch the reruns' median steps (a miss ranks above every reached rerun, so
  the median is exact while fewer than half missed); images / linear = median x batch over the smallest batch's;
  the critical batch is where it first passes 1.2, interpolated linearly in log images / linear against log batch
  between the two batches that bracket it. A batch whose median missed puts the crossing at the batch below it
  (the bracket's lower end); where no batch passes 1.2, it lies above the ladder (∞). No curve: only the ladder's
  own batches and the assumption that images / linear is monotone between two neighbours.
- **Three-parameter curve** (`curve3`): S(B) = S_min (1 + (B_noise / B)^alpha), fitted like the two-parameter
  curve (alpha = 1) on a lattice of B_noise (1/32 octave) and alpha (0.25 to 4, 1/64 octave); its critical batch is
  where S(B) B / (S(B0) B0) first passes 1.2 above B0 (one crossing: log of that ratio is convex in log B), its
  interval the profile-likelihood one (the grid points within F(1, df) s² of the least residual sum of squares,
  df = the points that cost the fit - 3), alpha's likewise.
- **alpha = 1 tested** (`alpha_test`): the F test of the third parameter on the batch means (each batch's mean log
  steps; its median where a rerun missed): a test with power against curvature, which the reruns' lack-of-fit test
  (`least_squares`) lacks because the batches' scatter about a bent curve looks like the offsets a selected lr puts
  on a batch's reruns.

The critical batch measures linear scaling from the ladder's smallest batch B0 in every estimate here; a sweep
that measures it from batch 0 (scaling.linear_from: zero) gets no three-parameter or model-free estimate, since
images / linear from batch 0 is 0 or ∞ unless alpha = 1 and the ladder has no batch 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

EXCESS = 1.2  # Zhang et al. 2024: the critical batch is where images to result are 20% above linear scaling
LACK_OF_FIT_ALPHA = 0.05  # the batches scatter about the curve more than their reruns do (least_squares)
ALPHAS = 2.0 ** np.arange(-2.0, 2.0 + 1e-9, 1 / 64)  # the three-parameter curve's alpha lattice: 0.25 to 4
B_NOISE_STEP = 1 / 32  # octaves between the three-parameter curve's B_noise lattice points
GRID_REACH = 64.0  # every B_noise grid spans the ladder / 64 to the ladder x 64


class Readings(NamedTuple):
    """Each rerun as the estimates read it: the steps at the middle of its last evaluation interval (reached) or
    the steps it ran (a miss: a lower bound), whether it reached, and its grid (0 for a miss)."""

    batches: np.ndarray
    middle: np.ndarray
    reached: np.ndarray
    grid: np.ndarray


def readings(batches, steps, ran, grids) -> Readings:
    b, s, bound, g = (np.asarray(v, float) for v in (batches, steps, ran, grids))
    reached = np.isfinite(s)
    g = np.where(reached & np.isfinite(g), g, 0.0)
    return Readings(b, np.where(reached, s - g / 2, bound), reached, g)


class LeastSquares(NamedTuple):
    rss: np.ndarray  # per grid point of the curve's shape parameters, the least residual sum of squares
    levels: np.ndarray  # and its log level (log E_min or log S_min)
    s2: float  # the interval's variance (the batches' where they scatter more than their reruns)
    df: int  # its degrees of freedom
    lack_of_fit_p: float  # nan: no test (too few batches or reruns)
    spread: float  # one rerun's residual standard deviation in log steps


def least_squares(shape: np.ndarray, r: Readings, params: int) -> LeastSquares:
    """The curve log S = level + shape[k] at each grid point k of its shape parameters (`shape`: grid x reruns),
    the level profiled out: least squares in log steps over the reruns `r`, a miss costing only where the curve
    passes below it (a one-sided squared residual); then the interval's variance after the lack-of-fit test
    (ladder.py's docstring), on the points that cost the fit less the curve's `params`."""
    target = np.log(r.middle)[None, :] - shape  # each point's log level
    reached = r.reached
    # the level: the mean of the reached points and the bounds above it; try each count of bounds above
    bounds_desc = -np.sort(-np.where(reached, -np.inf, target), axis=1)[:, : int((~reached).sum())]
    base_sum, base_n = (target * reached).sum(axis=1), reached.sum()
    levels = [base_sum / base_n] + [
        (base_sum + bounds_desc[:, :k].sum(axis=1)) / (base_n + k) for k in range(1, bounds_desc.shape[1] + 1)
    ]
    rss, best = np.full(len(shape), np.inf), np.zeros(len(shape))
    for level in levels:
        resid = target - level[:, None]
        resid = np.where(reached, resid, np.maximum(resid, 0.0))  # a bound costs only when the curve is below it
        now = (resid**2).sum(axis=1)
        best = np.where(now < rss, level, best)
        rss = np.minimum(rss, now)  # the convex objective's minimum is at one of these levels
    i = int(np.argmin(rss))
    costing = int(reached.sum() + (~reached & (target[i] > best[i])).sum())  # a bound above the curve costs nothing
    df = max(costing - params, 1)
    g, middle = r.grid[reached], r.middle[reached]
    rounding = float(np.mean((g / middle) ** 2) / 12) if reached.any() else 0.0
    s2 = spread2 = max(float(rss[i]) / df, rounding)
    lof_p, interval_df = math.nan, df
    # lack of fit: the reached reruns' scatter within their batches (pure error) against the rest of the residual
    logs, at = np.log(middle), r.batches[reached]
    pure = sum(float(((logs[at == v] - logs[at == v].mean()) ** 2).sum()) for v in np.unique(at))
    pure_df = int(reached.sum()) - len(np.unique(at))
    lof_df = df - pure_df  # pure_df >= 1 needs a batch with two reached reruns, so costing > params, df exact
    if lof_df >= 1 and pure_df >= 1 and pure > 0:
        from scipy import stats

        lof = max(float(rss[i]) - pure, 0.0) / lof_df
        # reruns crossing at one evaluation differ by less than the grid: their scatter at least its rounding
        lof_p = float(stats.f.sf(lof / max(pure / pure_df, rounding), lof_df, pure_df))
        if lof_p < LACK_OF_FIT_ALPHA:  # the batches scatter more than their reruns: the batch means' variance
            s2, interval_df = max(lof, rounding), lof_df
    return LeastSquares(rss, best, s2, interval_df, lof_p, math.sqrt(spread2))


def lattice(batches: np.ndarray, step: float) -> np.ndarray:
    """B_noise candidates `step` octaves apart on a lattice anchored at 1 (the same points for every ladder),
    from the ladder's smallest batch / GRID_REACH to its largest x GRID_REACH."""
    low, high = (math.log2(v) / step for v in (batches.min() / GRID_REACH, batches.max() * GRID_REACH))
    return 2.0 ** (np.arange(math.floor(low), math.floor(high) + 1.0) * step)


# --- the model-free estimate


def medians(r: Readings) -> tuple[np.ndarray, np.ndarray]:
    """The batches (ascending) and their reruns' median steps, a miss ranked above every reached rerun (∞ where
    half or more missed)."""
    batches = np.unique(r.batches)
    steps = np.where(r.reached, r.middle, np.inf)
    return batches, np.array([np.median(steps[r.batches == b]) for b in batches])


def crossing(batches: np.ndarray, steps: np.ndarray) -> float:
    """Where images / linear (steps x batch over the smallest batch's) first passes EXCESS, interpolated in log
    images / linear against log batch between the two batches that bracket it; ∞ where none passes it, nan where
    the smallest batch has no finite steps."""
    if not math.isfinite(steps[0]):
        return math.nan
    images = steps * batches / (steps[0] * batches[0])
    past = np.flatnonzero(images > EXCESS)
    if not len(past):
        return math.inf
    i = int(past[0])
    if not math.isfinite(images[i]):  # its median missed: the crossing is at the batch below, the bracket's end
        return float(batches[i - 1])
    lo, hi = math.log(images[i - 1]), math.log(images[i])
    fraction = (math.log(EXCESS) - lo) / (hi - lo)
    return float(math.exp(math.log(batches[i - 1]) + fraction * math.log(batches[i] / batches[i - 1])))


def model_free(batches, steps, ran, grids) -> float:
    """The model-free critical batch of one selection's reruns (one entry per rerun; module docstring)."""
    return crossing(*medians(readings(batches, steps, ran, grids)))


def linear_rungs(batches: np.ndarray, steps_by_draw: np.ndarray, level: float) -> list[int]:
    """The batches seen in the linear regime: those whose images / linear is within the seeds' noise of 1, i.e.
    its bootstrap interval at `level` (percentiles of `steps_by_draw`: draws x batches of median steps) holds 1.
    The smallest batch is one by definition; the count stops at the first batch that is not."""
    first = steps_by_draw[:, :1]
    with np.errstate(invalid="ignore"):
        images = steps_by_draw * batches[None, :] / (first * batches[0])
    tail = (1 - level) / 2
    low = np.nanquantile(np.where(np.isfinite(images), images, np.inf), tail, axis=0, method="inverted_cdf")
    seen = []
    for b, v in zip(batches, low):
        if not v <= 1:
            break
        seen.append(int(b))
    return seen


# --- the three-parameter curve


@dataclass(frozen=True)
class Curve3:
    """S(B) = S_min (1 + (B_noise / B)^alpha) fitted, with the critical batch and alpha, each with its profile
    interval at the fit's level; nan when too few reruns reached the target."""

    b_noise: float
    alpha: float
    critical: float
    critical_low: float
    critical_high: float
    alpha_low: float
    alpha_high: float
    s_min: float = math.nan

    @property
    def found(self) -> bool:
        return self.critical == self.critical

    def steps(self, batch) -> np.ndarray:
        return self.s_min * (1 + (self.b_noise / np.asarray(batch, float)) ** self.alpha)


NO_CURVE = Curve3(*(math.nan,) * 7)


class CurveGrid(NamedTuple):
    """The three-parameter curve's lattice for one ladder (B_noise x alpha, flattened row-major): each point's
    B_noise, alpha and critical batch from the ladder's smallest batch."""

    b_noise: np.ndarray
    alpha: np.ndarray
    critical: np.ndarray
    shape: tuple[int, int]  # (B_noise points, alpha points)


def curve_grid(batches: np.ndarray) -> CurveGrid:
    noise = lattice(batches, B_NOISE_STEP)
    b_noise, alpha = (v.ravel() for v in np.meshgrid(noise, ALPHAS, indexing="ij"))
    return CurveGrid(b_noise, alpha, critical3(b_noise, alpha, float(batches.min())), (len(noise), len(ALPHAS)))


def critical3(b_noise: np.ndarray, alpha: np.ndarray, base: float) -> np.ndarray:
    """Where S(B) B / (S(base) base) first passes EXCESS above `base` under the three-parameter curve: a scan in
    1/8 octave for the bracket (log of the ratio is convex in log B, so the first crossing is the only one from
    below), then bisection in it; in blocks of grid points, so the scan's memory stays small."""
    block = 4096
    parts = [_critical3(b_noise[i : i + block], alpha[i : i + block], base) for i in range(0, len(alpha), block)]
    return np.concatenate(parts) if parts else np.zeros(0)


def _critical3(b_noise: np.ndarray, alpha: np.ndarray, base: float) -> np.ndarray:
    lb, ln, a = math.log(base), np.log(b_noise)[:, None], alpha[:, None]

    def log_ratio(x):  # x: log(B / base), a column per grid point (rows)
        return x + np.logaddexp(0, a * (ln - lb - x)) - np.logaddexp(0, a * (ln - lb))

    reach = float(ln.max() - lb) + math.log(1e3)  # beyond the largest B_noise the curve is linear to 1e-3
    xs = np.arange(0.0, reach, math.log(2) / 8)
    first = np.argmax(log_ratio(xs[None, :]) > math.log(EXCESS), axis=1)  # every row passes it: no bound
    lo, hi = xs[np.maximum(first - 1, 0)][:, None], xs[first][:, None]
    for _ in range(20):  # 1/8 octave / 2^20
        mid = (lo + hi) / 2
        above = log_ratio(mid) > math.log(EXCESS)
        lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
    return base * np.exp(hi[:, 0])


def shape3(grid: CurveGrid, batches: np.ndarray, rows=slice(None)) -> np.ndarray:
    """log(1 + (B_noise / B)^alpha) at the grid's points `rows` (rows) and each rerun's batch (columns)."""
    log_noise = np.log(grid.b_noise[rows])[:, None]
    return np.logaddexp(0, grid.alpha[rows][:, None] * (log_noise - np.log(batches)[None, :]))


def curve3(batches, steps, ran, grids, level: float, grid: CurveGrid | None = None) -> Curve3:
    """The three-parameter curve of one selection's reruns (one entry per rerun) with its profile intervals at
    `level`; `grid`: the ladder's curve_grid (computed here when not given)."""
    from scipy import stats

    r = readings(batches, steps, ran, grids)
    if len(set(r.batches[r.reached])) < 3 or len(r.middle) < 4:  # three parameters: three batches, one spare
        return NO_CURVE
    grid = grid or curve_grid(np.unique(r.batches))
    fit = least_squares(shape3(grid, r.batches), r, params=3)
    i = int(np.argmin(fit.rss))
    inside = fit.rss - fit.rss[i] <= stats.f.ppf(level, 1, fit.df) * fit.s2
    crit, alpha = grid.critical[inside], grid.alpha[inside]
    return Curve3(
        float(grid.b_noise[i]),
        float(grid.alpha[i]),
        float(grid.critical[i]),
        float(crit.min()),
        float(crit.max()),
        float(alpha.min()),
        float(alpha.max()),
        math.exp(fit.levels[i]),
    )


COARSE = 8  # a bootstrap draw searches every 8th lattice point each way, then the fine points around the best


class Curve3Draws:
    """The three-parameter curve's critical batch of bootstrap draws of one arm's reruns, fast: the shapes of
    every rerun computed once; a draw's least squares on the coarse sub-lattice, then on the fine lattice within
    one coarse step of its best point (the same lattice as curve3's, so a draw of every rerun once is its point)."""

    def __init__(self, grid: CurveGrid, r: Readings):
        self.grid, self.r = grid, r
        nb, na = grid.shape
        self.index = np.arange(nb * na).reshape(nb, na)
        self.coarse = self.index[::COARSE, ::COARSE].ravel()
        self.shape = shape3(grid, r.batches)

    def critical(self, draw: np.ndarray) -> float:
        """The critical batch of the reruns at positions `draw` (with repeats), nan with fewer than 3 batches."""
        r = Readings(*(v[draw] for v in self.r))
        if len(set(r.batches[r.reached])) < 3:
            return math.nan
        best = self.coarse[int(np.argmin(least_squares(self.shape[np.ix_(self.coarse, draw)], r, 3).rss))]
        ib, ia = divmod(int(best), self.grid.shape[1])
        near = self.index[max(ib - COARSE, 0) : ib + COARSE + 1, max(ia - COARSE, 0) : ia + COARSE + 1].ravel()
        return float(self.grid.critical[near[int(np.argmin(least_squares(self.shape[np.ix_(near, draw)], r, 3).rss))]])


# --- alpha = 1 tested on the batch means


class AlphaTest(NamedTuple):
    alpha: float  # the batch means' three-parameter fit
    f: float
    p: float  # F(1, n - 3)
    batches: int  # the batches whose means entered (a batch whose median missed does not)


def batch_means(r: Readings) -> tuple[np.ndarray, np.ndarray]:
    """Per batch (ascending) its reruns' mean log steps, or the log of their median where a rerun missed (a miss
    ranks above every reached rerun); a batch whose median missed is left out."""
    out = []
    for b in np.unique(r.batches):
        at = r.batches == b
        if r.reached[at].all():
            out.append((b, float(np.log(r.middle[at]).mean())))
        else:
            m = np.median(np.where(r.reached[at], r.middle[at], np.inf))
            if math.isfinite(m):
                out.append((b, math.log(m)))
    return np.array([b for b, _ in out]), np.array([v for _, v in out])


def _means_rss(log_b: np.ndarray, y: np.ndarray, log_noise: float, alpha: float) -> float:
    shape = np.logaddexp(0, alpha * (log_noise - log_b))
    resid = y - shape
    return float(((resid - resid.mean()) ** 2).sum())


def alpha_test(batches, steps, ran, grids) -> AlphaTest:
    """The F test of alpha = 1 (the two-parameter curve) against a free alpha, on the batch means (module
    docstring); each curve fitted by a grid search refined by Nelder-Mead in log B_noise (and log alpha)."""
    from scipy import optimize, stats

    b, y = batch_means(readings(batches, steps, ran, grids))
    n = len(b)
    if n < 4:
        return AlphaTest(math.nan, math.nan, math.nan, n)
    lb, grid = np.log(b), np.log(lattice(b, 1 / 64))
    start2 = min(grid, key=lambda v: _means_rss(lb, y, v, 1.0))
    two = optimize.minimize(lambda p: _means_rss(lb, y, p[0], 1.0), [start2], method="Nelder-Mead")
    starts = [(v, math.log(a)) for v in grid[::4] for a in ALPHAS[::8]]
    start3 = min(starts, key=lambda p: _means_rss(lb, y, p[0], math.exp(p[1])))
    three = optimize.minimize(
        lambda p: _means_rss(lb, y, p[0], math.exp(p[1])),
        start3,
        method="Nelder-Mead",
        options={"xatol": 1e-8, "fatol": 1e-14, "maxiter": 4000},
    )
    rss2, rss3 = min(float(two.fun), _means_rss(lb, y, start2, 1.0)), float(three.fun)
    f = (rss2 - rss3) / (rss3 / (n - 3)) if rss3 > 0 else math.inf
    return AlphaTest(math.exp(three.x[1]), f, float(stats.f.sf(f, 1, n - 3)), n)
