"""Load run directories into DataFrames: one row per run, its evaluation curve, seed aggregates.

Per run (`Study.runs`, `load()`):
- val_top1 / val_top5 / train_eval_top1: Top-1/Top-5 (%) at the last evaluation;
  best_val_top1 / best_val_top5 the maximum over evaluations. A diverged run has
  no final model, so its final values are empty (NaN); its best values remain.
- gap_top1 = train_eval_top1 - val_top1 (percentage points) and
  gap_loss = val_loss - train_eval_loss, both at the last evaluation.
- steps / epochs / images / seconds_to_target: `step`, `epoch`, `images_seen`
  and `train_time_s` (training time only) of the first evaluation with
  val_top1 >= target_top1. Infinity when a finished run (completed or diverged)
  never reached it; NaN while an unfinished run has not reached it yet.
- noise_scale: the run's simple gradient noise scale B_simple = tr(Sigma) / |G|^2
  (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training") as
  sum(noise_trace) / sum(grad_sqnorm) over the steps of the run's events after the warm-up (after_warmup) that
  logged both: a ratio of sums, numerator and denominator averaged separately as the
  paper advises for its unbiased estimators, since the per-step |G|^2 estimate is
  noisy and may be negative (a mean of per-step ratios would be dominated by the
  steps where it is near 0). NaN when no step logged both or the summed |G|^2 is
  not positive; noise_scale_steps: how many steps it used. A whole run's B_simple depends on its length (it
  rises as the loss falls): runs of unequal length are not comparable by it.
- noise_scale_window: B_simple the same way over a stated image window, the steps that start within epochs
  NOISE_WINDOW = [1, 1.5) of the training set (the images seen before them): after the ladder's warm-ups (at
  most 1 epoch) and before its shortest runs end (the quality sweep's 1.93 epochs), the same images at every
  batch; NaN unless the run logged the noise and trained through the whole window.
- status: the run's meta's, except that a completed run whose training loss spiked and did not come back is
  "diverged" (loss_course, bench's divergence rule); loss_first, loss_peak, loss_peak_step, loss_last: the
  first step's training loss, the largest mean training loss of an evaluation interval and its step, the last
  interval's; unstable: the peak was over SPIKE x loss_first (a spike; one that came back keeps its numbers).
- commit: the meta's git_commit ('+dirty': made from an uncommitted tree); kernels: the device, its kernel
  path (CPU: ATen's capability) and the torch build (kernels()); library: a library optimizer's package and the
  version the run recorded (library_of); holdout_size: the held-out training images.
- steps_to_target_grid: the resolution of steps_to_target (the steps between the hit and the evaluation before
  it); stopped_at_target: the run ended at the target (recipe eval.stop_at_target), so its final values are
  those of that evaluation, not of the planned budget.
- holdout_top1: Top-1 (%) on the held-out training images (recipe data.holdout) at the last evaluation.
- sweep, arm, role, trial, sweep_study, select_metric: the run's place in a `bench sweep` (sweep_place) and the
  metric its sweep selected on (top1 or steps_to_target); warmup_epochs.
- mean_gain: mean of the per-step AdaScale gain (NaN when no step logged one).
- mean_batch / final_batch: mean over steps of the global batch (images seen /
  steps) and the batch of the last step; batch_varies: whether the batch
  changed during the run (adaptive batching). Runs that logged no `batch` (made
  before it existed) ran the plan's batch at every step.
- global_batch is the batch the run planned (its record's `batch`, bench.rundir.Run: the recipe's global_batch),
  the starting batch of an adaptive run (recipe key adaptive_batch), which is grouped and compared under it;
  plan_batch: the batch plan's unit, which differs from it only under adaptive batching (the chunk a step takes
  a whole number of).
- setting: a hash of SETTING_KEYS (model, data, image size, target); problem: the
  same without the model, so that runs of several model shapes on one problem
  (model_key, model_shape: timm name + kwargs) can be set side by side;
  setting_keys, problem_keys: what they hash, as JSON (variant_names() names a
  setting by the keys in which it differs from the others).

Damaged results never change a number silently: a run whose meta or recipe cannot be read, or whose metrics
cannot be parsed, is left out and named in a warning (strict: an error); a metrics file whose last line is cut
off loses that line, with a warning. A run left "running" by a killed process (no process holds its lock) has
status "stopped" and is never aggregated. Each run is read once, into its record (bench.rundir.Run), which the
Study keeps (`Study.records`, `Study.record(run)`): the tables and figures take records, never paths.

Seeds (`Study.groups`): runs whose resolved recipes are equal once the fields in SEED_NEUTRAL (bench/identity.py)
are removed form one group (`group`, a hash of what is left). A seed counts once per group
(once_per_seed: the finished run that ended last, by its meta's end_time, the others named in a warning;
the loader that ran is part of the recipe here: DALI's and torchvision's runs are not seeds of one recipe). They are aggregated as mean,
`<metric>_std` (sample std, NaN for one run) and `n`, over
the group's finished runs (completed or diverged); only a group with no finished
run is aggregated over its unfinished runs. A mean of steps-to-target is infinite
when any seed missed the target (`n_reached` says how many reached it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.paper import data_label, model_label, model_shape, paper_setting, setting_label
from bench.catalog import DATASETS, OPTIMIZERS, reads_files
from bench.errors import UserError
from bench.identity import digest, loader_ran, seed_key
from bench.recipe import Recipe, file_stem  # noqa: F401  (file_stem: plots use it from here)
from bench.rundir import FINISHED, Run, damaged, find_runs, held_by_a_process, kernels, read_run

# What makes two groups comparable ("the same problem"): model, dataset, image size, target.
# Each dataset's own keys come from its catalog record (a new dataset is never merged with another's runs).
SETTING_KEYS = (
    ("model",),
    ("data", "dataset"),
    *dict.fromkeys(k for d in DATASETS.values() for k in d.setting_keys),
    ("data", "loader"),
    ("data", "image_size"),
    ("data", "train_eval_size"),
    ("target_top1",),
)
TO_TARGET = {
    "steps_to_target": "step",
    "epochs_to_target": "epoch",
    "images_to_target": "images_seen",
    "seconds_to_target": "train_time_s",
}
FINAL = {"val_top1": "val_top1", "val_top5": "val_top5", "train_eval_top1": "train_eval_top1"}
# Aggregated over seeds (mean and std).
AGG_METRICS = (
    "val_top1",
    "best_val_top1",
    "val_top5",
    "best_val_top5",
    "train_eval_top1",
    "gap_top1",
    "gap_loss",
    "epochs",
    "steps",
    "train_time_s",
    *TO_TARGET,
    "noise_scale",
    "noise_scale_window",
    "mean_gain",
    "mean_batch",
    "final_batch",
)
NOISE_WINDOW = (1.0, 1.5)  # epochs of the training set: noise_scale_window's steps
STEP_STATS = (
    "noise_scale",
    "noise_scale_steps",
    "noise_scale_window",
    "mean_gain",
    "mean_batch",
    "final_batch",
    "batch_varies",
)


def numbers(events: pd.DataFrame, key: str) -> pd.Series:
    """events[key] as floats (null, absent or non-numeric: NaN; infinities too)."""
    if key not in events:
        return pd.Series(math.nan, index=events.index, dtype=float)
    values = pd.to_numeric(events[key], errors="coerce").astype(float)
    return values.where(np.isfinite(values))


def step_batches(events: pd.DataFrame, plan_batch: float) -> pd.Series:
    """The global batch of each step: the logged `batch`, else (older runs, or a null) the plan's (Run.plan_batch)."""
    return numbers(events, "batch").fillna(plan_batch)


