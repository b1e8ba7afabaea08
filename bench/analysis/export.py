"""`bench report --format parquet|json`: the per-recipe (or, with --runs, per-run) table with its raw values and
the definition of every column, for notebooks:

    bench report results/tuned --runs --format parquet --out runs.parquet
    pandas.read_parquet("runs.parquet")                       # the definitions: bench.analysis.export.COLUMNS
    bench report results/tuned --format json --out recipes.json
    pandas.read_json("recipes.json", orient="table")          # the definitions: the schema's field descriptions

Values are as measured: percent for Top-1, infinity where a finished run never reached the target, NaN where a
value does not exist. JSON keeps the two apart as Python's json and pandas.read_json write and read them,
`Infinity` and `NaN` (pandas' own to_json would write both as null; strict JSON parsers reject those words).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported by the callers that hold frames; `bench report --columns` needs none
    import pandas as pd

import os

from bench.errors import UserError
from bench.files import atomic_write
from bench.rundir import EVENTS, META, METRICS, is_run, versions

FORMATS = ("parquet", "json")

# Every exported column and its meaning: the one place they are defined (tests check that none is missing).
COLUMNS = {
    "recipe": "the recipe's name (per recipe: the names of the seeds' recipes with the seed part in common)",
    "optimizer": "the registered optimizer name (bench.optim)",
    "global_batch": "the global batch the run planned, in images: the recipe's (an adaptive run's starting batch)",
    "plan_batch": f"the batch plan's unit ({META}: plan.batch): global_batch, except under adaptive batching, where "
    "it is the chunk a step takes a whole number of (adaptive_batch.min_batch)",
    "plan_groups": "the gradient groups k per step of the plan that ran (VRGD's GSNR groups)",
    "seed": "the run's seed",
    "status": "per run: completed, diverged, running, preempted, failed or stopped (killed while running); "
    "per recipe: the count of each over the seeds",
    "reason": "why a run diverged, failed or was preempted (null otherwise)",
    "diverged": "the run ended diverged (a non-finite loss; validation Top-1 at chance after warm-up; or a "
    "training-loss spike that never came back below the first step's loss)",
    "loss_first": f"the training loss of the run's first step ({EVENTS})",
    "loss_peak": f"the largest mean training loss of an evaluation interval ({METRICS} train_loss)",
    "loss_peak_step": "the step that closed the interval of loss_peak",
    "loss_last": "the mean training loss of the last evaluation interval",
    "unstable": "the run's loss spiked: loss_peak over 2 x loss_first (it diverged only if it did not come back)",
    "finished": "the run ended completed or diverged",
    "run": "the run directory, relative to the reported root (the common folder of the paths given)",
    "loader": f"the loader that ran ({META}: data.loader auto resolved), part of the group",
    "start_time": f"when the run started ({META}, ISO 8601 UTC)",
    "end_time": f"when the run ended ({META}, ISO 8601 UTC; '' while running)",
    "runs": "the run directories aggregated in this row, relative to the reported root",
    "group": "hash of the resolved recipe without name, seed and fields that do not change the mathematics: "
    "runs with one group are seeds of one recipe",
    "setting": "hash of setting_keys (model, data, image size, target)",
    "setting_keys": "JSON of what the setting hash covers",
    "problem": "hash of problem_keys (the setting without the model)",
    "problem_keys": "JSON of what the problem hash covers",
    "setting_label": "the setting in words",
    "problem_label": "the problem in words",
    "paper": "the paper experiment this setting reproduces ('' for none)",
    "model": "timm model name",
    "model_key": "timm model name and kwargs (JSON)",
    "model_label": "the model in words",
    "model_shape": "the model's shape kwargs in words",
    "adaptive_batch": "the recipe has adaptive_batch (SimiGrad-style batch control)",
    "batch_varies": "the global batch changed during the run",
    "dataset": "the recipe's data.dataset",
    "image_size": "training image side in pixels",
    "lr": "the recipe's peak learning rate",
    "warmup_epochs": "the recipe's linear warm-up in epochs",
    "sweep": "the bench sweep the run belongs to ('' for none)",
    "arm": "the sweep arm (an optimizer's search space)",
    "role": "the run's role in the sweep: trial, rerun (the best trial's), rerun_top (a next-best trial's) or "
    "matched (at another arm's selected point)",
    "trial": "the sweep trial number",
    "sweep_study": "the sweep study (an independent search) number",
    "select_metric": "what the run's sweep selected its best trials on: top1 or steps_to_target",
    "point_of": "a matched rerun's point: the arm whose selected point it ran at (reruns.matched)",
    "holdout_size": "training images held out for selection (data.holdout; 0 for none)",
    "commit": "the git commit of the code that made the run ('+dirty': an uncommitted working tree)",
    "kernels": "the platform whose kernels made the numbers: device, kernel path (CPU: ATen capability) and torch",
    "library": "a library optimizer's package and its version in the run ('' for bench's own optimizers, and for "
    "runs made before bench recorded it)",
    "holdout_top1": "Top-1 (%) on the held-out training images (data.holdout) at the last evaluation",
    "planned_epochs": "the recipe's epochs",
    "train_size": "training images",
    "val_size": "validation images",
    "val_images": "validation images the last evaluation counted (fewer than val_size when some were unreadable)",
    "train_eval_images": "images in the fixed train-eval subset the train-eval Top-1 is measured on",
    "target_top1": "the recipe's target validation Top-1 (%)",
    "train_time_s": "training seconds (training steps only, slowest rank); a wall time on a possibly shared "
    "machine, not a speed claim",
    "evaluations": f"evaluations in {METRICS}",
    "epochs": "epochs trained (images seen / training-set size)",
    "steps": "optimizer steps taken",
    "images": "training images seen",
    "val_top1": "validation Top-1 (%) at the last evaluation (null for a diverged run)",
    "val_top5": "validation Top-5 (%) at the last evaluation (null for a diverged run)",
    "train_eval_top1": "Top-1 (%) on the fixed train-eval subset (training images under validation transforms) "
    "at the last evaluation",
    "best_val_top1": "the best validation Top-1 (%) over the evaluations",
    "best_val_top5": "the best validation Top-5 (%) over the evaluations",
    "gap_top1": "train_eval_top1 - val_top1 (percentage points)",
    "gap_loss": "val_loss - train_eval_loss at the last evaluation",
    "steps_to_target": "steps at the first evaluation with val_top1 >= target_top1; inf = a finished run never "
    "reached it; null = an unfinished run has not yet",
    "steps_to_target_grid": "the resolution of steps_to_target: steps between that evaluation and the one before",
    "stopped_at_target": "the run ended at its first evaluation at the target (eval.stop_at_target)",
    "epochs_to_target": "epochs at that evaluation (inf and null as steps_to_target)",
    "images_to_target": "images seen at that evaluation (inf and null as steps_to_target)",
    "seconds_to_target": "training seconds at that evaluation (inf and null as steps_to_target)",
    "noise_scale": "the simple gradient noise scale B_simple = tr(Sigma)/|G|^2 in images: sum(noise_trace) / "
    "sum(grad_sqnorm) over the steps that logged both (McCandlish et al. 2018)",
    "noise_scale_steps": "the steps noise_scale used",
    "noise_scale_window": "B_simple as noise_scale over the steps that start within epochs 1 to 1.5 of the training "
    "set (results.NOISE_WINDOW), null unless the run trained through them: comparable across runs of unequal length",
    "mean_gain": "AdaScale's gain averaged over the steps",
    "mean_batch": "the global batch averaged over the steps (images seen / steps)",
    "final_batch": "the global batch of the last step",
    "seeds": "the seeds aggregated in this row",
    "n": "the runs the means are over (finished ones; all when none finished)",
    "n_runs": "the runs in the group (a seed counted once)",
    "n_diverged": "the diverged runs in the group",
    "n_unstable": "the runs in the group whose loss spiked and came back (unstable, not diverged)",
    "n_reached": "the runs that reached target_top1",
    "unfinished": "the row is aggregated over unfinished runs (no run of the group finished)",
}
STD = "sample standard deviation over the row's runs of "


def definition(column: str) -> str:
    """The meaning of an exported column; KeyError for one nobody defined."""
    if column.endswith("_std") and column[:-4] in COLUMNS:
        return STD + column[:-4]
    return COLUMNS[column]


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells a file format holds: tuples of run directories as lists."""
    return frame.apply(lambda col: col.map(list) if col.map(type).eq(tuple).any() else col)


