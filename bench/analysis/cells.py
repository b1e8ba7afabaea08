"""A tuned comparison's cells (`bench sweep`): per (arm, batch), what the search found and the reruns' figures,
the texts every table of a sweep shares (its title, its selection and provenance notes).

Runs are placed by their recipe's tags (results.sweep_place): role "trial" (one point of the search) or
"rerun" (the cell's best trial again, with other seeds). Definitions, each printed under its table:

- Each trial or rerun counts once (results.once_per_seed: its newest finished run); a killed ("stopped") run
  never counts.
- steps_to_result: the fewest steps to the target over the cell's trials that reached it, on the val set
  (Shallue et al. 2018: the best trial for this measure, chosen after the fact); inf when none reached it.
- median_study_steps: for each study (an independent repetition of the search), its fewest steps to the
  target; then the median over studies, a miss counting as infinity (AlgoPerf's time-to-result, in steps;
  steps rather than seconds because a shared CPU's wall time is no measure of an optimizer).
- The tuned figures (val Top-1, gap, steps to target) are those of the reruns: seeds other than the trials',
  so no selection luck is in them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.analysis import ladder, power, search
from bench.analysis.paper import display
from bench.analysis.render import Cell
from bench.analysis.results import Study, instability_text, numbers, once_per_seed
from bench.errors import UserError

CONFIDENCE = 1 - power.ALPHA


def sweep_runs(study: Study) -> pd.DataFrame:
    runs = study.runs[study.runs["role"].isin(["trial", "local", "rerun", "rerun_top", "matched"])]
    if not len(runs):
        raise UserError("no runs made by bench sweep here (runs whose recipe tags say role: trial or rerun)")
    return runs


def arms(runs: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(runs.sort_values(["trial", "run"], kind="stable")["arm"]))


def selects_on_steps(table_cells: pd.DataFrame) -> bool:
    """Whether the sweep ranked its trials on steps to the target (then its runs stop there: no final Top-1)."""
    return bool(len(table_cells)) and bool((table_cells["select_metric"] == "steps_to_target").all())


def secondary_steps_note(table_cells: pd.DataFrame) -> str:
    """For a sweep that selected every cell on the final Top-1, the sentence that says its steps to the target are a
    secondary reading (the scaling table's note, the steps figures' captions); otherwise ''."""
    if not len(table_cells) or not (table_cells["select_metric"] == "top1").all():
        return ""
    return (
        "This sweep selected each cell's point on the final Top-1 (select.metric top1), not on steps to the target: "
        "its steps to the target, and what is read from them, are a secondary reading of runs tuned for another "
        "question (a sweep with select.metric steps_to_target tunes each cell for them)."
    )


# what a scaling claim of such a sweep carries, so that it keeps the caveat when quoted alone
SECONDARY_TEXT = "a secondary reading (every cell selected on the final Top-1, not on steps to the target)"


def _min_steps(trials: pd.DataFrame) -> float:
    finished = trials[trials["finished"]]
    return float(finished["steps_to_target"].min()) if len(finished) else math.nan


def _min_steps_grid(trials: pd.DataFrame) -> float:
    """The resolution (steps_to_target_grid) of the trial with the fewest steps to the target."""
    reached = trials[trials["finished"] & np.isfinite(trials["steps_to_target"])]
    return float(reached.loc[reached["steps_to_target"].idxmin(), "steps_to_target_grid"]) if len(reached) else math.nan


def steps_cell(steps: float, grid: float, **kw) -> Cell:
    """Steps to target with their resolution: 'N (grid G)', the target crossed within the G steps before N."""
    note = f"grid {grid:,.0f}" if grid == grid and math.isfinite(steps) else ""
    return Cell(steps, kind="steps", note="; ".join(filter(None, [note, kw.pop("note", "")])), **kw)


def cells(study: Study) -> pd.DataFrame:
    """One row per (arm, batch): the trials' search and the reruns' figures (see the module docstring)."""
    runs = sweep_runs(study)
    specs = search.spaces(runs)  # each sweep's .sweep.yaml, read once
    rows = []
    for (arm, batch), members in runs.groupby(["arm", "global_batch"], sort=False):
        # each trial and rerun once (results.once_per_seed's rule), killed runs never
        members = members[members["status"] != "stopped"]
        members = pd.concat([once_per_seed(runs_of) for _, runs_of in members.groupby("recipe", sort=False)])
        trials = members[members["role"].isin(["trial", "local"])]  # local: the sweep's local stage
        done = members[(members["role"] == "rerun") & members["finished"]]
        trained = done[done["val_top1"].notna()]
        rows.append(
            {
                "arm": arm,
                "global_batch": int(batch),
                "optimizer": members["optimizer"].iloc[0],
                "n_trials": len(trials),
                "n_finished": int(trials["finished"].sum()),
                "n_infeasible": int((trials["finished"] & trials["val_top1"].isna()).sum()),
                "unstable": "; ".join(
                    f"{r['recipe']}: {instability_text(r)}"
                    for _, r in members[members["unstable"] & ~members["diverged"]].iterrows()
                ),
                **_selection(trials, members, done, trained),
                **_reruns(study, members, done, trained, batch),
                "linear_from": linear_from(specs.get(members["sweep"].iloc[0])),
                "images": float(members.loc[members["finished"], "images"].max())
                if members["finished"].any()
                else math.nan,
                "target_top1": members["target_top1"].iloc[0],
                "planned_epochs": members["planned_epochs"].iloc[0],
                "planned_images": float((members["planned_epochs"] * members["train_size"]).iloc[0]),
                "problem_label": members["problem_label"].iloc[0],
                "model_label": members["model_label"].iloc[0],
                "model_shape": members["model_shape"].iloc[0],
            }
        )
    table_cells = pd.DataFrame(rows).sort_values(["global_batch", "arm"], key=_arm_order(runs), ignore_index=True)
    return near_ties_from_seeds(table_cells)


def replaced_cells(study: Study, other: Study) -> tuple[Study, list[tuple[str, int]]]:
    """`study` with `other`'s sweep runs in place of its own in each (arm, batch) cell that `other` has (`bench
    table scaling PATH --cells OTHER`: a check's cells, searched otherwise, swapped into the study), and those
    cells in batch order. Every cell of `other` must be one of the study's: a swap adds no arm and no batch."""
    mine, theirs = sweep_runs(study), sweep_runs(other)
    have = set(zip(mine["arm"], mine["global_batch"].astype(int)))
    swapped = sorted(set(zip(theirs["arm"], theirs["global_batch"].astype(int))), key=lambda c: (c[1], c[0]))
    if foreign := [f"{display(a)} at {b:,}" for a, b in swapped if (a, b) not in have]:
        raise UserError(
            f"--cells: {', '.join(foreign)} {'is not a cell' if len(foreign) == 1 else 'are not cells'} of the "
            f"study ({', '.join(map(display, dict.fromkeys(mine['arm'])))} at "
            f"{', '.join(f'{b:,}' for b in sorted({b for _, b in have}))}): the cells swapped in replace the "
            "study's own, so each must be one of them"
        )
    key = pd.Series(list(zip(study.runs["arm"], study.runs["global_batch"])), index=study.runs.index)
    out = study.runs.index.isin(mine.index) & key.isin(swapped)
    runs = pd.concat([study.runs[~out], theirs], ignore_index=True)
    curves = pd.concat(
        [study.curves[~study.curves["run"].isin(study.runs.loc[out, "run"])], other.curves_of(theirs["run"])]
    )
    return Study(runs, curves.reset_index(drop=True), records={**study.records, **other.records}), swapped


def _selection(trials: pd.DataFrame, members: pd.DataFrame, done: pd.DataFrame, trained: pd.DataFrame) -> dict:
    """A cell's search: the split it selected on, its best trial and runner-up, whether they are a near tie, the
    steps to result over its trials and its studies."""
    by_steps = bool((members["select_metric"] == "steps_to_target").any())  # reruns carry their trial's tags
    column = search.selection_column(trials, by_steps)
    scored = trials[(trials["status"] == "completed") & trials[column].notna()]
    ranked = rank_trials(scored, column, by_steps)
    best = ranked.iloc[0] if len(ranked) else None
    runner_up = ranked.iloc[1][column] if len(ranked) > 1 else math.nan
    steps_tie = (  # a best that missed has no steps to tie on (its misses are ranked on Top-1)
        by_steps
        and len(ranked) > 1
        and math.isfinite(best["steps_to_target"])
        and ranked.iloc[1]["steps_to_target"] - best["steps_to_target"] < best["steps_to_target_grid"]
    )
    split = (
        best["holdout_size"]
        if best is not None and column == "holdout_top1"
        else (best["val_images"] if best is not None else math.nan)
    )
    se = selection_se(best[column], split) if best is not None else math.nan
    per_study = [_min_steps(t) for _, t in trials.groupby("sweep_study")]
    return {
        "selection": column,
        "best_trial": best["recipe"] if best is not None else None,
        "best_selection_top1": best[column] if best is not None else math.nan,
        "runner_up_top1": runner_up,
        "selection_se": se,
        "select_metric": "steps_to_target" if by_steps else "top1",
        "best_steps": best["steps_to_target"] if best is not None else math.nan,
        "runner_up_steps": ranked.iloc[1]["steps_to_target"] if len(ranked) > 1 else math.nan,
        "near_tie": bool(steps_tie if by_steps else best is not None and best[column] - runner_up < 2 * se),
        "rerun_selection": tuple(done[column]) if column in done else (),  # the reruns' seed noise
        "noise_scale": float(trained["noise_scale_window"].median()) if len(trained) else math.nan,
        "best_lr": best["lr"] if best is not None else math.nan,
        "best_warmup_epochs": best["warmup_epochs"] if best is not None else math.nan,
        "steps_to_result": _min_steps(trials),
        "steps_to_result_grid": _min_steps_grid(trials),
        "median_study_steps": float(np.median(per_study)) if per_study else math.nan,
        "n_studies": len(per_study),
    }


def _reruns(study: Study, members: pd.DataFrame, done: pd.DataFrame, trained: pd.DataFrame, batch: int) -> dict:
    """A cell's reruns (`done`: those that finished; `trained`: those with a final Top-1) and its runner-up's."""
    second = members[(members["role"] == "rerun_top") & members["finished"] & members["recipe"].str.contains("-top2-")]
    second_trained = second.dropna(subset=["val_top1"])
    return {
        "reruns": tuple(done["run"]),
        "n_reruns": len(done),
        "n_rerun_diverged": len(done) - len(trained),
        "val_top1": tuple(trained["val_top1"]),
        "gap_top1": tuple(trained["gap_top1"]),
        "train_eval_top1": tuple(trained["train_eval_top1"]),
        "val_images": tuple(trained["val_images"]),  # the image sets' sizes: their sampling error
        "train_eval_images": tuple(trained["train_eval_images"]),
        "seeds": tuple(trained["seed"]),
        "kernels": tuple(sorted(set(done["kernels"]))),
        "clip_frac": _mean_logged(study, trained["run"], "gsnr_clip_frac"),
        "runner_up_reruns": tuple(second["val_top1"].dropna()),
        "runner_up_seeds": tuple(second_trained["seed"]),
        "runner_up_gap": tuple(second_trained["gap_top1"]),
        "runner_up_rerun_steps": tuple(second["steps_to_target"]),
        "runner_up_rerun_grid": tuple(second["steps_to_target_grid"]),
        "runner_up_rerun_ran": tuple(second["steps"]),
        "runner_up_rerun_diverged": tuple(second["diverged"]),
        "rerun_steps": tuple(done["steps_to_target"]),
        "rerun_grid": tuple(done["steps_to_target_grid"]),
        "rerun_ran": tuple(done["steps"]),  # the steps each ran: a miss's lower bound (ladder.fit)
        "rerun_diverged": tuple(done["diverged"]),  # left out of the fit (ladder.selections)
        "rerun_seeds": tuple(done["seed"]),
        "rerun_budget": float(np.round(done["planned_epochs"] * done["train_size"] / batch).max())
        if len(done)
        else math.nan,  # the steps a rerun may run: a miss's chance under the fit (ladder.checks)
        "rerun_stopped": tuple(done["stopped_at_target"]),
    }


NEAR_TIE_Z = 1.0  # a runner-up within one standard deviation of the difference seed noise gives two trials


def seed_noise(cells_of: pd.DataFrame) -> float:
    """An arm's seed-to-seed standard deviation of what its selection ranks: log steps to the target (speed; the
    reruns that reached it) or the selection split's Top-1 (quality), pooled over its cells' reruns (each cell
    about its own mean, n - 1 degrees of freedom each); nan before two reruns of one cell finished."""
    squares, df = 0.0, 0
    for _, c in cells_of.iterrows():
        values = np.asarray(
            c["rerun_steps"] if c["select_metric"] == "steps_to_target" else c["rerun_selection"], float
        )
        values = values[np.isfinite(values)]
        if c["select_metric"] == "steps_to_target":
            values = np.log(values)
        if len(values) > 1:
            squares += float(((values - values.mean()) ** 2).sum())
            df += len(values) - 1
    return math.sqrt(squares / df) if df else math.nan


def near_ties_from_seeds(table_cells: pd.DataFrame) -> pd.DataFrame:
    """Each cell's near tie judged from its arm's seed noise (seed_noise) once reruns exist: the runner-up trial is
    within NEAR_TIE_Z x sqrt(2) x the noise of the best (log steps, or selection Top-1 points): one seed of each
    cannot tell them apart. Before any rerun the grid's (steps) or the split's binomial (Top-1) rule stands."""
    if not len(table_cells):
        return table_cells.assign(seed_noise=[])
    noise = {arm: seed_noise(c) for arm, c in table_cells.groupby("arm", sort=False)}
    table_cells = table_cells.assign(seed_noise=table_cells["arm"].map(noise))
    for i, c in table_cells.iterrows():
        sigma = c["seed_noise"]
        if sigma != sigma:
            continue
        margin = NEAR_TIE_Z * math.sqrt(2) * sigma
        if c["select_metric"] == "steps_to_target":
            tie = math.isfinite(c["best_steps"]) and math.log(c["runner_up_steps"] / c["best_steps"]) < margin
        else:
            tie = c["best_selection_top1"] - c["runner_up_top1"] < margin
        table_cells.at[i, "near_tie"] = bool(tie)
    return table_cells


def rank_trials(scored: pd.DataFrame, column: str, by_steps: bool) -> pd.DataFrame:
    """A cell's scored trials best first, as bench sweep ranks them: by `column` (select.metric top1), or (by_steps,
    select.metric steps_to_target) those that reached the target in the fewest val steps, then `column`."""
    if not by_steps:
        return scored.sort_values(column, ascending=False, kind="stable")
    key = scored.assign(_reached=np.isfinite(scored["steps_to_target"]), _steps=-scored["steps_to_target"])
    key["_steps"] = key["_steps"].where(key["_reached"], 0.0)
    order = key.sort_values(["_reached", "_steps", column], ascending=False, kind="stable").index
    return scored.loc[order]


def selection_se(top1: float, images) -> float:
    """The binomial standard error (pp) of a Top-1 of `top1` % measured on `images` images."""
    n = float(images or 0)
    if not n > 0 or top1 != top1:
        return math.nan
    p = top1 / 100
    return 100 * math.sqrt(max(p * (1 - p), 1 / n) / n)  # at least one image's worth where p is 0 or 1


def _mean_logged(study: Study, runs, key: str) -> float:
    """The mean over runs of each run's mean per-step `key` (its record's events); NaN where none logged it."""
    means = [numbers(study.record(run).events, key).mean() for run in runs]
    means = [m for m in means if m == m]
    return float(np.mean(means)) if means else math.nan


def _arm_order(runs: pd.DataFrame):
    order = {a: i for i, a in enumerate(arms(runs))}
    return lambda col: col.map(order) if col.name == "arm" else col


def mean_std_n(values) -> tuple[float, float, int]:
    v = np.asarray(values, dtype=float)
    if not len(v):
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else math.nan, len(v)


def never_rerun(c: pd.Series) -> bool:
    """Whether cell c gets no reruns however long its sweep runs: its trials all finished and every one diverged
    (no point to rerun); a cell without reruns otherwise waits for them."""
    return bool(c["n_trials"]) and c["n_finished"] == c["n_trials"] and not isinstance(c["best_trial"], str)


def rerun_cell(c: pd.Series, metric: str) -> Cell:
    mean, std, n = mean_std_n(c[metric])
    note = f"{c['n_rerun_diverged']} diverged" if c["n_rerun_diverged"] else ""
    if not n:
        return Cell(None, note=f"all {c['n_reruns']} diverged" if c["n_reruns"] else "no reruns")
    return Cell(mean, std, n, note)


def median_steps(samples) -> float:
    return float(np.median(np.asarray(samples, float))) if len(samples) else math.nan


def median_steps_ci(steps) -> tuple[float, float, float] | None:
    """(low, high, exact coverage) of a cell's reruns' median steps from order statistics (power.median_interval;
    the scaling table's and the steps figure's); None for a median that missed or fewer than two reruns."""
    steps = np.asarray(steps, float)
    if len(steps) < 2 or not math.isfinite(median_steps(steps)):
        return None
    return power.median_interval(steps)


def linear_from(spec: dict | None) -> str:
    """Where a sweep's critical batch measures linear scaling from (its `.sweep.yaml`'s scaling.linear_from, default
    the ladder's smallest batch; ladder.LINEAR_FROM)."""
    return ((spec or {}).get("scaling") or {}).get("linear_from", ladder.LINEAR_FROM[0])


def provenance_notes(study: Study) -> list[str]:
    """The commits, kernel platforms and optimizer libraries the sweep's runs came from; a warning line when they
    differ, one counting the dirty runs (a study's pairs must come from one code version and one platform: AVX2
    and AVX-512 kernels moved one run by 0.6 pp)."""
    runs = sweep_runs(study)
    runs = runs[runs["finished"]]
    commits = sorted({c[:7] + "+dirty" * c.endswith("+dirty") for c in runs["commit"]})
    platforms = sorted(set(runs["kernels"]))
    libraries = runs["library"][runs["library"] != ""]  # runs made before bench recorded them name none
    notes = [
        f"Provenance: {len(runs)} finished runs from commit{'s' * (len(commits) > 1)} {', '.join(commits)} on "
        f"{'; '.join(platforms)}"
        + (f"; optimizer libraries {', '.join(sorted(set(libraries)))}." if len(libraries) else ".")
    ]
    dirty = int(runs["commit"].str.endswith("+dirty").sum())
    if len(commits) > 1 or dirty:
        notes.append(
            "Warning: the runs come from more than one code version or from an uncommitted tree; a reviewer "
            "cannot rerun them from one commit."
        )
    if dirty:
        notes.append(
            f"Warning: {dirty} of the {len(runs)} runs are dirty (commit +dirty): made from a checkout with "
            "uncommitted changes, so no commit holds what they ran."
        )
    for package, versions in libraries.groupby(libraries.str.split(" ").str[0]):
        if versions.nunique() > 1:
            notes.append(
                f"Warning: the runs come from more than one version of {package} ("
                + "; ".join(f"{v.split(' ')[1]}: {n} runs" for v, n in sorted(versions.value_counts().items()))
                + "); a reviewer cannot rerun them with one."
            )
    if len(platforms) > 1:
        notes.append(
            "Warning: the runs come from more than one kernel platform ("
            + "; ".join(f"{p}: {n} runs" for p, n in runs["kernels"].value_counts().items())
            + "): the kernel path moves results "
            "by more than rounding, so pairs across platforms carry that difference as noise or bias."
        )
    return notes


def selection_notes(table_cells: pd.DataFrame) -> list[str]:
    """Which split the trials selected on; only cells with trials have one (reruns alone hold no selection)."""
    tried = table_cells[table_cells["n_trials"] > 0]
    if not len(tried):
        return [
            "No trials in this tree (reruns only): how and on which images the reruns' points were selected is not "
            "known here; the reruns' own figures are not selected on."
        ]
    used = set(tried["selection"])
    if used == {"holdout_top1"}:
        return ["Selection used held-out training images (data.holdout), never the validation set."]
    if set(tried["select_metric"]) == {"steps_to_target"}:
        where = "(its steps to the target, as Shallue et al. measure steps to result)"
    elif used == {"val_top1"}:
        where = "(the trials held no images out)"
    else:
        where = "where a cell's trials held no images out"
    return [
        f"Selection used the validation set {where}: the trials' val figures are optimistic; the reruns' are not "
        "selected on."
    ]


def title(head: str, table_cells: pd.DataFrame) -> str:
    return f"{head} ({describe(table_cells)})"


def describe(table_cells: pd.DataFrame) -> str:
    """Dataset, model, budget, trials and seeds: what every figure and table of a sweep says it is. Trials and
    seeds as most cells ran them, then each other cell's ('2 seeds per rerun (Lion at 64: no reruns, every trial
    diverged)')."""
    first = table_cells.iloc[0]
    epochs = sorted({epochs_text(e, table_cells) for e in table_cells["planned_epochs"]}, key=float)
    budget = f"{epochs[0]} epochs"
    if len(epochs) > 1:  # epochs that differ with the training set's size are still one image budget
        one_budget = table_cells["planned_images"].round().nunique() == 1
        budget = f"{epochs[0]}-{epochs[-1]} epochs ({'one image budget' if one_budget else 'by batch'})"
    trials = [f"{n} trial{'s' * (n != 1)}" if n else "no trials in this tree" for n in table_cells["n_trials"]]
    seeds = [_reruns_text(c) for _, c in table_cells.iterrows()]
    tried, rerun = _per_cell(table_cells, trials, "per cell"), _per_cell(table_cells, seeds, "per rerun")
    return f"{first['problem_label']}, {first['model_shape']}, {budget} per run, {tried}, {rerun}"


def epochs_text(epochs: float, table_cells: pd.DataFrame) -> str:
    """Planned epochs as the budget meant them: a run takes whole steps (ceil of an epochs budget, the nearest of
    an images budget), so its epochs lie within one step of the budget's; the shortest number within the smallest
    step of the cells planned so ('8' for 7.9872 at 2,048 of 17,000 images a step; at most 6 decimals)."""
    if "planned_images" not in table_cells:  # no step to measure against
        return f"{epochs:.3g}"
    same = table_cells[table_cells["planned_epochs"] == epochs]
    steps = same["global_batch"].astype(float) * epochs / same["planned_images"].astype(float)  # batch / train size
    step = float(steps.min()) if len(steps) and epochs else 0.0
    digits = next((d for d in range(6) if abs(round(epochs, d) - epochs) <= step), 6)
    return f"{round(epochs, digits):g}"


def _reruns_text(c: pd.Series) -> str:
    """Cell c's reruns in words: '5 seeds', 'no reruns yet' (its sweep can still run them), or why it has none."""
    if c["n_reruns"]:
        return f"{c['n_reruns']} seed{'s' * (c['n_reruns'] != 1)}"
    return "no reruns, every trial diverged" if never_rerun(c) else "no reruns yet"


def _per_cell(table_cells: pd.DataFrame, texts: list[str], unit: str) -> str:
    """The text most cells have (a count with its `unit`: '8 trials per cell'), then in brackets each other one
    with its cells: '(batch 64: 4 trials; Lion at 128: 6 trials)', a batch where every arm has it."""
    arms_at = table_cells["global_batch"].value_counts()
    cells_of: dict[str, dict[int, list[str]]] = {}
    for (_, c), text in zip(table_cells.iterrows(), texts):
        cells_of.setdefault(text, {}).setdefault(c["global_batch"], []).append(display(c["arm"]))
    usual = max(cells_of, key=lambda text: sum(map(len, cells_of[text].values())))
    others = [
        ", ".join(
            f"batch {batch:,}" if len(names) == arms_at[batch] else ", ".join(f"{n} at {batch:,}" for n in names)
            for batch, names in batches.items()
        )
        + f": {text}"
        for text, batches in cells_of.items()
        if text != usual
    ]
    return (f"{usual} {unit}" if usual[0].isdigit() else usual) + (f" ({'; '.join(others)})" if others else "")