def ratio_of_sums(numerator: pd.Series, denominator: pd.Series) -> tuple[float, int]:
    """sum(numerator) / sum(denominator) over the rows where both are numbers, and how many rows that is;
    NaN when there is none or the summed denominator is not positive."""
    both = numerator.notna() & denominator.notna()
    total = float(denominator[both].sum())
    if not both.any() or total <= 0:
        return math.nan, int(both.sum())
    return float(numerator[both].sum()) / total, int(both.sum())


def images_before(events: pd.DataFrame, plan_batch: float) -> pd.Series:
    """The images seen before each logged step (events sorted by step, one row a step): the earlier steps'
    batches summed where every step is logged or the batch varies (an adaptive run logs every step), else
    (recipe logging.events_every_steps > 1, which the recipe allows at a fixed pace only) the step's number x its
    batch."""
    batches, steps = step_batches(events, plan_batch), numbers(events, "step")
    if (len(steps) and steps.iloc[-1] + 1 == len(steps)) or batches.nunique() > 1:
        return batches.cumsum() - batches
    return steps * batches


def after_warmup(before: pd.Series, warmup_images: float) -> pd.Series:
    """Which steps start after the warm-up (the images seen before them, images_before, reach warmup_images):
    the steps whose noise scale counts. In the warm-up the lr is far from its peak and the first steps' |G|^2
    estimates are noisy, often negative; both the report's B_simple and the figure's curve leave those steps out."""
    return before >= warmup_images


