"""The critical batch along training, measured by branching from one small-batch run (`bench branch`,
bench/branch.py; Merrill et al. 2025, "Critical Batch Size Revisited", arXiv 2505.23971): the criterion and
`bench table branching`.

A reference run at B0 keeps checkpoints at declared images seen c; a branch at k x B0 starts from one with the
reference's state and runs up to c + 2Δ. For a window Δ:

- the reference's progress at c + Δ is its metric there (the EMA'd val Top-1, or the training loss), read
  linearly between the two evaluations that bracket c + Δ (`value_at`);
- the branch's images needed are the images after c at which its own curve first reaches that value, read
  linearly between its two evaluations that bracket the crossing, its curve starting at c with the reference's
  value there (the same weights); a branch that does not reach it by c + 2Δ needed more than 2Δ (∞, a miss:
  `images_needed`);
- images / linear = images needed / Δ (1: the k-fold batch made k-fold progress a step; 2: the cap);
- the critical batch at c is where images / linear first passes 1.2 (critical.EXCESS, the field study's 20% rule,
  locally), interpolated in log images / linear against log batch between the two batches that bracket it, the
  reference's own batch at 1 (critical.crossing, the model-free estimate of `bench table scaling`): from the
  seeds' median images / linear at each k, and each seed's own for the range shown beside it.

Choices where the papers are silent, named: the seeds' range (min, max of each seed's crossing) stands beside
the median's crossing, not a confidence interval (2-3 branch seeds); a run's curve keeps only the evaluations on
the number of validation images most of the reference's evaluations used (eval.curve_images: a subset before
the last, every image at the last), so one curve never mixes two validation sets.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis import critical
from bench.analysis.render import Cell, Table, cell, claim
from bench.analysis.results import Study

METRICS = {"val_top1": "EMA'd val Top-1", "train_loss": "training loss"}  # the metric a branch file names
LOWER_IS_BETTER = {"val_top1": False, "train_loss": True}


FINISHED = ("completed", "diverged")  # run statuses whose curves are whole


def value_at(images: np.ndarray, values: np.ndarray, at: float) -> float:
    """A curve's value at `at` images seen, linear between the two evaluations that bracket it (nan outside)."""
    images, values = np.asarray(images, float), np.asarray(values, float)
    if not len(images) or at < images[0] or at > images[-1]:
        return math.nan
    return float(np.interp(at, images, values))


def images_needed(
    images: np.ndarray, values: np.ndarray, start: float, start_value: float, target: float, lower: bool, cap: float
) -> float:
    """Images after `start` at which a curve (evaluations at `images`, starting from `start_value` at `start`)
    first reaches `target` (at or below it where `lower`), linear between the evaluations that bracket the
    crossing; ∞ where it does not by start + cap."""
    x = np.concatenate([[start], np.asarray(images, float)])
    y = np.concatenate([[start_value], np.asarray(values, float)])
    sign = -1.0 if lower else 1.0
    reached = np.flatnonzero(sign * y >= sign * target)
    if not len(reached):
        return math.inf
    i = int(reached[0])
    if i == 0:
        return 0.0
    fraction = (target - y[i - 1]) / (y[i] - y[i - 1])
    needed = x[i - 1] + fraction * (x[i] - x[i - 1]) - start
    return float(needed) if needed <= cap + 1e-9 else math.inf


def critical_batch(b0: int, ks, ratios) -> float:
    """Where images / linear (`ratios` at k x b0, ks ascending, k > 1) first passes critical.EXCESS, the reference
    at b0 at 1: critical.crossing's interpolation in log-log; ∞ above the largest batch; the batch below a miss."""
    ks = np.asarray(ks, float)
    ratios = np.asarray(ratios, float)
    batches = np.concatenate([[b0], b0 * ks])
    steps = np.concatenate([[1.0], ratios / ks])  # steps in units of the reference's over the window
    return critical.crossing(batches, steps)


