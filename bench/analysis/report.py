"""`bench report`: one row per recipe (seeds aggregated), or per run, with the definitions under the table."""

from __future__ import annotations

import pandas as pd

from bench.analysis.render import Cell, Table, render as render_table
from bench.analysis.results import aggregate
from bench.analysis.tables import measured_cell

DEFINITIONS = [
    "val_top1 / val_top5 / train_eval_top1: Top-1/Top-5 (%) at the last evaluation (train_eval: the fixed "
    "train-eval subset, training images with validation transforms); best_val_top1: the maximum over evaluations; "
    "a diverged run has no final values (a mean over seeds is over the others; status says how many diverged).",
    "gap_top1 = train_eval_top1 − val_top1 (pp); gap_loss = val_loss − train_eval_loss.",
    "*_to_target: epoch / step / images seen / training seconds at the first evaluation with val_top1 ≥ target_top1; "
    "∞ = never reached (a mean over seeds is ∞ if any seed missed).",
    "Seeds: runs whose resolved recipes differ only in name, seed and fields that do not change the mathematics "
    "(data.workers, eval_batch, strict, checkpoint, engine.compile, channels_last; data.loader only as images vs "
    "random tensors; micro_batch and gsnr_groups as the batch plan that ran) form one row: mean ± sample std over "
    "its finished runs (n).",
]
METRICS = (("epochs", "epochs"), ("val_top1", "pct"), ("best_val_top1", "pct"), ("val_top5", "pct"),
           ("train_eval_top1", "pct"), ("gap_top1", "pct"), ("gap_loss", "loss"),
           ("epochs_to_target", "epochs"), ("steps_to_target", "steps"), ("images_to_target", "images"),
           ("seconds_to_target", "seconds"))


def table(runs: pd.DataFrame, per_run: bool = False) -> Table:
    """The report as a Table: per recipe (seed aggregates) or per run."""
    if per_run:
        t = Table("Runs", ["recipe", "optimizer", "global_batch", "seed", "status", "target_top1",
                           *(m for m, _ in METRICS)])
        for _, r in runs.iterrows():
            t.rows.append([r["recipe"], r["optimizer"], r["global_batch"], r["seed"], r["status"],
                           Cell(r["target_top1"], kind="float"), *(Cell(r[m], kind=k) for m, k in METRICS)])
        t.notes = DEFINITIONS[:3]
        return t
    t = Table("Recipes (seeds aggregated)", ["recipe", "optimizer", "global_batch", "n", "status", "target_top1",
                                             *(m for m, _ in METRICS)])
    for _, g in aggregate(runs).iterrows():
        t.rows.append([g["recipe"], g["optimizer"], g["global_batch"], g["n"], g["status"],
                       Cell(g["target_top1"], kind="float"), *(measured_cell(g, m, k, n=False, notes=False) for m, k in METRICS)])
    t.notes = DEFINITIONS
    return t


def render(runs: pd.DataFrame, fmt: str = "markdown", per_run: bool = False) -> str:
    return render_table(table(runs, per_run), fmt)


SUMMARY = ("val_top1", "train_eval_top1", "gap_top1", "epochs_to_target")


def summary(runs: pd.DataFrame) -> str:
    """The short table `bench run` prints at the end: the numbers a user looks at first."""
    kinds = dict(METRICS)
    t = Table("Run summary", ["recipe", "status", "target_top1", *SUMMARY])
    for _, r in runs.iterrows():
        t.rows.append([r["recipe"], r["status"], Cell(r["target_top1"], kind="float"),
                       *(Cell(r[m], kind=kinds[m]) for m in SUMMARY)])
    t.notes = DEFINITIONS[:3]
    return render_table(t, "markdown")