def noise_in_window(events: pd.DataFrame, plan_batch: float, train_size: float) -> float:
    """B_simple over the logged steps that start within NOISE_WINDOW epochs; NaN unless the run trained through it
    and logged a step in it (events thinned to every N-th step may log none there at a large batch)."""
    start, end = (e * train_size for e in NOISE_WINDOW)
    before = images_before(events, plan_batch)
    if not train_size or not len(before) or before.iloc[-1] + step_batches(events, plan_batch).iloc[-1] < end:
        return math.nan
    inside = (before >= start) & (before < end)
    return ratio_of_sums(numbers(events, "noise_trace")[inside], numbers(events, "grad_sqnorm")[inside])[0]


def step_stats(
    events: pd.DataFrame, metrics: pd.DataFrame, plan_batch: float, warmup_images: float = 0.0, train_size: float = 0.0
) -> dict[str, float]:
    """A run's STEP_STATS from its events (see the module docstring); metrics and the plan when it logged no steps."""
    out = dict.fromkeys(STEP_STATS, math.nan)
    out["batch_varies"] = False
    if not events.empty and "step" in events:
        events = events.drop_duplicates("step", keep="last").sort_values("step")  # a rolled-back resume, if any
        counted = after_warmup(images_before(events, plan_batch), warmup_images)
        out["noise_scale"], out["noise_scale_steps"] = ratio_of_sums(
            numbers(events, "noise_trace")[counted], numbers(events, "grad_sqnorm")[counted]
        )
        out["noise_scale_window"] = noise_in_window(events, plan_batch, train_size)
        gain = numbers(events, "gain").dropna()
        out["mean_gain"] = gain.mean() if len(gain) else math.nan
        batches = step_batches(events, plan_batch)
        out.update(mean_batch=batches.mean(), final_batch=batches.iloc[-1], batch_varies=batches.nunique() > 1)
    elif len(metrics):
        last = metrics.iloc[-1]
        out["final_batch"] = last["batch"]
        out["mean_batch"] = last["images_seen"] / last["step"] if last["step"] > 0 else math.nan
        out["batch_varies"] = metrics["batch"].nunique() > 1
    return out


def _pick(tree: dict, paths) -> dict:
    out = {}
    for path in paths:
        node = tree
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        out[".".join(path)] = node
    return out