@dataclass(frozen=True)
class Window:
    """One (arm, point, Δ): the reference's figures there, and each k's images / linear per seed."""

    arm: str
    optimizer: str
    b0: int
    point: int
    delta: int
    metric: str
    reference_top1: float
    target: float
    ratios: dict  # k -> {seed: images / linear}
    waiting: bool = False  # some k or seed of the tree has no finished branch here yet: no critical batch read

    @property
    def ks(self) -> list[int]:
        return sorted(k for k in self.ratios if k > 1)

    def median(self, k: int) -> float:
        return float(np.median(list(self.ratios[k].values())))

    @property
    def readable(self) -> bool:
        """Whether the reference's curve reaches the window's end (on the images its evaluations mostly used)."""
        return math.isfinite(self.target)

    def critical(self) -> float:
        if self.waiting or not self.ks or not self.readable:
            return math.nan
        return critical_batch(self.b0, self.ks, [self.median(k) for k in self.ks])

    def seed_range(self) -> tuple[float, float] | None:
        if self.waiting or not self.readable:
            return None
        seeds = sorted(set.intersection(*(set(self.ratios[k]) for k in self.ks))) if self.ks else []
        found = [critical_batch(self.b0, self.ks, [self.ratios[k][s] for k in self.ks]) for s in seeds]
        return (min(found), max(found)) if len(found) > 1 else None


def _curve(record, metric: str, val_images: float | None) -> tuple[np.ndarray, np.ndarray]:
    m = record.metrics
    if val_images is not None and "val_images" in m and m["val_images"].notna().any():
        m = m[m["val_images"] == val_images]
    m = m[m[metric].notna()]
    return m["images_seen"].to_numpy(float), m[metric].to_numpy(float)


def _common_val_images(record) -> float | None:
    counts = record.metrics.get("val_images")
    if counts is None or counts.dropna().empty:
        return None
    return float(counts.dropna().mode().iloc[0])


def windows(study: Study) -> list[Window]:
    """Every (arm, point, Δ) of the branch runs in `study`, each read against the reference it branched from; only
    finished runs count (a branch still running has not yet reached what it will), and a window that lacks a
    finished branch at some k or seed another window of its file has is `waiting`."""
    records = sorted(study.records.values(), key=lambda r: r.meta.get("end_time") or "")  # a rerun of a seed: last
    records = [r for r in records if r.meta.get("status") in FINISHED]
    tags = {str(r.path): r.recipe.get("tags") or {} for r in records}
    refs = {_place(r.path): r for r in records if tags[str(r.path)].get("role") == "branch_reference"}
    grouped: dict[tuple, list] = {}
    for r in records:
        t = tags[str(r.path)]
        ref = refs.get(_place(Path((r.meta.get("branched_from") or {}).get("checkpoint", "")).parent))
        if t.get("role") == "branch" and ref is not None:
            grouped.setdefault((t["branching"], t["arm"], int(t["point"]), _place(ref.path)), []).append(r)
    out = []
    for (name, arm, point, place), runs in sorted(grouped.items()):
        first = tags[str(runs[0].path)]
        metric, deltas = str(first["metric"]), [int(d) for d in str(first["deltas"]).split(",")]
        out += [(name, _window(refs[place], runs, tags, arm, point, delta, metric)) for delta in deltas]
    declared = {}  # file -> its ks and seeds, as its finished branches show them
    for name, w in out:
        ks, seeds = declared.setdefault(name, (set(), set()))
        ks.update(w.ratios)
        seeds.update(s for by_seed in w.ratios.values() for s in by_seed)
    return [
        dataclasses.replace(w, waiting=any(set(w.ratios.get(k, ())) != declared[name][1] for k in declared[name][0]))
        for name, w in out
    ]


def _place(run: Path) -> tuple[str, str]:
    """A run directory by its recipe's folder and its own (a tree moved or cloned elsewhere keeps both)."""
    return Path(run).parent.name, Path(run).name


