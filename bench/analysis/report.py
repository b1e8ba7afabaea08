"""`bench report`: one row per recipe (seeds aggregated), or per run, with the definitions under the table."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from bench.analysis.render import Cell, Table
from bench.analysis.render import render as render_table
from bench.analysis.results import aggregate, instability_text
from bench.analysis.tables import fixed_batch_notes, measured_cell
from bench.rundir import META

DEFINITIONS = [
    "val_top1 / val_top5 / train_eval_top1: Top-1/Top-5 (%) at the last evaluation (train_eval: the fixed "
    "train-eval subset, training images with validation transforms); best_val_top1: the maximum over evaluations; "
    "a diverged run has no final values (a mean over seeds is over the others; status says how many diverged).",
    "Diverged: a non-finite training loss, validation Top-1 at chance after warm-up (eval.stop_at_chance), or a "
    "spike (an evaluation interval's mean training loss over 2 x the first step's) whose last interval is still at "
    "or above the first step's loss; a spike that came back is an instability: the run keeps its final values and "
    "the instability column names its largest interval loss and step.",
    "gap_top1 = train_eval_top1 − val_top1 (pp); gap_loss = val_loss − train_eval_loss.",
    "*_to_target: epoch / step / images seen / training seconds at the first evaluation with val_top1 ≥ target_top1; "
    "∞ = never reached (a mean over seeds is ∞ if any seed missed).",
    "Seeds: runs whose resolved recipes differ only in name, seed and fields that do not change the mathematics "
    "(data.workers, eval_batch, strict, checkpoint, engine.compile, channels_last; data.loader only as images vs "
    "random tensors; micro_batch and gsnr_groups as the batch plan that ran) form one row: mean ± sample std over "
    "its finished runs (n).",
]
RUN_DEFINITIONS = DEFINITIONS[:4]  # all but the seeds' rule: what a table of single runs needs
STEP_DEFINITIONS = {
    "noise scale (B_simple)": "noise scale (B_simple): the simple gradient noise scale tr(Σ)/|G|² of McCandlish et "
    "al. 2018 (images), a critical-batch estimate: Σ(noise_trace) / Σ(grad_sqnorm) over the run's steps after the "
    "warm-up that logged both (a ratio of sums, not a mean of per-step ratios; the diagnostics figure's curve "
    "counts the same steps); — = not logged, or the summed |G|² was not positive.",
    "mean gain": "mean gain: AdaScale's gain ratio averaged over the run's steps (1 = no gain, S = perfect "
    "scaling at S times the base batch); — = not logged.",
    "mean batch": "mean batch / final batch: the global batch averaged over the run's steps (images seen / steps) "
    "and at its last step (adaptive batching; global_batch is the starting batch).",
}
# Optional columns: (column, run metric, kind, shown when)
STEP_COLUMNS = (
    ("noise scale (B_simple)", "noise_scale", "size", lambda runs: runs["noise_scale"].notna().any()),
    ("mean gain", "mean_gain", "ratio", lambda runs: runs["mean_gain"].notna().any()),
    ("mean batch", "mean_batch", "size", lambda runs: runs["batch_varies"].any()),
    ("final batch", "final_batch", "images", lambda runs: runs["batch_varies"].any()),
)
METRICS = (
    ("epochs", "epochs"),
    ("val_top1", "pct"),
    ("best_val_top1", "pct"),
    ("val_top5", "pct"),
    ("train_eval_top1", "pct"),
    ("gap_top1", "pct"),
    ("gap_loss", "loss"),
    ("epochs_to_target", "epochs"),
    ("steps_to_target", "steps"),
    ("images_to_target", "images"),
    ("seconds_to_target", "seconds"),
)


# The columns whose numbers are a finished run's (at its last evaluation): an unfinished run's are marked NOT_FINAL.
FINAL_COLUMNS = ("val_top1", "best_val_top1", "val_top5", "train_eval_top1", "gap_top1", "gap_loss")
NOT_FINAL = "not final"
NOT_FINAL_NOTE = (
    f"'{NOT_FINAL}': the run (for a recipe: every seed of it) has not finished (running, stopped, preempted or "
    "failed): its numbers are those of its last evaluation so far, not its final values."
)


def _final(c: Cell, metric: str, finished: bool) -> Cell:
    """A final-value cell, marked NOT_FINAL when its run has not finished (an accuracy at epoch 1.02 of 10 is not
    the recipe's result)."""
    if finished or metric not in FINAL_COLUMNS or c.empty:
        return c
    return replace(c, note="; ".join(filter(None, [c.note, NOT_FINAL])))


def step_columns(runs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(column, metric, kind) of the STEP_COLUMNS some run has data for (none for runs made before them)."""
    return [(c, m, k) for c, m, k, shown in STEP_COLUMNS if m in runs and len(runs) and shown(runs)]


def table(runs: pd.DataFrame, per_run: bool = False) -> Table:
    """The report as a Table: per recipe (seed aggregates) or per run."""
    extra = step_columns(runs)
    unstable = bool(len(runs)) and bool((runs["unstable"] & ~runs["diverged"]).any())
    notes = [d for c, d in STEP_DEFINITIONS.items() if c in [e[0] for e in extra]]
    notes += fixed_batch_notes(runs) if len(runs) else []
    if per_run:
        t = Table(
            "Runs",
            [
                "recipe",
                "optimizer",
                "global_batch",
                "seed",
                "status",
                "target_top1",
                *(m for m, _ in METRICS),
                *(c for c, _, _ in extra),
                *["instability"] * unstable,
            ],
        )
        for _, r in runs.iterrows():
            t.rows.append(
                [
                    r["recipe"],
                    r["optimizer"],
                    r["global_batch"],
                    r["seed"],
                    r["status"],
                    Cell(r["target_top1"], kind="float"),
                    *(_final(Cell(r[m], kind=k), m, bool(r["finished"])) for m, k in METRICS),
                    *(Cell(r[m], kind=k) for _, m, k in extra),
                    *[instability_text(r) if not r["diverged"] else ""] * unstable,
                ]
            )
        t.notes = RUN_DEFINITIONS + notes + [NOT_FINAL_NOTE] * bool(len(runs) and not runs["finished"].all())
        return t
    t = Table(
        "Recipes (seeds aggregated)",
        [
            "recipe",
            "optimizer",
            "global_batch",
            "n",
            "status",
            "target_top1",
            *(m for m, _ in METRICS),
            *(c for c, _, _ in extra),
            *["unstable"] * unstable,
        ],
    )
    groups = aggregate(runs)
    for _, g in groups.iterrows():
        t.rows.append(
            [
                g["recipe"],
                g["optimizer"],
                g["global_batch"],
                g["n"],
                g["status"],
                Cell(g["target_top1"], kind="float"),
                *(_final(measured_cell(g, m, k, n=False, notes=False), m, not g["unfinished"]) for m, k in METRICS),
                *(measured_cell(g, m, k, n=False, notes=False) for _, m, k in extra),
                *[f"{g['n_unstable']} of {g['n']}" if g["n_unstable"] else ""] * unstable,
            ]
        )
    t.notes = DEFINITIONS + notes + [NOT_FINAL_NOTE] * bool(len(groups) and groups["unfinished"].any())
    return t


def render(runs: pd.DataFrame, fmt: str = "markdown", per_run: bool = False) -> str:
    return render_table(build(runs, per_run), fmt)


def build(runs: pd.DataFrame, per_run: bool = False) -> Table:
    """The report as `bench report` prints it: table(), and a note on each run evaluated on part of val."""
    t = table(runs, per_run)
    short = runs[pd.to_numeric(runs["val_images"]) < pd.to_numeric(runs["val_size"])] if len(runs) else runs
    t.notes += [
        f"{r['run']}: val Top-1 over {r['val_images']:.0f} of the {r['val_size']:.0f} validation images "
        f"(the others unreadable; {META} names them)."
        for _, r in short.iterrows()
    ]
    return t


SUMMARY = ("val_top1", "train_eval_top1", "gap_top1", "epochs_to_target")


def summary(runs: pd.DataFrame) -> str:
    """The short table `bench run` prints at the end: the numbers a user looks at first."""
    kinds = dict(METRICS)
    t = Table("Run summary", ["recipe", "status", "target_top1", *SUMMARY, "val_images"])
    for _, r in runs.iterrows():
        t.rows.append(
            [
                r["recipe"],
                r["status"],
                Cell(r["target_top1"], kind="float"),
                *(_final(Cell(r[m], kind=kinds[m]), m, bool(r["finished"])) for m in SUMMARY),
                Cell(r["val_images"], kind="images"),
            ]
        )
    t.notes = [
        *RUN_DEFINITIONS,
        "val_images: the validation images the last evaluation counted (unreadable ones "
        f"are skipped and named in {META}).",
    ]
    return render_table(t, "markdown")