def leaves(tree, prefix: str = "") -> dict:
    """A nested dict's leaves by dotted key ({'model': {'kwargs': {'layers': [1, 1]}}} -> {'model.kwargs.layers': [1, 1]})."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _value_text(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(_value_text, value))
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def variant_names(variants: dict[str, dict]) -> dict[str, str]:
    """id -> a name made of the keys whose values differ between the variants (`variants`: id -> nested dict),
    e.g. 'channels=20,40,80,160 layers=4,4,4,4'. A key is named by its last part unless two differing keys share
    it; the id is appended only where two names are equal in every key shown."""
    flat = {v: leaves(tree) for v, tree in variants.items()}
    keys = sorted({k for f in flat.values() for k in f})
    differ = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat.values()}) > 1]
    tails = [k.rsplit(".", 1)[-1] for k in differ]
    shown = {k: (t if tails.count(t) == 1 else k) for k, t in zip(differ, tails)}
    names = {v: " ".join(f"{shown[k]}={_value_text(f.get(k))}" for k in differ) for v, f in flat.items()}
    return {v: (f"{n} [{v}]".strip() if list(names.values()).count(n) > 1 else n) for v, n in names.items()}


def _loader_class(recipe: dict) -> dict:
    data = dict(recipe.get("data") or {})
    loader = data.get("loader")
    data["loader"] = "images" if reads_files(loader) else "random tensors"
    return {**recipe, "data": data}


def library_of(optimizer: str, meta: dict) -> str:
    """The package of a library optimizer's record and the version the run recorded ("timm 1.0.31"); '' for
    bench's own optimizers, and for a run made before bench recorded that package's version."""
    record = OPTIMIZERS.get(optimizer)
    version = (meta.get("versions") or {}).get(record.distribution) if record and record.package else None
    return f"{record.distribution} {version}" if version else ""


def first_at_or_above(curve: pd.DataFrame, threshold: float) -> pd.Series | None:
    """The first evaluation whose val_top1 is at or above `threshold` (None when there is none)."""
    reached = curve[curve["val_top1"] >= threshold]
    return reached.iloc[0] if len(reached) else None


def to_target(curve: pd.DataFrame, threshold: float, finished: bool) -> dict[str, float]:
    """steps/epochs/images/seconds at the first evaluation >= threshold; inf when a finished run never got there;
    steps_to_target_grid: the steps since the evaluation before it (the target was crossed somewhere in that
    interval: the figure's resolution; the hit's own steps when it was the first evaluation)."""
    row = first_at_or_above(curve, threshold)
    miss = math.inf if finished else math.nan
    out = {name: (float(row[col]) if row is not None else miss) for name, col in TO_TARGET.items()}
    before = curve.loc[curve["step"] < row["step"], "step"] if row is not None else None
    out["steps_to_target_grid"] = math.nan if row is None else float(row["step"] - (before.max() if len(before) else 0))
    return out


SPIKE = 2.0  # an evaluation interval whose mean training loss exceeds this many times the first step's is a spike


def loss_course(metrics: pd.DataFrame, events: pd.DataFrame) -> dict:
    """The training loss's course (bench's divergence rule, docs/algorithms.md): loss_first (the first step's,
    at initialisation about ln(classes)), loss_peak and loss_peak_step (the largest mean training loss of an
    evaluation interval and the step that closed it), loss_last (the last interval's), `unstable` (a spike: the
    peak above SPIKE x loss_first) and `not_recovered`: why a run that ended with finite losses is diverged (it
    spiked and its last interval is still at or above loss_first: it never came back below where it started),
    else None. A spike that comes back is an instability, not a divergence: the run keeps its final numbers."""
    out = {
        "loss_first": math.nan,
        "loss_peak": math.nan,
        "loss_peak_step": math.nan,
        "loss_last": math.nan,
        "unstable": False,
        "not_recovered": None,
    }
    first = numbers(events, "loss").dropna()
    interval = pd.to_numeric(metrics.get("train_loss", pd.Series(dtype=float)), errors="coerce")
    interval = interval[np.isfinite(interval)]
    if not len(first) or not len(interval):
        return out
    peak = interval.idxmax()
    out.update(
        loss_first=float(first.iloc[0]),
        loss_peak=float(interval[peak]),
        loss_peak_step=float(metrics.loc[peak, "step"]),
        loss_last=float(interval.iloc[-1]),
    )
    out["unstable"] = out["loss_peak"] > SPIKE * out["loss_first"]
    if out["unstable"] and out["loss_last"] >= out["loss_first"]:
        out["not_recovered"] = (
            f"training loss did not recover: {out['loss_peak']:.2f} at step {out['loss_peak_step']:.0f} (over "
            f"{SPIKE:g} x the first step's {out['loss_first']:.2f}) and still {out['loss_last']:.2f} in the last "
            "interval (bench's divergence rule)"
        )
    return out


def instability_text(row) -> str:
    """'loss 3.14 at step 20 (2.0x the first step's)' for an unstable run, '' otherwise."""
    if not row["unstable"]:
        return ""
    return (
        f"loss {row['loss_peak']:.2f} at step {row['loss_peak_step']:.0f} "
        f"({row['loss_peak'] / row['loss_first']:.1f}x the first step's)"
    )


