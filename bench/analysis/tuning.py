"""The analysis of a tuned comparison (`bench sweep`): per (arm, batch) cell, what tuning found, and for each
pair of arms at each batch, the verdict.

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
- Verdict on val Top-1 (bench/analysis/power.py): the difference of the reruns' means, X - Y, with its 95%
  interval, paired by seed when both sides reran the same seeds (same initialisation and data order), else
  Welch's; its p-value, and that p Holm-adjusted within its family: the primary question (PRIMARY: VRGD-LARS
  against LARS, one test per batch) or the secondary comparisons (every other pair at every batch). "X better"
  / "Y better" when the adjusted p is under 0.05, else "within noise (could detect ≥ MDE pp)": the minimum
  detectable effect at 80% power at the observed noise and seeds; "seeds for 1 pp" says how many seeds per
  side would detect a 1-point difference at that noise. A diverged rerun has no final accuracy and is left out
  of its side's mean (the row says so); a side whose reruns all diverged loses to one that trained. The gap
  difference gets the same interval; the steps ratio X / Y is the ratio of median steps to target (a miss =
  ∞) with a percentile bootstrap interval over the seeds (ties on the evaluation grid and misses need no
  assumption), given when both medians are finite.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from bench.analysis import power
from bench.analysis.paper import display
from bench.analysis.render import NO_NUMBER, Cell, Table
from bench.analysis.results import Study, instability_text, numbers, once_per_seed, read_events
from bench.errors import UserError

CONFIDENCE = 1 - power.ALPHA
PRIMARY = ("vrgd_lars", "lars")  # the study's declared question: its own Holm family, one test per batch
PLAN_EFFECT = 1.0  # pp: "seeds for 1 pp" plans the next study at the observed noise


def sweep_runs(study: Study) -> pd.DataFrame:
    runs = study.runs[study.runs["role"].isin(["trial", "rerun"])]
    if not len(runs):
        raise UserError("no runs made by bench sweep here (runs whose recipe tags say role: trial or rerun)")
    return runs


def arms(runs: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(runs.sort_values(["trial", "run"], kind="stable")["arm"]))


def selection_column(trials: pd.DataFrame) -> str:
    """holdout_top1 when the trials held images out, else val_top1 (then selection used the validation set)."""
    return "holdout_top1" if trials["holdout_top1"].notna().any() else "val_top1"


def _min_steps(trials: pd.DataFrame) -> float:
    finished = trials[trials["finished"]]
    return float(finished["steps_to_target"].min()) if len(finished) else math.nan


def cells(study: Study) -> pd.DataFrame:
    """One row per (arm, batch): the trials' search and the reruns' figures (see the module docstring)."""
    runs = sweep_runs(study)
    rows = []
    for (arm, batch), members in runs.groupby(["arm", "global_batch"], sort=False):
        # each trial and rerun once (results.once_per_seed's rule), killed runs never
        members = members[members["status"] != "stopped"]
        members = pd.concat([once_per_seed(runs_of) for _, runs_of in members.groupby("recipe", sort=False)])
        trials, reruns = members[members["role"] == "trial"], members[members["role"] == "rerun"]
        column = selection_column(trials)
        scored = trials[(trials["status"] == "completed") & trials[column].notna()]
        best = scored.loc[scored[column].idxmax()] if len(scored) else None
        per_study = [_min_steps(t) for _, t in trials.groupby("sweep_study")]
        done = reruns[reruns["finished"]]
        trained = done[done["val_top1"].notna()]
        rows.append({
            "arm": arm, "global_batch": int(batch), "optimizer": members["optimizer"].iloc[0],
            "n_trials": len(trials), "n_finished": int(trials["finished"].sum()),
            "n_infeasible": int((trials["finished"] & trials["val_top1"].isna()).sum()),
            "unstable": "; ".join(f"{r['recipe']}: {instability_text(r)}" for _, r in
                                  members[members["unstable"] & ~members["diverged"]].iterrows()),
            "selection": column, "best_trial": best["recipe"] if best is not None else None,
            "best_selection_top1": best[column] if best is not None else math.nan,
            "best_lr": best["lr"] if best is not None else math.nan,
            "best_warmup_epochs": best["warmup_epochs"] if best is not None else math.nan,
            "steps_to_result": _min_steps(trials),
            "median_study_steps": float(np.median(per_study)) if per_study else math.nan,
            "n_studies": len(per_study),
            "reruns": tuple(done["run"]), "n_reruns": len(done), "n_rerun_diverged": len(done) - len(trained),
            "val_top1": tuple(trained["val_top1"]), "gap_top1": tuple(trained["gap_top1"]),
            "seeds": tuple(trained["seed"]),
            "clip_frac": _mean_logged(trained["run"], "gsnr_clip_frac"),
            "rerun_steps": tuple(done["steps_to_target"]),
            "images": float(members.loc[members["finished"], "images"].max()) if members["finished"].any() else math.nan,
            "target_top1": members["target_top1"].iloc[0], "planned_epochs": members["planned_epochs"].iloc[0],
            "problem_label": members["problem_label"].iloc[0], "model_label": members["model_label"].iloc[0],
        })
    return pd.DataFrame(rows).sort_values(["global_batch", "arm"], key=_arm_order(runs), ignore_index=True)


def _mean_logged(runs, key: str) -> float:
    """The mean over runs of each run's mean per-step `key` (events.jsonl); NaN where none logged it."""
    means = [numbers(read_events(run), key).mean() for run in runs]
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


