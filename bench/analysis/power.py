"""What a comparison of reruns can say: intervals, p-values corrected for many comparisons, and the smallest
effect it could have detected (scipy.stats; no torch).

- `compare(x, y, seeds_x, seeds_y)`: mean(x) − mean(y) with its 95% interval and p-value. When the sides share
  at least 2 seeds (a sweep's reruns share seeds, hence initialisation and data order) the interval is the
  paired t interval of the per-seed differences over the shared seeds, which removes the noise the two arms
  share; otherwise Welch's (unequal variances). A missing value (NaN: a rerun that diverged, or one without a
  train-eval for the gap) leaves its seed out of the pairs rather than emptying the comparison: complete pairs
  only, so a seed one side lacks is not compared (its n says how many pairs).
- `mde(...)`: the minimum detectable effect, the smallest true difference the same test would declare at
  level alpha with the given power (default 80%), at the observed standard deviations and seeds. With
  se = sqrt(s_x²/n_x + s_y²/n_y) (Welch; df by Welch-Satterthwaite) or se = s_d/sqrt(n) (paired; df = n − 1),
  it solves  P(|T| > t_{1−α/2, df}) = power  for δ, T ~ noncentral t(df, δ/se); about
  (t_{1−α/2, df} + t_{power, df}) × se.
- `seeds_to_resolve(effect, ...)`: the fewest seeds per side whose MDE is at most `effect` at the same
  standard deviations.
- `family_alpha(alpha, m)`: the level Holm's first step applies to the smallest of m p-values, alpha / m: the
  level at which a family's MDE is honest (a difference must clear it to be declared at all).
- `sd_interval(df)`: the 95% interval, as factors of the observed value, of a noise estimated on df degrees of
  freedom (the sd of a comparison's per-seed differences, Welch's pooled se scaled to one seed, or a bootstrap's
  se over n seeds on n − 1), from the chi-square distribution of its variance; an MDE is proportional to it, so
  an MDE from 5 differences carries this interval too.
- `median_interval(values, confidence)`: the distribution-free interval of a median from two order statistics,
  [x_(r), x_(n+1−r)], with its exact coverage 1 − 2 P(Bin(n, ½) < r): the largest r whose coverage reaches
  `confidence`, or r = 1 (the smallest to the largest) when none does (n = 5: 93.75%, never 95%). A miss (∞)
  ranks above every finite value, so it needs no number.
- `ratio_interval(x, y, confidence)`: the ratio of X's values to Y's (steps to target) from the exact
  Mann-Whitney test inverted on log values (Hodges-Lehmann): the point is the median of the n·m pairwise ratios
  x_i / y_j, the interval their k-th smallest to k-th largest, k the largest with 2 P(U < k) ≤ 1 − confidence
  under the exact null distribution of U; its exact coverage is 1 − 2 P(U < k) (5 vs 5: 99.21% for 99%, 96.83%
  for 95%); where no k reaches `confidence`, the smallest to the largest ratio, whose coverage 1 − 2 / C(n+m, n)
  is the most n vs m values give (2 vs 2: 66.67%; `ratio_seeds`: the fewest a side that reach a level).
  Distribution-free under a shift of log values, no generator, no dependence on the runs' order; ties (an
  evaluation grid) make the closed interval cover at least as often. A miss is ∞: against a finite
  value its ratio is ±∞, and two misses could stand either way, so their pair counts as −∞ for the lower end and
  +∞ for the upper (the interval can only widen).
- `holm(p)`: Holm's step-down adjustment (family-wise error at most alpha, any dependence between tests).
- `pooled(comparisons)`: the average of several paired differences (one pair of arms at several batches) with
  the pooled standard deviation of the per-seed differences: s_p² = Σ (n_b − 1) s_b² / Σ (n_b − 1),
  se = s_p sqrt(Σ 1/n_b) / B, df = Σ (n_b − 1). It assumes the differences are equally noisy at every batch
  and asks another question (the average effect over the batches), so it is reported beside the declared
  per-batch family, not in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True)
class Comparison:
    diff: float
    low: float
    high: float
    p: float
    test: str  # "paired" or "Welch"
    df: float
    se: float
    n: int  # seeds per side (paired: pairs; Welch: the smaller side)


def mean_interval(values, confidence: float = 1 - ALPHA, shared_var: float = 0.0) -> tuple[float, float, float] | None:
    """The mean of `values` with its t interval at `confidence` (mean, low, high); None with fewer than 2.
    `shared_var`: the variance of an error every value shares, which their spread cannot show (the sampling of the
    fixed image sets every seed is scored on): added to the mean's, with Welch-Satterthwaite's df (the shared part
    taken as known); 0 gives the plain t interval (df n - 1)."""
    from scipy import stats

    v = np.asarray(values, float)
    if len(v) < 2:
        return None
    n, var = len(v), float(v.var(ddof=1))
    total = var + n * shared_var  # n x the mean's variance
    df = (n - 1) * (total / var) ** 2 if var > 0 else math.inf
    mean, half = float(v.mean()), stats.t.ppf(0.5 + confidence / 2, df) * math.sqrt(total) / math.sqrt(n)
    return mean, mean - half, mean + half


def _welch_df(vx: float, nx: int, vy: float, ny: int) -> float:
    a, b = vx / nx, vy / ny
    return (a + b) ** 2 / (a**2 / (nx - 1) + b**2 / (ny - 1))


def compare(x, y, seeds_x=None, seeds_y=None, alpha: float = ALPHA) -> Comparison | None:
    """x − y with its interval and p (paired over the seeds both sides have, when at least 2; missing values
    dropped with their seeds); None when it cannot be computed (fewer than 2 values a side, or no spread)."""
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    keep_x, keep_y = np.isfinite(x), np.isfinite(y)
    x, y = x[keep_x], y[keep_y]
    if len(x) < 2 or len(y) < 2:
        return None
    se = 0.0
    if seeds_x is not None and seeds_y is not None:
        sx, sy = np.asarray(seeds_x)[keep_x], np.asarray(seeds_y)[keep_y]
        shared = sorted(set(sx) & set(sy))
        if len(set(sx)) == len(sx) and len(set(sy)) == len(sy) and len(shared) >= 2:
            by_x, by_y = dict(zip(sx, x)), dict(zip(sy, y))
            d = np.array([by_x[s] - by_y[s] for s in shared])
            se, df = d.std(ddof=1) / math.sqrt(len(d)), len(d) - 1
            test, n, diff = "paired", len(d), float(d.mean())
    if se == 0:  # not paired, or differences without spread (too few seeds to see any): Welch's
        diff, vx, vy = float(x.mean() - y.mean()), x.var(ddof=1), y.var(ddof=1)
        se = math.sqrt(vx / len(x) + vy / len(y))
        df = _welch_df(vx, len(x), vy, len(y)) if se > 0 else len(x) + len(y) - 2
        test, n = "Welch", min(len(x), len(y))
    if se == 0:
        return None
    t = stats.t.ppf(1 - alpha / 2, df)
    p = float(2 * stats.t.sf(abs(diff) / se, df))
    return Comparison(diff, diff - t * se, diff + t * se, p, test, float(df), float(se), n)


def pooled(comparisons: list[Comparison], alpha: float = ALPHA) -> Comparison | None:
    """The mean of paired differences over cells, with the pooled sd of the differences (module docstring); None
    unless every comparison is paired."""
    from scipy import stats

    if not comparisons or any(c is None or c.test != "paired" for c in comparisons):
        return None
    dfs = [c.n - 1 for c in comparisons]
    variance = sum(df * (c.se**2 * c.n) for df, c in zip(dfs, comparisons)) / sum(dfs)  # pooled s_d²
    b = len(comparisons)
    se = math.sqrt(variance * sum(1 / c.n for c in comparisons)) / b
    df = float(sum(dfs))
    diff = float(np.mean([c.diff for c in comparisons]))
    t = stats.t.ppf(1 - alpha / 2, df)
    p = float(2 * stats.t.sf(abs(diff) / se, df))
    return Comparison(
        diff, diff - t * se, diff + t * se, p, f"paired, pooled over {b}", df, float(se), sum(c.n for c in comparisons)
    )


def detection_power(effect: float, se: float, df: float, alpha: float = ALPHA) -> float:
    """Probability that the two-sided t test at level alpha declares a true difference `effect` with standard
    error `se` and `df` degrees of freedom (noncentral t)."""
    from scipy import stats

    t = stats.t.ppf(1 - alpha / 2, df)
    nc = effect / se
    wrong_side = stats.nct.cdf(-t, df, nc)  # scipy returns NaN where it underflows: it is then ~0
    return float(stats.nct.sf(t, df, nc) + (0.0 if math.isnan(wrong_side) else wrong_side))


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference detected with `power` by the test of standard error `se` and `df`."""
    from scipy import stats
    from scipy.optimize import brentq

    if not (se > 0 and df > 0):
        return math.nan
    high = (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(0.9999, df)) * se  # power there is at least 0.9999
    return float(brentq(lambda d: detection_power(d, se, df, alpha) - power, 0.0, high))