def summarize(record: Run) -> tuple[dict, pd.DataFrame]:
    """One run's row and its evaluation curve, from its record."""
    run, recipe, meta, metrics, plan_batch = record.path, record.recipe, record.meta, record.metrics, record.plan_batch
    status = meta.get("status", "unknown")
    if status == "running" and not held_by_a_process(run):
        status = "stopped"  # killed before it could say so: resume it (bench run), or --restart
    events = record.events
    reason = meta.get("reason")
    course = loss_course(metrics, events)
    if status == "completed" and course["not_recovered"]:
        status, reason = "diverged", course["not_recovered"]
    course.pop("not_recovered")
    diverged, finished = status == "diverged", status in FINISHED
    target = float(recipe["target_top1"])
    data = recipe.get("data") or {}
    setting = _pick(_loader_class(recipe), SETTING_KEYS)
    problem = {k: v for k, v in setting.items() if k != "model"}  # the setting but for the model
    paper = paper_setting(recipe, meta)
    row = {
        "recipe": recipe["name"],
        "optimizer": recipe["optimizer"]["name"],
        "global_batch": record.batch,
        "plan_batch": plan_batch,
        "plan_groups": int((meta.get("plan") or {}).get("gsnr_groups") or 1),
        "seed": recipe.get("seed"),
        "status": status,
        "reason": reason,
        "diverged": diverged,
        "finished": finished,
        "run": str(run),
        "group": digest(seed_key(recipe, meta)),
        "loader": loader_ran(recipe, meta),
        "start_time": meta.get("start_time") or "",
        "end_time": meta.get("end_time") or "",
        "setting": digest(setting),
        "setting_keys": json.dumps(setting, default=str),
        "problem_keys": json.dumps(problem, default=str),
        "setting_label": setting_label(recipe, meta, paper),
        "paper": paper,
        "model": (recipe.get("model") or {}).get("name"),
        "model_key": digest(recipe.get("model") or {}),
        "model_label": model_label(recipe.get("model") or {}),
        "model_shape": model_shape(recipe.get("model") or {}),
        "problem": digest(problem),
        "problem_label": setting_label(recipe, meta, paper) if paper else data_label(recipe, meta),
        "adaptive_batch": bool(recipe.get("adaptive_batch")),
        "dataset": data.get("dataset"),
        "image_size": data.get("image_size"),
        "lr": recipe["optimizer"].get("lr"),
        "warmup_epochs": (recipe.get("schedule") or {}).get("warmup_epochs"),
        **sweep_place(recipe),
        "holdout_top1": math.nan,
        "planned_epochs": recipe.get("epochs"),
        "train_size": meta.get("train_size"),
        "holdout_size": meta.get("holdout_size") or 0,
        "commit": meta.get("git_commit") or "unknown",
        "kernels": kernels(meta),
        "library": library_of(recipe["optimizer"]["name"], meta),
        "val_size": meta.get("val_size"),
        "val_images": (meta.get("evaluated_images") or {}).get("val", meta.get("val_size")),
        "train_eval_images": (meta.get("evaluated_images") or {}).get(
            "train_eval", meta.get("train_eval_size") or meta.get("val_size")
        ),  # the runner's default subset: as many as val
        "stopped_at_target": bool(meta.get("stopped_at_target")),
        "target_top1": target,
        "train_time_s": float(meta.get("train_time_s") or math.nan),
        "evaluations": len(metrics),
        "epochs": math.nan,
        "steps": math.nan,
        "images": math.nan,
        **{name: math.nan for name in FINAL},
        "best_val_top1": math.nan,
        "best_val_top5": math.nan,
        "gap_top1": math.nan,
        "gap_loss": math.nan,
        **to_target(metrics, target, finished),
        **course,
        **step_stats(
            events,
            metrics,
            plan_batch,
            warmup_images=float((recipe.get("schedule") or {}).get("warmup_epochs") or 0)
            * float(meta.get("train_size") or 0),
            train_size=float(meta.get("train_size") or 0),
        ),
    }
    row.update(last_evaluation(metrics, diverged))
    return row, metrics.assign(run=str(run))


