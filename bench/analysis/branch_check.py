"""`bench table ladder-check BRANCH_DIR LADDER_DIR`: the branching windows (bench/analysis/branching.py) checked
against a batch ladder's reruns (bench sweep), issue 84's test of the local measurement.

Local recovery: a run at k x B0 from initialisation is the branches' windows end to end. Each window's images /
linear (the seeds' median, and each seed's) stands for the stretch of training from its point to the next point (the
first from 0, which no window measures, the last to the reference's images to target), so the run needs

    images(k) = sum over the stretches of (images / linear at k) x (the stretch's images)

to reach the target the reference reached at its images to target; its steps are images(k) / (k x B0), against the
ladder's reruns' median steps at k x B0 with their exact interval (the scaling table's). k = 1 is the reference
itself. Choices where the issue is silent, named: a window the reference's curve cannot read (its evaluations
changed validation set before the window's end) lends its stretch the previous point's ratio, and says so; a seed
that missed a window (> 2Δ) makes its prediction a lower bound.
"""

from __future__ import annotations

import math

import numpy as np

from bench.analysis import branching
from bench.analysis.cells import cells, median_steps, median_steps_ci
from bench.analysis.pairs import median_level
from bench.analysis.render import Cell, Table, cell, claim
from bench.analysis.results import Study
from bench.analysis.scaling import ladder_fits
from bench.errors import UserError

HOUR = 3600.0


def chained_images(points: list[int], ratios: list[float], total: float) -> float:
    """Images to `total` of the reference's progress at the windows' ratios, each over its point's stretch."""
    bounds = [0, *points[1:], math.inf]
    stretches = [(r, min(total, hi) - lo) for r, lo, hi in zip(ratios, bounds[:-1], bounds[1:])]
    return float(sum(r * length for r, length in stretches if length > 0))  # past the target: no stretch, not inf x 0


def _stretch_ratios(ws: list[branching.Window], k: int, seed: int | None) -> tuple[list[float], list[int]] | None:
    """Each point's images / linear at k (a seed's, or the seeds' median), an unreadable window's from the point
    before (its point listed second); None where the first window is unreadable or k was not branched."""
    out, carried = [], []
    for w in ws:
        if w.readable and k in w.ratios and (seed is None or seed in w.ratios[k]):
            out.append(w.median(k) if seed is None else w.ratios[k][seed])
        elif out:
            out.append(out[-1])
            carried.append(w.point)
        else:
            return None
    return out, carried


def _reference_images(study: Study, arm: str) -> tuple[float, int]:
    """The arm's reference run: its images to the target (first evaluation at or above it) and its batch."""
    for r in study.records.values():
        tags = r.recipe.get("tags") or {}
        if tags.get("role") == "branch_reference" and tags.get("arm") == arm:
            row = study.runs[study.runs["run"] == str(r.path)]
            images = float(row["images_to_target"].iloc[0]) if len(row) else math.nan
            return images, int(r.batch)
    return math.nan, 0


def _hours(runs) -> float:
    """The runs' own time: a branch's timers carry on from its reference's at the checkpoint (branched_from), which
    the reference's run already counts."""

    def own(meta: dict) -> float:
        carried = meta.get("branched_from") or {}
        spent = (meta.get("train_time_s") or 0.0) + (meta.get("eval_time_s") or 0.0)
        return spent - (carried.get("train_time_s") or 0.0) - (carried.get("eval_time_s") or 0.0)

    return sum(own(r.meta) for r in runs) / HOUR


def ladder_check(study: Study, baseline: str | None = None) -> Table:
    """Per arm and Δ, each ladder batch's steps to target predicted by chaining the windows, against the ladder's
    reruns; the ladder's critical batch against the windows'; the cost of each, in process-hours."""
    found = [w for w in branching.windows(study) if not w.waiting]
    table = Table(
        title="The branching windows checked against the batch ladder: steps to target, predicted and run",
        columns=["arm", "Δ (images)", "batch", "predicted steps", "ladder steps (reruns' median)", "check"],
        keys=3,
    )
    if not found:
        table.notes = ["No finished branch windows here (`bench branch FILE --out DIR` makes them)."]
        return table
    if study.runs["role"].isin(["rerun"]).sum() == 0:
        raise UserError(
            "ladder-check reads a branch tree and the ladder it is checked against together: "
            "bench table ladder-check BRANCH_DIR LADDER_DIR (bench branch made the first, bench sweep the second)"
        )
    ladder = cells(study)
    fits = ladder_fits(ladder)
    claims = []
    for arm in dict.fromkeys(w.arm for w in found):
        rungs = ladder[ladder["arm"] == arm].sort_values("global_batch")
        if not len(rungs):
            continue
        total, b0 = _reference_images(study, arm)
        for delta in sorted({w.delta for w in found if w.arm == arm}):
            ws = sorted((w for w in found if w.arm == arm and w.delta == delta), key=lambda w: w.point)
            words = {}
            for _, rung in rungs.iterrows():
                row, word = _row(arm, delta, ws, rung, total, b0)
                table.rows.append(row)
                words.setdefault(word, []).append(int(rung["global_batch"]))
            claims.append(claim(f"{arm}, Δ = {delta:,} images", _check_words(words)))
        claims += _critical_claims(arm, [w for w in found if w.arm == arm], fits.get(arm))
        branch_runs = [
            r
            for r in study.records.values()
            if (r.recipe.get("tags") or {}).get("arm") == arm
            and (r.recipe.get("tags") or {}).get("role", "").startswith("branch")
        ]
        ladder_runs = [r for r in study.records.values() if _ladder_arm(r) == arm]
        cost, full = _hours(branch_runs), _hours(ladder_runs)
        if full > 0:
            claims.append(
                claim(
                    f"{arm}, cost",
                    f"{cost:.2f} process-hours of branching against {full:.2f} for the ladder's runs of this arm "
                    f"({cost / full:.2f} x)",
                )
            )
    table.notes = NOTES
    table.claims = claims
    return table


