"""The tuning table: per (arm, batch), the search (trials, infeasible, best point), steps to result and the
reruns' figures; and the performance profile over batches."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.analysis import search
from bench.analysis.cells import (
    NEAR_TIE_Z,
    cells,
    mean_std_n,
    median_steps,
    rank_trials,
    rerun_cell,
    selection_notes,
    selects_on_steps,
    steps_cell,
    sweep_runs,
    title,
)
from bench.analysis.paper import display
from bench.analysis.render import NO_NUMBER, Cell, Table
from bench.analysis.results import Study

TUNING_NOTES = (  # the tuning table's notes; how each cell chose its best trial goes fourth
    "images per run: the training images of the cell's longest finished run (its steps x the batch: one budget "
    "gives every batch the same images to within one step; a run that stops at the target sees fewer than its "
    "budget).",
    "trials: finished / planned; infeasible: finished without a final accuracy (diverged: a non-finite loss, "
    "Top-1 at chance, or a loss spike that never came back below the first step's loss).",
    "instabilities: the trials and reruns whose loss spiked (an evaluation interval's mean training loss over "
    "2 x the first step's) and came back: their largest interval loss and its step; they keep their numbers.",
    "steps to result: the fewest steps to the target over the trials (val set; Shallue et al. 2018); "
    "median over studies: each study's fewest, median over studies, a miss = ∞ (AlgoPerf); ∞: no trial reached it.",
    "reruns: the best trial with other seeds; mean ± sample std (n); runner-up: the second-best trial rerun with "
    "the same seeds (reruns.top ≥ 2), which shows whether a near-tie selection mattered (its steps to the "
    "target where the sweep selected on them).",
    "grid G beside a steps figure: its resolution, the steps between the evaluation that first reached the target "
    "and the one before it (the target was crossed somewhere in those G steps; for reruns, the largest over "
    "seeds); two steps figures closer than their grids are not resolved (eval.every_epochs, "
    "eval.near_target_every_epochs refine it).",
    "GSNR clipped: VRGD's share of live coordinates (a non-zero gradient in some group) whose GSNR factor was "
    "clipped to γ (percent, per step, averaged over the reruns' steps); pure noise would clip a share set by "
    "the group count k (docs/algorithms.md).",
)


def tuning(study: Study, baseline: str | None = None) -> Table:
    """Per (arm, batch): the search (trials, infeasible, best point), steps to result, and the reruns' figures."""
    table_cells = cells(study)
    by_steps = selects_on_steps(table_cells)  # the runner-up's figure: its steps
    table = Table(
        title("Tuning: each optimizer at each global batch", table_cells),
        [
            "batch",
            "arm",
            "images per run",
            "trials",
            "infeasible",
            "best trial",
            "best lr",
            "best warm-up (epochs)",
            "best selection Top-1",
            "runner-up",
            "near tie",
            "steps to result",
            "median over studies",
            "val Top-1 (reruns)",
            "runner-up steps to target (reruns)" if by_steps else "runner-up val Top-1 (reruns)",
            "gap Top-1 (reruns)",
            "steps to target (reruns)",
            "GSNR clipped (reruns)",
            "instabilities",
        ],
        keys=2,
    )
    for _, c in table_cells.iterrows():
        if by_steps:
            runner_up = _rerun_steps_cell(c["runner_up_rerun_steps"], c["runner_up_rerun_grid"], empty="")
        else:
            runner_up = Cell(*mean_std_n(c["runner_up_reruns"])) if c["runner_up_reruns"] else Cell(None)
        table.rows.append(
            [
                c["global_batch"],
                display(c["arm"]),
                Cell(c["images"], kind="images"),
                f"{c['n_finished']}/{c['n_trials']}",
                c["n_infeasible"],
                c["best_trial"] if isinstance(c["best_trial"], str) else NO_NUMBER,
                Cell(c["best_lr"], kind="float"),
                Cell(c["best_warmup_epochs"], kind="epochs"),
                Cell(c["best_selection_top1"], c["selection_se"]),
                Cell(c["runner_up_steps"], kind="steps")
                if c["select_metric"] == "steps_to_target"
                else Cell(c["runner_up_top1"]),
                "near tie" if c["near_tie"] else "",
                steps_cell(c["steps_to_result"], c["steps_to_result_grid"]),
                Cell(c["median_study_steps"], kind="steps"),
                rerun_cell(c, "val_top1"),
                runner_up,
                rerun_cell(c, "gap_top1"),
                _rerun_steps_cell(c["rerun_steps"], c["rerun_grid"]),
                Cell(100 * c["clip_frac"], kind="pct"),
                c["unstable"],
            ]
        )
    table.notes = [
        *TUNING_NOTES[:3],
        *_best_trial_notes(table_cells),
        *TUNING_NOTES[3:],
        *selection_notes(table_cells),
    ]
    search.add_columns(table, study, sweep_runs(study), table_cells, rank_trials)
    return table