def last_evaluation(metrics: pd.DataFrame, diverged: bool) -> dict:
    """A run's figures at its last evaluation (summarize's row keys): where it got to, its best val Top-1, and,
    unless it diverged, its final accuracies and gaps; nothing before its first evaluation."""
    if not len(metrics):
        return {}
    last = metrics.iloc[-1]
    figures = {
        "epochs": last["epoch"],
        "steps": last["step"],
        "images": last["images_seen"],
        "best_val_top1": metrics["val_top1"].max(),
        "best_val_top5": metrics["val_top5"].max(),
    }
    if not diverged:
        figures.update({name: last[col] for name, col in FINAL.items()}, holdout_top1=last["holdout_top1"])
        figures.update(
            gap_top1=last["train_eval_top1"] - last["val_top1"], gap_loss=last["val_loss"] - last["train_eval_loss"]
        )
    return figures


def sweep_place(recipe: dict) -> dict:
    """Where `bench sweep` put a run (its recipe's tags): sweep, arm, role (trial or rerun), trial number and
    study; point_of: the arm whose selected point a matched rerun ran at; a run made outside a sweep is the arm of
    its optimizer's name, with no role."""
    tags = recipe.get("tags") or {}
    return {
        "sweep": tags.get("sweep"),
        "arm": tags.get("arm") or recipe["optimizer"]["name"],
        "role": tags.get("role"),
        "trial": tags.get("trial"),
        "sweep_study": tags.get("study"),
        "point_of": tags.get("point_of"),
        "select_metric": tags.get("select", "top1"),
    }


def refuse_sweep(runs: pd.DataFrame, command: str) -> None:
    """`command` (bench table compare, bench plot) takes each batch's best recipe by val Top-1 over every run it is
    given: over a sweep's runs (their tags name a sweep) that mixes one-seed trials, selected on that val set, with
    the reruns. One sentence (UserError) pointing at the sweep's own tables and figures, which read the reruns of
    each cell's selection; runs tagged by hand (tags.role: rerun, no sweep) stay the command's."""
    made = runs[runs["sweep"].notna()]
    if len(made):
        folders = " ".join(sorted({str(Path(run).parents[1]) for run in made["run"]}))
        raise UserError(
            f"{folders}: runs of bench sweep ({', '.join(sorted(set(made['sweep'])))}), which `{command}` does not "
            "read (it would pick each batch's best by val Top-1 over one-seed trials and reruns together); the "
            f"sweep's tables compare the reruns of each cell's selection (`bench table verdict|scaling|tuning "
            f"{folders}`) and `bench sweep SWEEP --plots DIR` draws its figures"
        )