def _window(ref, runs, tags, arm: str, point: int, delta: int, metric: str) -> Window:
    val_images = _common_val_images(ref)
    x, y = _curve(ref, metric, val_images)
    tx, ty = _curve(ref, "val_top1", val_images)
    start, target = value_at(x, y, point), value_at(x, y, point + delta)
    ratios: dict[int, dict[int, float]] = {}
    for r in runs:
        t = tags[str(r.path)]
        bx, by = _curve(r, metric, val_images)
        needed = images_needed(bx, by, point, start, target, LOWER_IS_BETTER[metric], 2 * delta)
        ratios.setdefault(int(t["k"]), {})[int(r.recipe["seed"])] = (
            needed / delta if math.isfinite(target) else math.nan
        )
    return Window(
        arm=arm,
        optimizer=ref.recipe["optimizer"]["name"],
        b0=int(ref.batch),
        point=point,
        delta=delta,
        metric=metric,
        reference_top1=value_at(tx, ty, point),
        target=target,
        ratios=ratios,
    )


def _ratio_cell(w: Window, k: int) -> Cell:
    if k not in w.ratios:
        return cell(None, "ratio")
    value, n = w.median(k), len(w.ratios[k])
    if math.isinf(value):
        return Cell(None, note="> 2 (missed)", kind="ratio", n=n)
    return Cell(value, kind="ratio", n=n)


def branching(study: Study, baseline: str | None = None) -> Table:
    """`bench table branching`: per arm, point and window, the reference's Top-1 there, each k's images / linear
    (the seeds' median), the critical batch with the seeds' range, and what the numbers say in words."""
    found = windows(study)
    ks = sorted({k for w in found for k in w.ratios})
    table = Table(
        title="The critical batch along training, by branching from one small-batch run",
        columns=["arm", "images seen", "ref. Top-1", "Δ (images)", *[f"k={k} img/lin" for k in ks], "critical batch"],
        keys=2,
    )
    for w in found:
        span = w.seed_range()
        crit = w.critical()
        crit_cell = (
            Cell(crit, kind="images", ci=span, note="seeds' range" if span else "")
            if not math.isnan(crit)
            else Cell(None, kind="images", note=_why_none(w))
        )
        table.rows.append(
            [
                w.arm,
                cell(w.point, "images"),
                cell(w.reference_top1, "pct"),
                cell(w.delta, "images"),
                *[_ratio_cell(w, k) for k in ks],
                crit_cell,
            ]
        )
    table.notes = _notes(found)
    table.claims = _claims(found)
    return table


def _notes(found: list[Window]) -> list[str]:
    if not found:
        return ["No branch runs here (`bench branch FILE --out DIR` makes them)."]
    metric = METRICS[found[0].metric]
    return [
        f"A branch at k x B0 starts from the reference's checkpoint at 'images seen' (weights, optimizer state, EMA, "
        f"data position) and runs until its {metric} reaches the reference's at images seen + Δ, capped at 2Δ; "
        "images / linear = its images needed over Δ (the seeds' median; n seeds).",
        f"Critical batch: where images / linear first passes {critical.EXCESS:g}, interpolated on log batch between "
        "the bracketing batches (B0 at 1); ∞: no k passes it; beside it the range of each seed's own crossing.",
    ]


def _why_none(w: Window) -> str:
    """Why a window reads no critical batch."""
    if not w.readable:  # e.g. its evaluations switched to every image past the target (eval.curve_images)
        return "the reference's curve ends before the window's end"
    return "waiting for branches" if w.waiting else ""


def _claims(found: list[Window]) -> list[str]:
    out = []
    by_arm_delta: dict[tuple, list[Window]] = {}
    for w in found:
        by_arm_delta.setdefault((w.arm, w.delta), []).append(w)
    for (arm, delta), ws in by_arm_delta.items():
        ws = sorted(ws, key=lambda w: w.point)
        crits = [w.critical() for w in ws]
        said = ", ".join(f"{_batch(c)} at {w.point:,} images" for w, c in zip(ws, crits))
        out.append(claim(f"{arm}, Δ = {delta:,} images", f"the critical batch is {said}{_trend(crits)}"))
    deltas = sorted({w.delta for w in found})
    if len(deltas) > 1:
        for arm in dict.fromkeys(w.arm for w in found):
            out += _sensitivity(arm, [w for w in found if w.arm == arm], deltas)
    for arm in dict.fromkeys(w.arm for w in found):
        out += _schedule_claim(arm, [w for w in found if w.arm == arm])
    return out