def verdict_word(x: str, y: str, cell_x: pd.Series, cell_y: pd.Series, c: power.Comparison | None,
                 p_holm: float, detectable: float) -> str:
    """'X better' / 'Y better' when the family's Holm-adjusted p is under ALPHA; else 'within noise', with the
    smallest effect the comparison could have detected."""
    tx, ty = len(cell_x["val_top1"]), len(cell_y["val_top1"])
    if not cell_x["n_reruns"] or not cell_y["n_reruns"]:
        return "no reruns yet"
    if not tx or not ty:
        return "both diverged" if not tx and not ty else f"{display(x if tx else y)} better (the other diverged)"
    if c is None:
        return "too few seeds"
    if p_holm < power.ALPHA:
        return f"{display(x) if c.diff > 0 else display(y)} better"
    return f"within noise (could detect ≥ {detectable:.1f} pp)" if detectable == detectable else "within noise"


BOOTSTRAP = 2000  # resamples of the steps ratio's interval (a fixed generator: the same table every time)


def steps_ratio(cell_x: pd.Series, cell_y: pd.Series) -> Cell:
    """median steps to target of X's reruns / Y's, a miss counting as infinitely many steps (so a median is
    infinite when half or more missed), with a 95% percentile bootstrap interval over the seeds of each side:
    ties (steps on the evaluation grid) and misses need no log-normal assumption."""
    sx, sy = np.asarray(cell_x["rerun_steps"], float), np.asarray(cell_y["rerun_steps"], float)
    if not len(sx) or not len(sy):
        return Cell(None, kind="ratio")
    missed = [f"{display(c['arm'])} missed {int(np.isinf(s).sum())}/{len(s)}"
              for c, s in ((cell_x, sx), (cell_y, sy)) if not np.isfinite(s).all()]
    note = "; ".join(missed)

    def ratio(x, y):
        mx, my = np.median(x, axis=-1), np.median(y, axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(np.isinf(mx) & np.isinf(my), np.nan, mx / my)

    point = float(ratio(sx, sy))
    if not 0 < point < math.inf:  # a side's median is a miss: no number (0.00 or ∞ would read as a speedup)
        return Cell(None, note=note, kind="ratio")
    rng = np.random.default_rng(0)
    boot = ratio(rng.choice(sx, (BOOTSTRAP, len(sx))), rng.choice(sy, (BOOTSTRAP, len(sy))))
    boot = boot[~np.isnan(boot)]
    if not len(boot) or min(len(sx), len(sy)) < 2:
        return Cell(point, kind="ratio", note=note)
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    return Cell(point, kind="ratio", ci=(float(low), float(high)) if low != high else None, note=note)  # no spread


def verdict(study: Study, baseline: str | None = None) -> Table:
    """For each batch and pair of arms (or each arm against `baseline`): differences with 95% intervals, p-values
    Holm-adjusted within their family, the minimum detectable effect, and a word (see the module docstring)."""
    table_cells = cells(study)
    names = arms(sweep_runs(study))
    if baseline is not None and baseline not in names:
        raise UserError(f"--baseline '{baseline}': not an arm of these sweeps; the arms are {', '.join(names)}")
    pairs = [(x, baseline) for x in names if x != baseline] if baseline else list(itertools.combinations(names, 2))
    table = Table(_title("Verdict: tuned optimizers compared at each global batch", table_cells),
                  ["batch", "X", "Y", "family", "val Top-1 X", "val Top-1 Y", "Δ val Top-1 (X − Y)", "test",
                   "p", "p Holm", "MDE 80%", f"seeds for {PLAN_EFFECT:g} pp", "Δ gap (X − Y)", "steps to target X / Y",
                   "verdict"])
    rows = []
    for batch, at in table_cells.groupby("global_batch", sort=True):
        by_arm = {c["arm"]: c for _, c in at.iterrows()}
        for x, y in pairs:
            if x in by_arm and y in by_arm:
                cx, cy = by_arm[x], by_arm[y]
                family = "primary" if {x, y} == set(PRIMARY) else "secondary"
                rows.append((int(batch), x, y, cx, cy, family,
                             power.compare(cx["val_top1"], cy["val_top1"], cx["seeds"], cy["seeds"])))
    adjusted = {}
    for family in ("primary", "secondary"):
        members = [i for i, r in enumerate(rows) if r[5] == family]
        for i, p in zip(members, power.holm([rows[i][6].p if rows[i][6] else math.nan for i in members])):
            adjusted[i] = p
    for i, (batch, x, y, cx, cy, family, c) in enumerate(rows):
        detectable = power.comparison_mde(c) if c else math.nan
        sd = lambda cell: mean_std_n(cell["val_top1"])[1]  # noqa: E731
        seeds = power.seeds_to_resolve(PLAN_EFFECT, c, sd(cx), sd(cy)) if c else None
        gap = power.compare(cx["gap_top1"], cy["gap_top1"], cx["seeds"], cy["seeds"])
        table.rows.append([
            batch, display(x), display(y), family, _rerun_cell(cx, "val_top1"), _rerun_cell(cy, "val_top1"),
            Cell(c.diff, kind="pct", ci=(c.low, c.high)) if c else Cell(None, kind="pct"), c.test if c else NO_NUMBER,
            Cell(c.p if c else None, kind="p"), Cell(adjusted[i], kind="p"), Cell(detectable, kind="pct"),
            Cell(seeds, kind="int") if seeds else Cell(None, note="> 1000" if c else NO_NUMBER, kind="int"),
            Cell(gap.diff, kind="pct", ci=(gap.low, gap.high)) if gap else Cell(None, kind="pct"),
            steps_ratio(cx, cy), verdict_word(x, y, cx, cy, c, adjusted[i], detectable)])
    primary = [r for r in rows if r[5] == "primary"]
    pooled = power.pooled([r[6] for r in primary]) if len(primary) > 1 else None
    if pooled is not None:
        x, y = primary[0][1], primary[0][2]
        detectable = power.comparison_mde(pooled)
        word = (f"{display(x) if pooled.diff > 0 else display(y)} better on average" if pooled.p < power.ALPHA
                else f"within noise (could detect ≥ {detectable:.1f} pp on average)")
        table.rows.append(["all (pooled)", display(x), display(y), "exploratory", Cell(None), Cell(None),
                           Cell(pooled.diff, kind="pct", ci=(pooled.low, pooled.high)), pooled.test,
                           Cell(pooled.p, kind="p"), Cell(None, kind="p"), Cell(detectable, kind="pct"),
                           Cell(None, kind="int"), Cell(None, kind="pct"), Cell(None, kind="ratio"), word])
    table.notes = [
        "val Top-1 X / Y: final val Top-1 (%) of the best trial's reruns (seeds other than the trials'), mean ± sample "
        "std (n = reruns that trained; diverged ones named).",
        f"Δ: difference of the reruns' means with its {CONFIDENCE:.0%} interval [low, high], uncorrected; test: "
        "'paired' (the per-seed differences' t interval, when both sides reran the same seeds) or 'Welch' (unequal "
        "variances); gap = train-eval Top-1 − val Top-1 (pp).",
        f"p: the test's two-sided p-value; p Holm: adjusted by Holm's step-down method within the family, 'primary' "
        f"= {display(PRIMARY[0])} against {display(PRIMARY[1])} at each batch (the declared question), 'secondary' = "
        "every other comparison in this table; 'exploratory' = the primary pair's average difference over the "
        "batches with the pooled sd of its per-seed differences (power.pooled: assumes equal noise at every batch; "
        "another question than the declared one, so not in its family and not Holm-adjusted).",
        "verdict (on val Top-1): 'X better' / 'Y better' when p Holm < 0.05; else 'within noise (could detect ≥ MDE "
        "pp)'. MDE 80%: the smallest true difference this test detects with 80% power at the observed noise and "
        f"seeds (noncentral t); seeds for {PLAN_EFFECT:g} pp: seeds per side that would detect a {PLAN_EFFECT:g}-point "
        "difference with 80% power at the same noise (docs/algorithms.md, 'What a verdict can detect').",
        "steps to target X / Y: ratio of the reruns' median steps to the first evaluation ≥ the target (a miss counts "
        "as ∞, so half or more misses make a median ∞), with a 95% percentile bootstrap interval over each side's "
        "seeds; < 1: X reaches the target in fewer steps. Steps lie on the evaluation grid (one evaluation every "
        "fixed number of images), which the interval's ties reflect.",
        *_selection_notes(table_cells),
    ]
    return table


def _rerun_cell(c: pd.Series, metric: str) -> Cell:
    mean, std, n = mean_std_n(c[metric])
    note = f"{c['n_rerun_diverged']} diverged" if c["n_rerun_diverged"] else ""
    if not n:
        return Cell(None, note=f"all {c['n_reruns']} diverged" if c["n_reruns"] else "no reruns")
    return Cell(mean, std, n, note)


def tuning(study: Study, baseline: str | None = None) -> Table:
    """Per (arm, batch): the search (trials, infeasible, best point), steps to result, and the reruns' figures."""
    table_cells = cells(study)
    table = Table(_title("Tuning: each optimizer at each global batch", table_cells),
                  ["batch", "arm", "images per run", "trials", "infeasible", "best trial", "best lr", "best warm-up (epochs)",
                   "best selection Top-1", "steps to result", "median over studies", "val Top-1 (reruns)",
                   "gap Top-1 (reruns)", "steps to target (reruns)", "GSNR clipped (reruns)", "instabilities"])
    for _, c in table_cells.iterrows():
        steps = np.asarray(c["rerun_steps"], float)
        reached = f"{int(np.isfinite(steps).sum())}/{len(steps)} reached" if len(steps) else "no reruns"
        mean_steps = Cell(*mean_std_n(steps)[:2], kind="steps", note=reached) if np.isfinite(steps).all() and len(
            steps) else Cell(None, note=reached, kind="steps")
        table.rows.append([
            c["global_batch"], display(c["arm"]), Cell(c["images"], kind="images"),
            f"{c['n_finished']}/{c['n_trials']}", c["n_infeasible"],
            c["best_trial"] if isinstance(c["best_trial"], str) else NO_NUMBER, Cell(c["best_lr"], kind="float"), Cell(c["best_warmup_epochs"], kind="epochs"),
            Cell(c["best_selection_top1"]), Cell(c["steps_to_result"], kind="steps"),
            Cell(c["median_study_steps"], kind="steps"), _rerun_cell(c, "val_top1"), _rerun_cell(c, "gap_top1"),
            mean_steps, Cell(100 * c["clip_frac"], kind="pct"), c["unstable"]])
    table.notes = [
        "images per run: the training images a finished run of the cell saw (its steps x the batch: one budget "
        "gives every batch the same images to within one step).",
        "trials: finished / planned; infeasible: finished without a final accuracy (diverged: a non-finite loss, "
        "Top-1 at chance, or a loss spike that never came back below the first step's loss).",
        "instabilities: the trials and reruns whose loss spiked (an evaluation interval's mean training loss over "
        "2 x the first step's) and came back: their largest interval loss and its step; they keep their numbers.",
        "best trial: highest final Top-1 on the selection split (bench sweep's select.metric top1).",
        "steps to result: the fewest steps to the target over the trials (val set; Shallue et al. 2018); "
        "median over studies: each study's fewest, median over studies, a miss = ∞ (AlgoPerf); ∞: no trial reached it.",
        "reruns: the best trial with other seeds; mean ± sample std (n).",
        "GSNR clipped: VRGD's share of live coordinates (a non-zero gradient in some group) whose GSNR factor was "
        "clipped to γ (percent, per step, averaged over the reruns' steps); pure noise would clip a share set by "
        "the group count k (docs/algorithms.md).",
        *_selection_notes(table_cells),
    ]
    return table


def _selection_notes(table_cells: pd.DataFrame) -> list[str]:
    used = set(table_cells["selection"])
    if used == {"holdout_top1"}:
        return ["Selection used held-out training images (data.holdout), never the validation set."]
    return ["Selection used the validation set (no images were held out): the trials' val figures are optimistic; "
            "the reruns' are not selected on."]


def _title(head: str, table_cells: pd.DataFrame) -> str:
    return f"{head} ({describe(table_cells)})"


def describe(table_cells: pd.DataFrame) -> str:
    """Dataset, model, budget, trials and seeds: what every figure and table of a sweep says it is."""
    first = table_cells.iloc[0]
    trials = sorted(set(table_cells["n_trials"]))
    seeds = sorted(set(table_cells["n_reruns"]))
    show = lambda xs: "/".join(map(str, xs))  # noqa: E731
    epochs = sorted(set(table_cells["planned_epochs"]))
    budget = f"{epochs[0]:g} epochs" if len(epochs) == 1 else f"{epochs[0]:.3g}-{epochs[-1]:.3g} epochs (one image budget)"
    return (f"{first['problem_label']}, {first['model_label']}, {budget} per run, "
            f"{show(trials)} trials per cell, {show(seeds)} seeds per rerun")


def performance_profile(table_cells: pd.DataFrame, taus: np.ndarray) -> dict[str, np.ndarray]:
    """arm -> fraction of batches at which its steps to result is within tau x the best arm's (AlgoPerf's
    performance profile, over batches); a miss never counts."""
    best = table_cells.groupby("global_batch")["steps_to_result"].min()
    out = {}
    for arm, c in table_cells.groupby("arm", sort=False):
        ratio = (c["steps_to_result"] / c["global_batch"].map(best)).to_numpy()
        ratio = np.where(np.isfinite(ratio), ratio, np.inf)
        out[arm] = np.array([(ratio <= t).mean() for t in taus])
    return out