def mean_std(values) -> tuple[float, float]:
    """Mean and sample std over runs; an infinite value (a missed target) makes the mean infinite, the std NaN."""
    values = pd.Series(values, dtype=float)
    if np.isinf(values).any():
        return math.inf, math.nan
    return values.mean(), values.std()


def _status_summary(statuses: pd.Series) -> str:
    counts = statuses.value_counts()
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def _common_name(names: list[str]) -> str:
    unique = sorted(set(names))
    if len(unique) == 1:
        return unique[0]
    prefix = unique[0]
    for name in unique[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix.rstrip("-_.")
    return f"{prefix}*" if prefix else "+".join(unique)


def once_per_seed(members: pd.DataFrame) -> pd.DataFrame:
    """One run per seed of a group: a second run of the same recipe and seed (run again by hand, or copied in)
    would count one seed twice; the finished one that ended last is kept, the others named."""
    if not members["seed"].duplicated().any():  # the usual case, and the sort below is most of a table's time
        return members
    ordered = members.sort_values(["finished", "end_time", "start_time", "run"], kind="stable")  # kept: last
    kept = ordered.drop_duplicates("seed", keep="last")
    for seed, twice in ordered[ordered.duplicated("seed", keep=False)].groupby("seed"):
        dropped = [r for r in twice["run"] if r not in set(kept["run"])]
        damaged(
            f"{', '.join(dropped)}: the same recipe and seed {seed} as {kept.loc[kept['seed'] == seed, 'run'].iloc[0]}"
            "; counted once (the finished run that ended last)"
        )
    return members.loc[members.index.isin(kept.index)]


def aggregate(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per group of seeds (see the module docstring)."""
    rows = []
    for group, members in runs[runs["status"] != "stopped"].groupby("group", sort=False):
        members = once_per_seed(members)
        finished = members[members["finished"]]
        used = finished if len(finished) else members
        first = members.iloc[0]
        row = {
            "group": group,
            "recipe": _common_name(list(members["recipe"])),
            "optimizer": first["optimizer"],
            "global_batch": first["global_batch"],
            "setting": first["setting"],
            "setting_label": first["setting_label"],
            "setting_keys": first["setting_keys"],
            "problem_keys": first["problem_keys"],
            "paper": first["paper"],
            "model": first["model"],
            "model_key": first["model_key"],
            "model_label": first["model_label"],
            "model_shape": first["model_shape"],
            "problem": first["problem"],
            "problem_label": first["problem_label"],
            "adaptive_batch": first["adaptive_batch"],
            "batch_varies": bool(members["batch_varies"].any()),
            "dataset": first["dataset"],
            "lr": first["lr"],
            "target_top1": first["target_top1"],
            "train_size": first["train_size"],
            "status": _status_summary(members["status"]),
            "seeds": ",".join(str(s) for s in sorted(used["seed"])),
            "n": len(used),
            "n_runs": len(members),
            "n_diverged": int(used["diverged"].sum()),
            "n_unstable": int((used["unstable"] & ~used["diverged"]).sum()),
            "n_reached": int(np.isfinite(used["steps_to_target"]).sum()),
            "runs": tuple(used["run"]),
            # the image sets' sizes (the smallest where runs differ): the figures' binomial floor
            "val_images": float(used["val_images"].min()) if used["val_images"].notna().any() else math.nan,
            "train_eval_images": float(used["train_eval_images"].min())
            if used["train_eval_images"].notna().any()
            else math.nan,
        }
        for m in AGG_METRICS:
            row[m], row[f"{m}_std"] = mean_std(used[m])
        row["unfinished"] = not len(finished)
        rows.append(row)
    groups = pd.DataFrame(rows)
    if len(groups):  # one name for two different recipes (e.g. edited between runs): tell them apart
        clash = groups["recipe"].duplicated(keep=False)
        groups.loc[clash, "recipe"] += " [" + groups.loc[clash, "group"] + "]"
    return (
        groups.sort_values(["setting_label", "global_batch", "optimizer", "recipe"], kind="stable", ignore_index=True)
        if len(groups)
        else groups
    )


def best_groups(groups: pd.DataFrame) -> dict[tuple, pd.Series]:
    """(setting, batch, optimizer) -> the group with the highest mean final val Top-1 (fewest steps to target on ties)."""
    ordered = groups.assign(_v=groups["val_top1"].fillna(-math.inf)).sort_values(
        ["_v", "steps_to_target"], ascending=[False, True], kind="stable"
    )
    out = {}
    for _, g in ordered.iterrows():
        out.setdefault((g["setting"], g["global_batch"], g["optimizer"]), g)
    return out


@dataclass
class Study:
    """Everything the tables and plots read, loaded once: the rows, the curves and each run's record (by the `run`
    the rows name), from which what the rows do not hold (events, recipe keys) is read without opening a file."""

    runs: pd.DataFrame
    curves: pd.DataFrame
    _groups: pd.DataFrame | None = field(default=None, repr=False)
    records: dict[str, Run] = field(default_factory=dict, repr=False)

    def record(self, run) -> Run:
        """The record of a run the rows name (their `run`)."""
        return self.records[str(run)]

    @property
    def groups(self) -> pd.DataFrame:
        if self._groups is None:
            self._groups = aggregate(self.runs)
        return self._groups

    def curves_of(self, runs) -> pd.DataFrame:
        return self.curves[self.curves["run"].isin(list(runs))]

    def mean_curve(self, runs) -> pd.DataFrame:
        """Mean and std over `runs` (seeds, which evaluate at the same steps) at each evaluation step:
        columns step, epoch, n, and <metric>, <metric>_std for val_top1 and train_eval_top1. Seeds of an
        adaptive-batch recipe reach an evaluation's epoch at different steps: their i-th evaluations are
        averaged (step and epoch too)."""
        c = self.curves_of(runs)
        agg = {"epoch": ("epoch", "mean"), "n": ("val_top1", "count")}
        for m in ("val_top1", "train_eval_top1"):
            agg.update({m: (m, "mean"), f"{m}_std": (m, "std")})
        steps = [tuple(s) for _, s in c.groupby("run", sort=False)["step"]]
        longest = max(steps, key=len, default=())
        if all(s == longest[: len(s)] for s in steps):  # the same evaluation steps (a diverged seed stops early)
            return c.groupby("step", as_index=False).agg(**agg)
        c = c.assign(evaluation=c.groupby("run").cumcount())
        return c.groupby("evaluation").agg(step=("step", "mean"), **agg).reset_index(drop=True)

    def reach(self, runs, threshold: float) -> dict[str, tuple[float, float]]:
        """(mean, std) over `runs` of steps/epochs/images/seconds to the first evaluation >= threshold."""
        finished = self.runs.set_index("run")["finished"]
        per_run = [to_target(self.curves_of([r]), threshold, bool(finished[r])) for r in runs]
        return {name: mean_std([t[name] for t in per_run]) for name in TO_TARGET}  # the grid is per run


def load_study(paths: list[str | Path], strict: bool = False) -> Study:
    """Every readable run at or below `paths`; a damaged run is named in a warning and left out (strict: it is
    an error)."""
    rows, curves, records = [], [], {}
    for run in find_runs(paths):
        try:
            record = read_run(run)
            row, curve = summarize(record)
        except UserError as e:
            if strict:
                raise
            damaged(f"{e}; this run is left out (--strict makes it an error)")
            continue
        rows.append(row)
        curves.append(curve)
        records[row["run"]] = record
    if not rows:
        raise UserError(f"{', '.join(map(str, paths))}: no readable run directories")
    return Study(pd.DataFrame(rows), pd.concat(curves, ignore_index=True), records=records)


def load(paths: list[str | Path], strict: bool = False) -> pd.DataFrame:
    """One row per run (columns: see the module docstring)."""
    return load_study(paths, strict).runs