def comparison_mde(c: Comparison, alpha: float = ALPHA, power: float = POWER) -> float:
    """The MDE of comparison `c`'s test at level `alpha` (a family's: family_alpha)."""
    return mde(c.se, c.df, alpha, power)


def seeds_to_resolve(
    effect: float, c: Comparison, sd_x: float, sd_y: float, alpha: float = ALPHA, power: float = POWER, most: int = 1000
) -> int | None:
    """The fewest seeds per side at which the same test would detect `effect` with `power`, at the observed
    standard deviations (paired: of the differences); None when even `most` would not. The MDE falls as n grows
    (a smaller standard error on more degrees of freedom), so a bisection finds n in ~10 MDEs, not up to `most`."""
    sd_d = c.se * math.sqrt(c.n)  # paired: the sd of the per-seed differences

    def detects(n: int) -> bool:
        if c.test == "paired":
            se, df = sd_d / math.sqrt(n), n - 1
        else:
            se = math.sqrt((sd_x**2 + sd_y**2) / n)
            df = _welch_df(sd_x**2, n, sd_y**2, n) if se > 0 else 2 * n - 2
        return mde(se, df, alpha, power) <= effect

    if not detects(most):
        return None
    missed, enough = 1, most  # one seed a side has no test
    while enough - missed > 1:
        n = (missed + enough) // 2
        missed, enough = (missed, n) if detects(n) else (n, enough)
    return enough