def _rerun_steps_cell(steps, grids, empty: str = "no reruns") -> Cell:
    """Reruns' steps to the target, mean ± sample std with the largest grid and how many reached it; no number
    when one missed (a miss is ∞ steps)."""
    steps, grids = np.asarray(steps, float), np.asarray(grids, float)
    if not len(steps):
        return Cell(None, note=empty, kind="steps")
    reached = f"{int(np.isfinite(steps).sum())}/{len(steps)} reached"
    if not np.isfinite(steps).all():
        return Cell(None, note=reached, kind="steps")
    mean, std, _ = mean_std_n(steps)
    return steps_cell(mean, float(np.nanmax(grids)) if np.isfinite(grids).any() else math.nan, std=std, note=reached)


def _best_trial_notes(table_cells: pd.DataFrame) -> list[str]:
    """How each kind of cell in the table chose its best trial (select.metric: top1 or steps_to_target)."""
    metrics = set(table_cells["select_metric"])
    notes = []
    if "top1" in metrics:
        notes.append(
            "best trial (select.metric top1): highest final Top-1 on the selection split; best selection Top-1 ± its "
            "binomial standard error on the split's images; runner-up: the second-best trial's."
        )
    if "steps_to_target" in metrics:
        notes.append(
            "best trial (select.metric steps_to_target): the fewest steps to the target on the selection split, its "
            "Top-1 breaking ties and ranking the misses; best selection Top-1: that trial's final Top-1 on the split "
            "(a trial stopped at the target ends just above it) ± its binomial standard error; runner-up: the "
            "second-best trial's steps to the target."
        )
    notes.append(
        f"near tie: once reruns exist, the runner-up is within {NEAR_TIE_Z:g} x sqrt(2) x its arm's seed noise of the "
        "best (the standard deviation of two one-seed trials' difference; seed noise: the reruns' standard deviation "
        "of log steps to the target, or of selection-split Top-1, pooled over the arm's cells), so one seed of each "
        "cannot tell them apart; before any rerun, within one evaluation grid (steps) or two binomial standard errors "
        "(Top-1)."
    )
    return notes


def performance_profile(table_cells: pd.DataFrame, taus: np.ndarray) -> dict[str, np.ndarray]:
    """arm -> fraction of batches at which its reruns' median steps to the target is within tau x the best arm's
    (AlgoPerf's performance profile, over batches; the reruns, not the best trials, so no winner's luck); a miss
    never counts."""
    table_cells = table_cells.assign(_median=table_cells["rerun_steps"].map(median_steps))
    best = table_cells.groupby("global_batch")["_median"].min()
    out = {}
    for arm, c in table_cells.groupby("arm", sort=False):
        ratio = (c["_median"] / c["global_batch"].map(best)).to_numpy()
        ratio = np.where(np.isfinite(ratio), ratio, np.inf)
        out[arm] = np.array([(ratio <= t).mean() for t in taus])
    return out