def _ladder_arm(r) -> str | None:
    tags = r.recipe.get("tags") or {}
    return tags.get("arm") if tags.get("role") in ("trial", "local", "rerun", "rerun_top", "matched") else None


def _row(arm: str, delta: int, ws, rung, total: float, b0: int) -> tuple[list, str]:
    """A ladder batch's row and its check word."""
    batch = int(rung["global_batch"])
    steps = np.asarray(rung["rerun_steps"], float)
    ci = median_steps_ci(steps)
    ladder_cell = Cell(
        median_steps(steps), kind="steps", ci=ci[:2] if ci else None, note=median_level(ci) if ci else ""
    )
    predicted, word = _prediction(ws, batch // b0 if b0 and batch % b0 == 0 else 0, total, batch)
    if word is None:
        word = _word(predicted.value, ci)
    return [arm, cell(delta, "images"), batch, predicted, ladder_cell, word], word


def _prediction(ws, k: int, total: float, batch: int) -> tuple[Cell, str | None]:
    """The chained steps at k x B0 with the seeds' range, or why there are none (its word then)."""
    if k == 1 and math.isfinite(total):
        return Cell(total / batch, kind="steps", note="the reference"), None
    median = _stretch_ratios(ws, k, None) if k > 1 and math.isfinite(total) else None
    if median is None:
        return Cell(None, kind="steps", note="not branched"), "not branched"
    points, (ratios, carried) = [w.point for w in ws], median
    predicted = chained_images(points, ratios, total) / batch
    if math.isinf(predicted):
        return Cell(None, kind="steps", note="a window missed (> 2Δ)"), "missed"
    seeds = sorted(set.intersection(*(set(w.ratios.get(k, {})) for w in ws if w.readable)))
    per_seed = [chained_images(points, s[0], total) / batch for s in (_stretch_ratios(ws, k, x) for x in seeds) if s]
    span = (min(per_seed), max(per_seed)) if len(per_seed) > 1 and all(map(math.isfinite, per_seed)) else None
    carried = [p for p in carried if p < total]  # a window after the reference's target lends no stretch
    notes = ["seeds' range" if span else "", f"{', '.join(f'{p:,}' for p in carried)} carried" if carried else ""]
    return Cell(predicted, kind="steps", ci=span, note=", ".join(filter(None, notes))), None


def _word(predicted: float, ci) -> str:
    if ci is None:
        return "no interval"
    if predicted < ci[0]:
        return "below"
    return "above" if predicted > ci[1] else "inside"


def _check_words(words: dict[str, list[int]]) -> str:
    checked = sum(len(v) for w, v in words.items() if w in ("inside", "below", "above"))
    parts = [f"inside the ladder's interval at {len(words.get('inside', []))} of {checked} batches"]
    for word in ("below", "above", "missed", "not branched", "no interval"):
        if words.get(word):
            parts.append(f"{word} at {', '.join(f'{b:,}' for b in words[word])}")
    return "; ".join(parts)


def _critical_claims(arm: str, ws: list[branching.Window], fit) -> list[str]:
    """Where along training the ladder's critical batch (its curve's) lies within a window's seeds' range."""
    if fit is None or not math.isfinite(fit.critical[0]):
        return []
    crit = fit.critical[0]
    agree = [
        f"{w.point:,} (Δ {w.delta:,})"
        for w in ws
        if (span := w.seed_range()) is not None and span[0] <= crit <= span[1]
    ]
    said = f"within the windows' seeds' range at {', '.join(agree)}" if agree else "outside every window's seeds' range"
    return [claim(f"{arm}, the ladder's critical batch {crit:,.0f} (by its curve)", said)]


NOTES = [
    "Predicted steps: the windows end to end (module bench/analysis/branch_check.py): each point's images / linear "
    "(the seeds' median) over its stretch of training, the first from 0 (no window measures it), the last to the "
    "reference's images to target, over k x B0; beside it the range of each seed's own prediction. 'carried': a "
    "window the reference's curve could not read lends its stretch the point before's ratio.",
    "Ladder steps: the reruns' median with its exact order-statistics interval (bench table scaling). check: "
    "'inside' where the prediction lies within that interval.",
    "The branches ran at the reference's lr x the branch file's rule, the ladder at each batch's tuned lr, each "
    "from its own warm-up: the check measures the local method against what a user would tune.",
]