def implied_schedule(ws: list[Window]) -> dict[int, int] | None:
    """The batch schedule an arm's windows imply, as adaptive_batch.by_images ({images: batch}): at each point the
    batch doubles from B0 while the measured critical batch passes it (the smallest over the Δs read there: the
    cautious one), capped at the largest branch batch where no k passed 1.2, and never falls (a batch warm-up);
    B0 before the first point, which no window measures. None while a window waits or no point is read."""
    if not ws or any(w.waiting for w in ws):
        return None
    b0, schedule, batch = ws[0].b0, {}, ws[0].b0
    for point in sorted({w.point for w in ws}):
        crits = [c for w in ws if w.point == point and not math.isnan(c := w.critical())]
        if not crits:
            continue
        largest = b0 * max(k for w in ws if w.point == point for k in w.ks)
        crit = min(min(crits), largest)
        while batch * 2 <= crit:
            batch *= 2
        if batch != (list(schedule.values()) or [b0])[-1]:
            schedule[point] = batch
    return schedule or None


def _schedule_claim(arm: str, ws: list[Window]) -> list[str]:
    schedule = implied_schedule(ws)
    if schedule is None:
        return []
    steps = ", ".join(f"{b:,} from {i:,} images" for i, b in schedule.items())
    keys = ", ".join(f"{i}: {b}" for i, b in schedule.items())
    said = f"{ws[0].b0} at first, then {steps} (adaptive_batch: {{by_images: {{{keys}}}}})"
    return [claim(f"{arm}, the batch schedule these windows imply", said)]


def _batch(value: float) -> str:
    if math.isnan(value):
        return "not measured"
    return "above the largest branch batch" if math.isinf(value) else f"{value:,.0f}"


def _trend(crits: list[float]) -> str:
    if len(crits) < 2 or any(math.isnan(c) for c in crits) or all(math.isinf(c) for c in crits):
        return ""
    if all(b > a for a, b in zip(crits, crits[1:])):
        return ": it grows along training"
    if all(b < a for a, b in zip(crits, crits[1:])):
        return ": it falls along training"
    return ": no steady trend along training"


def _sensitivity(arm: str, ws: list[Window], deltas: list[int]) -> list[str]:
    """How much the answer moves with Δ: the critical batch at the largest Δ over the smallest's, per point."""
    out = []
    for point in sorted({w.point for w in ws}):
        at = {w.delta: w.critical() for w in ws if w.point == point}
        lo, hi = at.get(deltas[0], math.nan), at.get(deltas[-1], math.nan)
        if math.isfinite(lo) and math.isfinite(hi):
            said = f"Δ = {deltas[-1]:,} gives {hi / lo:.2f} x the critical batch of Δ = {deltas[0]:,}"
        elif not (math.isnan(lo) or math.isnan(hi)) and lo != hi:
            said = f"Δ changes the answer: {_batch(lo)} at Δ = {deltas[0]:,}, {_batch(hi)} at Δ = {deltas[-1]:,}"
        else:
            continue
        out.append(claim(f"{arm} at {point:,} images", said))
    return out


def frame(study: Study) -> pd.DataFrame:
    """The windows as one row per (arm, point, Δ, k, seed): for a figure or a notebook."""
    rows = [
        {"arm": w.arm, "point": w.point, "delta": w.delta, "k": k, "seed": s, "images_over_linear": v}
        for w in windows(study)
        for k, by_seed in w.ratios.items()
        for s, v in by_seed.items()
    ]
    return pd.DataFrame(rows)
