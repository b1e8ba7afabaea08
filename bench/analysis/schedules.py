"""`bench table schedules DIR`: runs that move their batch during training (a declared schedule, SimiGrad's
controller, AdaScale's gain) against each other and constant batches, in steps and in images to the target.

Each recipe is an arm, its runs the seeds. A row gives the arm's batches (the first step's, the largest of the
runs' last ones, the mean over steps), the runs that reached the target, and the seeds' median steps and images to
it with their exact order-statistics intervals. Each arm is then compared with the reference arm (the recipe whose
batch follows a declared schedule, adaptive_batch.by_images, else the first by name): the ratio X / reference
of steps and of images, from the seeds both reached (paired by seed: the arms share each seed's data order and
initialisation), a paired t interval on the log ratios at the Bonferroni level over the arms compared (1 - 0.05 / m),
the smallest ratio that test detects with 80% power there, and the word the interval allows. Fewer steps at more
images is the trade a user chooses; the table names both and ranks neither.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.analysis import power
from bench.analysis.cells import median_steps, median_steps_ci
from bench.analysis.pairs import median_level
from bench.analysis.render import Cell, Table, claim
from bench.analysis.results import Study
from bench.errors import UserError

COLUMNS = [
    "arm",
    "optimizer",
    "batch",
    "reached",
    "steps to target (median)",
    "images to target (median)",
    "steps / reference",
    "images / reference",
]


def schedules(study: Study, baseline: str | None = None) -> Table:
    """Each recipe's steps and images to the target, and each against the reference recipe, in words."""
    runs = study.runs[study.runs["role"].isna() & study.runs["finished"].astype(bool)]
    if not len(runs):
        raise UserError("no runs made by bench run or bench suite here (the schedules table compares recipes)")
    arms = list(dict.fromkeys(runs.sort_values("recipe")["recipe"]))
    reference = _reference(runs, arms)
    m = len(arms) - 1
    alpha = power.family_alpha(m)
    table = Table(title=f"Batch schedules against each other, in steps and images to {_target(runs)}", columns=COLUMNS)
    claims = []
    ref = runs[runs["recipe"] == reference]
    for arm in [reference, *(a for a in arms if a != reference)]:
        of = runs[runs["recipe"] == arm]
        ratios = [None, None] if arm == reference else [_ratio(of, ref, key, alpha) for key in KEYS]
        table.rows.append(_row(arm, of, ratios, arm == reference))
        if arm != reference:
            claims.append(
                claim(f"{arm} against {reference}", "; ".join(_words(k, r, arm, alpha) for k, r in zip(KEYS, ratios)))
            )
    table.notes = [
        "batch: the first step's, then the largest of the seeds' last batches and the mean batch over steps (a "
        "controller's batch may have passed its last one on the way; AdaScale's batch is fixed, its gain moves the "
        "schedule). Medians with their exact order-statistics interval (coverage beside).",
        f"X / reference: the seeds' geometric mean ratio, paired by seed, with its t interval on log ratios at "
        f"{100 * (1 - alpha):.4g}% (Bonferroni over {m} comparisons) and 'detects ≥ R x': the smallest ratio either "
        "way that test detects with 80% power at that level and the seeds' noise; seeds that missed the target are "
        "left out of the pair (see reached).",
    ]
    table.claims = claims
    return table


KEYS = ("steps_to_target", "images_to_target")


def _target(runs: pd.DataFrame) -> str:
    targets = sorted(set(runs["target_top1"].dropna()))
    return ", ".join(f"{t:g}%" for t in targets) + " val Top-1" if targets else "the target"


def _reference(runs: pd.DataFrame, arms: list[str]) -> str:
    scheduled = [a for a in arms if _declared(runs[runs["recipe"] == a])]
    return scheduled[0] if scheduled else arms[0]


def _declared(of: pd.DataFrame) -> bool:
    return bool(of["adaptive_batch"].any()) and not of["optimizer"].str.startswith("simigrad").any()


def _batch_text(of: pd.DataFrame) -> str:
    """The first step's batch, and where it moves the largest final batch of the seeds and their mean batch."""
    first = int(of["global_batch"].iloc[0])
    if not of["batch_varies"].astype(bool).any():
        return f"{first:,}"
    largest, mean = np.nanmax(of["final_batch"].astype(float)), np.nanmean(of["mean_batch"].astype(float))
    return f"{first:,} → {largest:,.0f} (mean {mean:,.0f})"


def _median_cell(values) -> Cell:
    v = np.asarray(values, float)
    ci = median_steps_ci(v)
    return Cell(median_steps(v), kind="steps", ci=ci[:2] if ci else None, note=median_level(ci) if ci else "")


def _ratio(of: pd.DataFrame, ref: pd.DataFrame, key: str, alpha: float) -> tuple[power.Comparison, float] | None:
    c = power.compare(np.log(of[key].astype(float)), np.log(ref[key].astype(float)), of["seed"], ref["seed"], alpha)
    return (c, power.comparison_mde(c, alpha)) if c is not None else None


def _ratio_cell(r) -> Cell:
    if r is None:
        return Cell(None, kind="ratio", note="too few seeds")
    c, detectable = r
    return Cell(
        math.exp(c.diff),
        kind="ratio",
        ci=(math.exp(c.low), math.exp(c.high)),
        note=f"detects ≥ {math.exp(detectable):.2f}x",
    )


def _row(arm: str, of: pd.DataFrame, ratios, is_reference: bool) -> list:
    reached = int(np.isfinite(of["steps_to_target"].astype(float)).sum())
    extra = [Cell(None, kind="ratio", note="reference")] * 2 if is_reference else [_ratio_cell(r) for r in ratios]
    return [
        arm,
        ", ".join(sorted(set(of["optimizer"]))),
        _batch_text(of),
        f"{reached}/{len(of)}",
        _median_cell(of["steps_to_target"]),
        _median_cell(of["images_to_target"]),
        *extra,
    ]


def _words(key: str, r, arm: str, alpha: float) -> str:
    """The claim of one ratio, with the coverage of its interval (the family's Bonferroni level)."""
    what = "steps" if key == "steps_to_target" else "images"
    if r is None:
        return f"{what}: too few seeds reached the target on both sides"
    c, detectable = r
    level = f"{100 * (1 - alpha):.4g}%"
    if c.high < 0 or c.low > 0:
        more = "fewer" if c.high < 0 else "more"
        interval = f"[{math.exp(c.low):.2f}, {math.exp(c.high):.2f}]"
        return f"{arm} takes {more} {what} ({math.exp(c.diff):.2f}x {interval}, {level})"
    return (
        f"{what}: no difference resolved ({math.exp(c.diff):.2f}x; could detect ≥ {math.exp(detectable):.2f}x at "
        f"{level}, 80% power)"
    )