def _scalar(value):
    """numpy scalars (int64, bool_, float64 NaN) as Python's."""
    return value.item()


def relative_runs(frame: pd.DataFrame, paths) -> pd.DataFrame:
    """`run` / `runs` relative to the common folder of the reported paths: an export read on another machine
    names the same runs (absolute paths name the writer's disk)."""
    folders = [Path(p).resolve() for p in paths]
    root = Path(os.path.commonpath(folders))
    if is_run(root):  # one run directory: name it from its parent
        root = root.parent
    rel = lambda run: os.path.relpath(Path(run).resolve(), root)  # noqa: E731
    out = frame.copy()
    if "run" in out:
        out["run"] = out["run"].map(rel)
    if "runs" in out:
        out["runs"] = out["runs"].map(lambda runs: tuple(rel(r) for r in runs))
    return out


def write(frame: pd.DataFrame, fmt: str, out: str | Path | None, table: str) -> str | None:
    """Write `frame` as `fmt` to `out` (JSON: to the returned text when out is None); one atomic write."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format '{fmt}'; choose from {', '.join(FORMATS)}")
    frame = _plain(frame.reset_index(drop=True))
    described = {column: definition(column) for column in frame.columns}
    if fmt == "parquet":
        if out is None:
            raise UserError("--format parquet writes a file: give --out FILE.parquet")
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrow = pa.Table.from_pandas(frame, preserve_index=False)
        fields = [f.with_metadata({"description": described[f.name]}) for f in arrow.schema]
        meta = {**(arrow.schema.metadata or {}), b"bench": json.dumps({"table": table, "bench": versions()["bench"]})}
        arrow = arrow.cast(pa.schema(fields, metadata=meta))
        sink = pa.BufferOutputStream()
        pq.write_table(arrow, sink)
        atomic_write(Path(out), sink.getvalue().to_pybytes())
        return None
    schema = json.loads(frame.head(0).to_json(orient="table", index=False))["schema"]
    for field in schema["fields"]:
        field["description"] = described[field["name"]]
    schema["bench"] = {"table": table, "bench": versions()["bench"]}
    rows = frame.astype(object).where(frame.notna(), None).to_dict("records")  # NaN -> null, inf stays
    text = json.dumps({"schema": schema, "data": rows}, indent=1, default=_scalar) + "\n"
    if out is None:
        return text
    atomic_write(Path(out), text)
    return None