def family_alpha(m: int, alpha: float = ALPHA) -> float:
    """The level of Holm's first (strictest) step over m tests: alpha / m (alpha itself for one test or none)."""
    return alpha / max(m, 1)


def sd_interval(df: float, confidence: float = 1 - ALPHA) -> tuple[float, float]:
    """The factors (low, high) by which the true noise may differ from one observed on `df` degrees of freedom, at
    `confidence` (chi-square on df); an MDE's interval is the MDE times them."""
    from scipy import stats

    tail = (1 - confidence) / 2
    return (math.sqrt(df / stats.chi2.ppf(1 - tail, df)), math.sqrt(df / stats.chi2.ppf(tail, df)))


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (NaN stays NaN and counts as no test)."""
    p = [(v, i) for i, v in enumerate(pvalues) if v == v]
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, (v, i) in enumerate(sorted(p)):
        running = max(running, min(1.0, (len(p) - rank) * v))
        adjusted[i] = running
    return adjusted


def coverage_text(coverage: float) -> str:
    """An exact coverage as a table prints it: 0.9375 -> '93.75%', 0.99206 -> '99.21%', 0.95 -> '95%'."""
    return f"{100 * coverage:.2f}".rstrip("0").rstrip(".") + "%"


def median_interval(values, confidence: float = 1 - ALPHA) -> tuple[float, float, float] | None:
    """(low, high, exact coverage) of the median of `values` from order statistics (module docstring); None for
    fewer than 2 values."""
    from scipy import stats

    v = np.sort(np.asarray(values, float))
    n = len(v)
    if n < 2:
        return None
    r = np.arange(1, n // 2 + 1)
    coverage = 1 - 2 * stats.binom.cdf(r - 1, n, 0.5)  # of [x_(r), x_(n+1-r)], falling with r
    i = max(int(np.sum(coverage >= confidence - 1e-12)) - 1, 0)
    return float(v[i]), float(v[n - 1 - i]), float(coverage[i])


def mann_whitney_counts(n: int, m: int) -> np.ndarray:
    """How many of the C(n+m, n) orderings of n X's and m Y's give U = 0, 1, ..., n m (U: pairs with x > y)."""
    counts = np.zeros((n + 1, m + 1, n * m + 1))
    counts[0, :, 0] = counts[:, 0, 0] = 1
    for i in range(1, n + 1):
        for j in range(1, m + 1):  # the largest value is an X (adds j pairs) or a Y
            counts[i, j, j:] += counts[i - 1, j, : n * m + 1 - j]
            counts[i, j] += counts[i, j - 1]
    return counts[n, m]


def ratio_level(n: int, m: int, confidence: float) -> tuple[int, float]:
    """(k, exact coverage) of ratio_interval's interval for n vs m values: k the largest with 2 P(U < k) ≤ 1 −
    confidence, at least 1 (the smallest to the largest ratio: coverage 1 − 2 / C(n+m, n), the most n vs m can
    reach, short of `confidence` where they are too few: 2 vs 2, 66.67%)."""
    tail = np.cumsum(mann_whitney_counts(n, m)) / math.comb(n + m, n)  # P(U <= u)
    k = max(int(np.sum(2 * tail <= 1 - confidence + 1e-12)), 1)  # P(U < k) = tail[k - 1]
    return k, float(1 - 2 * tail[k - 1])


def ratio_seeds(confidence: float) -> tuple[int, float]:
    """The fewest values a side (n vs n) whose ratio interval reaches `confidence` (< 1), with the coverage it
    attains there: 95%: 4 vs 4, 97.14%; 99%: 5 vs 5, 99.21%."""
    n = 2
    while (coverage := ratio_level(n, n, confidence)[1]) < confidence - 1e-12:
        n += 1
    return n, coverage


class Ratio(NamedTuple):
    """X / Y by Hodges-Lehmann with its exact Mann-Whitney interval (ratio_interval): point NaN when the misses
    leave the median pairwise ratio undetermined."""

    point: float
    low: float
    high: float
    coverage: float


def ratio_interval(x, y, confidence: float = 1 - ALPHA) -> Ratio | None:
    """X / Y with its distribution-free interval (module docstring); None for fewer than 2 values a side."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n, m = len(x), len(y)
    if n < 2 or m < 2:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.divide.outer(x, y).ravel()  # x_i / y_j; NaN where both are misses (∞ / ∞)
    low_ends, high_ends = np.sort(np.nan_to_num(d, nan=0.0)), np.sort(np.nan_to_num(d, nan=np.inf, posinf=np.inf))
    k, coverage = ratio_level(n, m, confidence)
    middle = [np.median(low_ends), np.median(high_ends)]
    point = float(middle[0]) if middle[0] == middle[1] else math.nan
    return Ratio(point, float(low_ends[k - 1]), float(high_ends[n * m - k]), float(coverage))
