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
  Welch's; its p-value, and that p Holm-adjusted within its family: a primary pair, one test per batch, each pair
  a family of its own (primary_pairs: each arm against --baseline, else the sweep file's `primary`, else PRIMARY:
  VRGD-LARS against LARS), or the secondary comparisons (every other pair at every batch), one family. "X better" / "Y better" when the
  adjusted p is under 0.05, else "within noise (could detect ≥ MDE pp)": the minimum
  detectable effect at 80% power at the observed noise and seeds; "seeds for 1 pp" says how many seeds per
  side would detect a 1-point difference at that noise. A diverged rerun has no final accuracy and is left out
  of its side's mean (the row says so); a side whose reruns all diverged loses to one that trained. The gap
  difference gets the same interval; the steps ratio X / Y is the median of the pairwise ratios of the reruns'
  steps to target (Hodges-Lehmann; a miss = ∞) with the exact Mann-Whitney interval and its attained coverage
  (power.ratio_interval: distribution-free, no resampling), given when the misses leave that median finite; a
  speed verdict needs that interval at the family's level, which 2 vs 2 reruns cannot reach ("too few seeds").
  Where a selection was a near tie, a verdict word stands only if the runner-up's reruns agree
  (near_tie_word); each row's conclusion ends the table as a sentence (render.claim).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from bench.analysis import ladder, power, search
from bench.analysis.paper import display
from bench.analysis.render import NO_NUMBER, Cell, Table, claim
from bench.analysis.results import NOISE_WINDOW, Study, instability_text, numbers, once_per_seed
from bench.errors import UserError
from bench.rundir import METRICS, RECIPE

CONFIDENCE = 1 - power.ALPHA
PRIMARY = ("vrgd_lars", "lars")  # the study's declared question: its own Holm family, one test per batch
PLAN_EFFECT = 1.0  # pp: "seeds for 1 pp" plans the next study at the observed noise


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
        reruns = members[members["role"] == "rerun"]
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
        done = reruns[reruns["finished"]]
        trained = done[done["val_top1"].notna()]
        second = members[
            (members["role"] == "rerun_top") & members["finished"] & members["recipe"].str.contains("-top2-")
        ]
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
                "runner_up_seeds": tuple(second.dropna(subset=["val_top1"])["seed"]),
                "runner_up_gap": tuple(second.dropna(subset=["val_top1"])["gap_top1"]),
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


def verdict_word(
    x: str, y: str, cell_x: pd.Series, cell_y: pd.Series, c: power.Comparison | None, p_holm: float, detectable: float
) -> str:
    """'X better' / 'Y better' when the family's Holm-adjusted p is under ALPHA; else 'within noise', with the
    smallest effect the comparison could have detected."""
    tx, ty = len(cell_x["val_top1"]), len(cell_y["val_top1"])
    if not tx or not ty:
        return "both diverged" if not tx and not ty else f"{display(x if tx else y)} better (the other diverged)"
    if c is None:  # fewer than 2 trained a side, or no spread at all: no test
        return f"too few seeds: {tx} vs {ty} trained, a test needs 2 a side" if min(tx, ty) < 2 else "no spread to test"
    if p_holm < power.ALPHA:
        return f"{display(x) if c.diff > 0 else display(y)} better"
    return f"within noise (could detect ≥ {detectable:.1f} pp)" if detectable == detectable else "within noise"


class StepsRatio(NamedTuple):
    """X's reruns' steps to target over Y's (power.ratio_interval at `confidence`; None: fewer than 2 reruns a
    side), what the table says beside it (misses, an unresolved difference) and the reruns a side."""

    ratio: power.Ratio | None
    notes: list[str]
    seeds: tuple[int, int] = (0, 0)
    confidence: float = CONFIDENCE

    @property
    def unresolved(self) -> bool:
        return any(n.startswith("unresolved") for n in self.notes)

    @property
    def number(self) -> bool:
        return self.ratio is not None and 0 < self.ratio.point < math.inf

    def too_few(self) -> str:
        """'' where the reruns reach `confidence`; else how far they reach and how many a side would reach it (an
        interval short of the family's level declares nothing)."""
        if self.ratio is not None and self.ratio.coverage >= self.confidence - 1e-12:
            return ""
        n, m = self.seeds
        reach = f"reach at most {power.coverage_text(self.ratio.coverage)}" if self.ratio else "give no interval"
        k, coverage = power.ratio_seeds(self.confidence)
        return (
            f"too few seeds for {power.coverage_text(self.confidence)}: {n} vs {m} {reach}; {k} vs {k} reach "
            f"{power.coverage_text(coverage)}"
        )


def steps_ratio_of(cell_x: pd.Series, cell_y: pd.Series, confidence: float = CONFIDENCE) -> StepsRatio:
    """X / Y of the reruns' steps to target, a miss counting as infinitely many steps: the median of the pairwise
    ratios (Hodges-Lehmann) with the exact Mann-Whitney interval at `confidence` or just above it; 'unresolved'
    when the two medians lie within one evaluation grid of each other (<=)."""
    sx, sy = np.asarray(cell_x["rerun_steps"], float), np.asarray(cell_y["rerun_steps"], float)
    notes = [
        f"{display(c['arm'])} missed {int(np.isinf(s).sum())}/{len(s)}"
        for c, s in ((cell_x, sx), (cell_y, sy))
        if not np.isfinite(s).all()
    ]
    grids = np.asarray([*cell_x.get("rerun_grid", ()), *cell_y.get("rerun_grid", ())], float)
    grid = float(np.nanmax(grids)) if np.isfinite(grids).any() else math.nan
    mx, my = (np.median(s) if len(s) else math.nan for s in (sx, sy))
    if math.isfinite(mx) and math.isfinite(my) and abs(mx - my) <= grid:  # crossed within one evaluation interval
        notes.append(f"unresolved: the medians differ by no more than the grid of {grid:,.0f} steps")
    return StepsRatio(power.ratio_interval(sx, sy, confidence), notes, (len(sx), len(sy)), confidence)


def steps_ratio(cell_x: pd.Series, cell_y: pd.Series, confidence: float = CONFIDENCE) -> Cell:
    """steps_ratio_of as a table cell: 'point [low, high] (coverage)'; no number when the misses leave the median
    undetermined or infinite (0.00 or ∞ would read as a speedup)."""
    r = steps_ratio_of(cell_x, cell_y, confidence)
    if not r.number:
        return Cell(None, kind="ratio", note="; ".join(r.notes))
    return Cell(r.ratio.point, kind="ratio", ci=_finite(r.ratio), note="; ".join([_level(r.ratio), *r.notes]))


def _median_level(ci: tuple[float, float, float]) -> str:
    """A median interval's exact coverage, with its ends where the upper is a miss (a Cell prints finite ones)."""
    return ("" if math.isfinite(ci[1]) else f"[{ci[0]:,.0f}, ∞] ") + power.coverage_text(ci[2])


def _finite(r: power.Ratio) -> tuple[float, float] | None:
    return (r.low, r.high) if math.isfinite(r.low) and math.isfinite(r.high) else None


def _level(r: power.Ratio) -> str:
    """The attained coverage, with the interval where an end is infinite (a Cell prints only finite ones)."""
    ends = "" if _finite(r) else f"[{r.low:.2f}, {r.high:.2f}] ".replace("inf", "∞")
    return ends + power.coverage_text(r.coverage)


def speed_word(x: str, y: str, r: StepsRatio) -> str:
    """The verdict of a steps-to-result sweep on its steps ratio X / Y (at the family's level): 'X faster' / 'Y
    faster' when the interval excludes 1, else 'within noise' with that interval (the ratios it cannot tell from
    1) and its attained coverage; 'unresolved' within one evaluation grid; 'too few seeds' where the reruns
    cannot reach the family's level (StepsRatio.too_few)."""
    if r.ratio is None:
        return "unresolved (within one evaluation grid)" if r.unresolved else r.too_few()
    if not r.number:
        return f"no ratio ({'; '.join(r.notes)})"
    low, high = r.ratio.low, r.ratio.high
    level = f"{power.coverage_text(r.ratio.coverage)} interval [{low:.2f}, {high:.2f}]".replace("inf", "∞")
    if r.unresolved:
        return f"unresolved (within one evaluation grid; {level})"
    if short := r.too_few():
        return short
    if high < 1:
        return f"{display(x)} faster ({level})"
    if low > 1:
        return f"{display(y)} faster ({level})"
    return f"within noise ({level})"


@dataclass
class Pair:
    """One comparison of the verdict: arms x and y at a batch, their cells, family and test."""

    batch: int
    x: str
    y: str
    cx: pd.Series
    cy: pd.Series
    family: str  # "primary" or "secondary"
    c: power.Comparison | None  # the val Top-1 test; None for a speed pair
    p_holm: float = math.nan
    alpha: float = power.ALPHA  # the level of Holm's first step in its family (power.family_alpha)
    gap: power.Comparison | None = None  # the generalization gap's test, the same pairing; None for a speed pair
    gap_p_holm: float = math.nan  # Holm within the same family, the gap's tests on their own
    gap_alpha: float = power.ALPHA
    control: bool = False  # a primary pair at a batch its sweep declares a control (primary.control)

    @property
    def family_text(self) -> str:
        """The family as the tables print it: 'primary', 'primary (control)' or 'secondary'."""
        return f"{self.family} (control)" if self.control else self.family

    @property
    def subject(self) -> str:
        """'at batch 2048', 'at batch 128 (control)': where a claim's comparison was made."""
        return f"at batch {self.batch}" + " (control)" * self.control

    @property
    def speed(self) -> bool:
        """Both arms selected on steps to the target: the question is the steps ratio, and their runs stop at the
        target, so a final Top-1 is the crossing evaluation's, not a quality to test."""
        return self.cx["select_metric"] == self.cy["select_metric"] == "steps_to_target"

    @property
    def tested(self) -> bool:
        return bool(self.cx["n_reruns"] and self.cy["n_reruns"]) if self.speed else self.c is not None

    @property
    def holm_family(self) -> tuple:
        """The comparisons corrected together: a primary pair over its batches (each pair a declared question of
        its own), the secondary comparisons all together."""
        return ("primary", self.x, self.y) if self.family == "primary" else ("secondary",)


def check_arm(baseline: str | None, names: list[str]) -> None:
    """--baseline names an arm of the sweeps (or is not given)."""
    if baseline is not None and baseline not in names:
        raise UserError(f"--baseline '{baseline}': not an arm of these sweeps; the arms are {', '.join(names)}")


def _declared(study: Study) -> list[dict]:
    """The `primary` of each of the study's sweep files that declares one (read from the sweep as run,
    <results>/<sweep>.sweep.yaml; trees made before the key declare none)."""
    return [spec["primary"] for spec in search.spaces(sweep_runs(study)).values() if spec.get("primary")]


def declared_reference(study: Study) -> str | None:
    """The arm the study's sweep files compare every other arm against (`primary: {reference: ARM}`), for a table
    that takes a reference arm; None where they declare pairs, nothing, or more than one reference."""
    references = {p.get("reference") for p in _declared(study)}
    return references.pop() if len(references) == 1 else None


def control_batches(study: Study) -> set[int]:
    """The batches the sweep files declare a control of their question (`primary.control`: where it expects no
    difference), for every primary pair (with several sweep files, the union of theirs)."""
    return {int(b) for p in _declared(study) for b in p.get("control") or ()}


def primary_pairs(study: Study, names: list[str], baseline: str | None = None) -> tuple[list[tuple[str, str]], str]:
    """The primary family's pairs (X, Y) among the arms `names`, and what declared them: each arm against
    `baseline` (--baseline); else the sweep files' `primary` (each arm against its reference, or its pairs); else
    PRIMARY where both are arms."""
    if baseline:
        return [(x, baseline) for x in names if x != baseline], "set by --baseline"
    declared = _declared(study)
    if not declared:
        default = [PRIMARY] if set(PRIMARY) <= set(names) else []
        return default, "the default question; a sweep file's `primary` declares another"
    pairs = []
    for p in declared:
        reference = p.get("reference")
        pairs += [(x, reference) for x in names if x != reference] if reference else map(tuple, p["pairs"])
    return [p for p in dict.fromkeys(pairs) if set(p) <= set(names)], "declared by the sweep file's `primary`"


def primary_text(pairs: list[tuple[str, str]], names: list[str]) -> str:
    """The primary pairs in words: 'each arm against LARS', 'VRGD-LARS against LARS', or 'none'."""
    ys = {y for _, y in pairs}
    if len(pairs) > 1 and len(ys) == 1 and {x for x, _ in pairs} == set(names) - ys:
        return f"each arm against {display(ys.pop())}"
    return ", ".join(f"{display(x)} against {display(y)}" for x, y in pairs) or "none"


def pairs_of(study: Study, table_cells: pd.DataFrame, baseline: str | None = None) -> list[Pair]:
    """Every comparison at every batch of `table_cells` (the study's cells) (each arm against `baseline`, or every
    pair of arms), Holm-adjusted within its family (Pair.holm_family: each primary pair over the batches; the
    secondary comparisons together)."""
    names = arms(sweep_runs(study))
    check_arm(baseline, names)
    primary, _ = primary_pairs(study, names, baseline)
    asked = {frozenset(p): p for p in primary}  # a declared pair reads as it was asked (X against Y)
    control = control_batches(study)  # a property of the batch: it holds under --baseline too
    if baseline:
        wanted = primary
    else:  # every pair, in the arms' order
        wanted = [asked.get(frozenset(p), p) for p in itertools.combinations(names, 2)]
    out = []
    for batch, at in table_cells.groupby("global_batch", sort=True):
        by_arm = {c["arm"]: c for _, c in at.iterrows()}
        for x, y in wanted:
            if x in by_arm and y in by_arm:
                cx, cy = by_arm[x], by_arm[y]
                family = "primary" if frozenset((x, y)) in asked else "secondary"
                pair = Pair(int(batch), x, y, cx, cy, family, None)
                pair.control = family == "primary" and int(batch) in control
                if not pair.speed:
                    pair.c = power.compare(cx["val_top1"], cy["val_top1"], cx["seeds"], cy["seeds"])
                    pair.gap = power.compare(cx["gap_top1"], cy["gap_top1"], cx["seeds"], cy["seeds"])
                out.append(pair)
    for family in dict.fromkeys(r.holm_family for r in out):
        members = [r for r in out if r.holm_family == family]
        tested = sum(r.tested for r in members)
        for r, p in zip(members, power.holm([r.c.p if r.c else math.nan for r in members])):
            r.p_holm, r.alpha = p, power.family_alpha(tested)
        gaps = sum(r.gap is not None for r in members)  # each metric corrected on its own (as across_batches)
        for r, p in zip(members, power.holm([r.gap.p if r.gap else math.nan for r in members])):
            r.gap_p_holm, r.gap_alpha = p, power.family_alpha(gaps)
    return out


def gap_word(r: Pair) -> str:
    """'X smaller gap' / 'Y smaller gap' when the gap's Holm-adjusted p is under ALPHA; else 'within noise', with
    the smallest gap difference the test could have detected; '' without a gap test."""
    if r.gap is None:
        return ""
    if r.gap_p_holm < power.ALPHA:
        return f"{display(r.x) if r.gap.diff < 0 else display(r.y)} smaller gap"
    detectable = power.comparison_mde(r.gap, r.gap_alpha)
    return f"within noise (could detect ≥ {detectable:.1f} pp)" if detectable == detectable else "within noise"


def runner_up_cell(c: pd.Series) -> pd.Series:
    """Cell c as if its selection had gone to its runner-up: that trial's reruns (reruns.top >= 2, same seeds)."""
    trained = c["runner_up_reruns"]
    return pd.Series(
        {
            **c,
            "val_top1": trained,
            "gap_top1": c["runner_up_gap"],
            "seeds": c["runner_up_seeds"],
            "rerun_steps": c["runner_up_rerun_steps"],
            "rerun_grid": c["runner_up_rerun_grid"],
            "n_reruns": len(c["runner_up_rerun_steps"]),
            "n_rerun_diverged": len(c["runner_up_rerun_steps"]) - len(trained),
        }
    )


def never_rerun(c: pd.Series) -> bool:
    """Whether cell c gets no reruns however long its sweep runs: its trials all finished and every one diverged
    (no point to rerun); a cell without reruns otherwise waits for them."""
    return bool(c["n_trials"]) and c["n_finished"] == c["n_trials"] and not isinstance(c["best_trial"], str)


def missing_reruns(x: str, y: str, cx: pd.Series, cy: pd.Series) -> str:
    """Why a side of a comparison has no reruns: every trial of its cell diverged (no point to rerun), or they have
    not run yet; '' where both sides have reruns."""
    why = [
        f"every trial of {display(arm)} diverged" if never_rerun(c) else f"{display(arm)} not yet rerun"
        for arm, c in ((x, cx), (y, cy))
        if not c["n_reruns"]
    ]
    return f"no reruns: {'; '.join(why)}" if why else ""


def selection_word(r: Pair, cx: pd.Series, cy: pd.Series, family: list[Pair]) -> str:
    """Pair r's verdict word had its cells been cx and cy: the same test at the family's level, Holm's adjustment
    redone with this p in place of r's."""
    if missing := missing_reruns(r.x, r.y, cx, cy):
        return missing
    if r.speed:
        return speed_word(r.x, r.y, steps_ratio_of(cx, cy, 1 - r.alpha))
    c = power.compare(cx["val_top1"], cy["val_top1"], cx["seeds"], cy["seeds"])
    p = [(c if m is r else m.c).p if (c if m is r else m.c) else math.nan for m in family]
    detectable = power.comparison_mde(c, r.alpha) if c else math.nan
    return verdict_word(r.x, r.y, cx, cy, c, power.holm(p)[family.index(r)], detectable)


def _direction(r: Pair, word: str) -> str:
    """What a verdict word declares: X ahead, Y ahead, or no difference (within noise, unresolved, no number)."""
    for arm in (r.x, r.y):
        if word.startswith((f"{display(arm)} better", f"{display(arm)} faster")):
            return arm
    return ""


def near_tie_word(r: Pair, word: str, family: list[Pair]) -> str:
    """The verdict word where a side's selection was a near tie (the tuning table's flag): kept only if the same
    conclusion (X ahead, Y ahead, or neither) holds at the near-tied runner-up's reruns (each such side swapped,
    alone and together), else 'depends on the selection' with every result; a runner-up without reruns is named (nothing to check it against)."""
    tied = [bool(c["near_tie"]) for c in (r.cx, r.cy)]
    if not any(tied):
        return word
    names = [display(a) for a, t in zip((r.x, r.y), tied) if t]
    if any(t and not len(c["runner_up_rerun_steps"]) for c, t in zip((r.cx, r.cy), tied)):
        return f"{word}; rests on a near tie ({', '.join(names)}) whose runner-up was not rerun"
    results = []
    for swap in itertools.product(*([False, True] if t else [False] for t in tied)):
        if any(swap):
            cx, cy = (runner_up_cell(c) if s else c for c, s in zip((r.cx, r.cy), swap))
            whose = " and ".join(display(a) for a, s in zip((r.x, r.y), swap) if s)
            results.append(f"{selection_word(r, cx, cy, family)} with {whose}'s runner-up")
    if len({_direction(r, w) for w in [word, *results]}) == 1:
        return f"{word}; the same at the near-tied runner-up's reruns ({', '.join(names)})"
    return f"depends on the selection: {word} at the selected points; " + "; ".join(results)


def mde_cell(c: power.Comparison | None, detectable: float) -> Cell:
    """The MDE with its 95% interval from the uncertainty of the noise it was computed at (power.sd_interval)."""
    if c is None:
        return Cell(None, kind="pct")
    low, high = power.sd_interval(c.df)
    return Cell(detectable, kind="pct", ci=(detectable * low, detectable * high))


UNCORRECTED_ONLY = (
    "A claim prints the uncorrected 95% interval; where it excludes 0 while Holm's p is 0.05 or above (no "
    "difference resolved), the claim adds 'the interval excludes 0 only uncorrected (p Holm P)'."
)


def difference_claim(subject: str, word: str, test: power.Comparison, p_holm: float) -> str:
    """A tested difference in words (render.claim): its uncorrected 95% interval, then the word judged on Holm's
    p; where that interval excludes 0 but Holm's p resolves nothing, the sentence says so (UNCORRECTED_ONLY), so
    that it does not read as a contradiction when quoted alone."""
    if (test.low > 0 or test.high < 0) and p_holm >= power.ALPHA:
        word = f"{word}; the interval excludes 0 only uncorrected (p Holm {p_holm:.3g})"
    return claim(subject, word, (test.low, test.high), f"{CONFIDENCE:.0%}, uncorrected", "pct", " pp")


def verdict_claim(r: Pair, word: str) -> str:
    """Pair r's conclusion in words (render.claim): the steps ratio's interval at the family's level with its
    attained coverage (speed), or the Top-1 difference's uncorrected 95% interval, then the verdict word."""
    if r.speed:
        ratio = steps_ratio_of(r.cx, r.cy, 1 - r.alpha)
        subject = f"{display(r.x)} / {display(r.y)} steps to target {r.subject}"
        if not ratio.number:
            return claim(subject, word)
        level = f"{power.coverage_text(ratio.ratio.coverage)} interval [{ratio.ratio.low:.2f}, {ratio.ratio.high:.2f}]"
        conclusion = word.replace(f" ({level})", "", 1).replace(f"; {level}", "", 1)  # the sentence gives it
        if conclusion.startswith("within noise"):
            conclusion = "no speedup resolved" + conclusion.removeprefix("within noise")
        return claim(
            subject, conclusion, (ratio.ratio.low, ratio.ratio.high), power.coverage_text(ratio.ratio.coverage)
        )
    subject = f"{display(r.x)} − {display(r.y)} val Top-1 {r.subject}"
    if r.c is None:
        return claim(subject, word)
    return difference_claim(subject, word, r.c, r.p_holm)


def comparisons_table(study: Study, baseline: str | None, title: str, columns: list[str]):
    """The verdict's comparisons (pairs_of), the study's cells, and an empty table for them, a row a comparison
    (batch, X, Y, family first): the verdict's and the plan's common start."""
    table_cells = cells(study)
    pairs = pairs_of(study, table_cells, baseline)
    names = arms(sweep_runs(study))
    primary = primary_text(primary_pairs(study, names, baseline)[0], names)
    table = Table(_title(f"{title}; primary: {primary}", table_cells), ["batch", "X", "Y", "family", *columns], keys=3)
    return pairs, table_cells, table


def verdict(study: Study, baseline: str | None = None) -> Table:
    """For each batch and pair of arms (or each arm against `baseline`): differences with 95% intervals, p-values
    Holm-adjusted within their family, the minimum detectable effect at the family's corrected level (with its
    interval), and a word (see the module docstring)."""
    rows, table_cells, table = comparisons_table(
        study,
        baseline,
        "Verdict: tuned optimizers compared at each global batch",
        [
            "val Top-1 X",
            "val Top-1 Y",
            "Δ val Top-1 (X − Y)",
            "test",
            "p",
            "p Holm",
            "MDE 80% at α/m [95%]",
            f"seeds for {PLAN_EFFECT:g} pp",
            "Δ gap (X − Y)",
            "p Holm (gap)",
            "MDE gap 80% at α/m [95%]",
            "gap verdict",
            "steps to target X / Y",
            "verdict",
        ],
    )
    for r in rows:
        c, gap = r.c, r.gap
        detectable = power.comparison_mde(c, r.alpha) if c else math.nan
        sd = lambda cell: mean_std_n(cell["val_top1"])[1]  # noqa: E731
        seeds = power.seeds_to_resolve(PLAN_EFFECT, c, sd(r.cx), sd(r.cy), r.alpha) if c else None
        family = [m for m in rows if m.holm_family == r.holm_family]
        word = near_tie_word(r, selection_word(r, r.cx, r.cy, family), family)
        table.claims.append(verdict_claim(r, word))
        if gap:
            subject = f"{display(r.x)} − {display(r.y)} generalization gap {r.subject}"
            table.claims.append(difference_claim(subject, gap_word(r), gap, r.gap_p_holm))
        table.rows.append(
            [
                r.batch,
                display(r.x),
                display(r.y),
                r.family_text,
                *(
                    Cell(None, note="not compared (speed)") if r.speed else _rerun_cell(cell, "val_top1")
                    for cell in (r.cx, r.cy)
                ),
                Cell(c.diff, kind="pct", ci=(c.low, c.high)) if c else Cell(None, kind="pct"),
                c.test if c else NO_NUMBER,
                Cell(c.p if c else None, kind="p"),
                Cell(r.p_holm, kind="p"),
                mde_cell(c, detectable),
                Cell(seeds, kind="int") if seeds else Cell(None, note="> 1000" if c else NO_NUMBER, kind="int"),
                Cell(gap.diff, kind="pct", ci=(gap.low, gap.high)) if gap else Cell(None, kind="pct"),
                Cell(r.gap_p_holm, kind="p"),
                mde_cell(gap, power.comparison_mde(gap, r.gap_alpha) if gap else math.nan),
                gap_word(r),
                steps_ratio(r.cx, r.cy),
                ("speed: " if r.speed else "")
                + word
                + ("; pairs across kernel platforms" if len(set(r.cx["kernels"]) | set(r.cy["kernels"])) > 1 else ""),
            ]
        )
    names = arms(sweep_runs(study))
    primary, source = primary_pairs(study, names, baseline)
    for x, y in primary:  # each primary pair's average over the batches
        tests = [r for r in rows if (r.x, r.y) == (x, y) and not r.control]  # a control is another question
        pooled = power.pooled([r.c for r in tests]) if len(tests) > 1 else None
        if pooled is None:
            continue
        detectable = power.comparison_mde(pooled)
        word = (
            f"{display(x) if pooled.diff > 0 else display(y)} better on average"
            if pooled.p < power.ALPHA
            else f"within noise (could detect ≥ {detectable:.1f} pp on average)"
        )
        batches = f"{tests[0].batch}-{tests[-1].batch}"
        table.claims.append(
            claim(
                f"{display(x)} − {display(y)} val Top-1 averaged over batches {batches} (exploratory)",
                word,
                (pooled.low, pooled.high),
                f"{CONFIDENCE:.0%}",
                "pct",
                " pp",
            )
        )
        table.rows.append(
            [
                "all (pooled)",
                display(x),
                display(y),
                "exploratory",
                Cell(None),
                Cell(None),
                Cell(pooled.diff, kind="pct", ci=(pooled.low, pooled.high)),
                pooled.test,
                Cell(pooled.p, kind="p"),
                Cell(None, kind="p"),
                Cell(detectable, kind="pct"),
                Cell(None, kind="int"),
                Cell(None, kind="pct"),
                Cell(None, kind="p"),
                Cell(None, kind="pct"),
                "",
                Cell(None, kind="ratio"),
                word,
            ]
        )
    table.notes = [
        "val Top-1 X / Y: final val Top-1 (%) of the best trial's reruns (seeds other than the trials'), mean ± sample "
        "std (n = reruns that trained; diverged ones named). The trial that selected a point (the tuning seed) is not "
        "counted: it was chosen for its own score, which carries the winner's luck.",
        f"Δ: difference of the reruns' means with its {CONFIDENCE:.0%} interval [low, high], uncorrected; test: "
        "'paired' (the per-seed differences' t interval, when both sides reran the same seeds) or 'Welch' (unequal "
        "variances); gap = train-eval Top-1 − val Top-1 (pp).",
        "Δ gap, p Holm (gap), MDE gap, gap verdict: the generalization gap's difference, tested as val Top-1 is (the "
        "same pairing; Holm within the same family, the gap's tests on their own; the MDE at that family's α/m): 'X "
        "smaller gap' / 'Y smaller gap' when p Holm (gap) < 0.05, else 'within noise (could detect ≥ MDE pp)'; a "
        "claim each, its interval uncorrected.",
        f"p: the test's two-sided p-value; p Holm: adjusted by Holm's step-down method within the family, 'primary' "
        f"= {primary_text(primary, names)} at each batch ({source}), each pair a family of its own over the batches "
        "(a declared question each)"
        + (
            ", 'primary (control)' at the batches the sweep declares a control (primary.control: where the question "
            "expects no difference; tested and corrected with its family, left out of the exploratory average)"
            * any(r.control for r in rows)
        )
        + ", 'secondary' = every other comparison in this table, one family; 'exploratory' = a primary pair's "
        "average difference over the batches with the pooled sd of its "
        "per-seed differences (power.pooled: assumes equal noise at every batch; another question than the declared "
        "one, so not in its family and not Holm-adjusted; MDE at α = 0.05).",
        "verdict (on val Top-1): 'X better' / 'Y better' when p Holm < 0.05; else 'within noise (could detect ≥ MDE "
        "pp)'; 'too few seeds' where a side has fewer than 2 reruns that trained. MDE 80% at α/m: the smallest true difference this test detects with 80% power at the observed noise "
        "and seeds (noncentral t) at the level Holm's first step applies in the family (α/m over its m tests), so "
        "a difference of that size would be declared after the correction; [95%]: its interval from the uncertainty "
        f"of the observed noise (chi-square on the test's df; with 5 seeds the MDE is itself known only to a factor "
        f"of about 2). seeds for {PLAN_EFFECT:g} pp: seeds per side that would detect a {PLAN_EFFECT:g}-point "
        "difference with 80% power at the same noise and level (docs/algorithms.md, 'What a verdict can detect'; "
        "`bench table plan` sizes a next study).",
        "Near ties: where a side's selection was a near tie (the tuning table's flag: another split could have "
        "chosen the runner-up), the verdict word stands only if the runner-up's reruns (reruns.top 2, the same "
        "seeds), swapped in alone and together, reach the same conclusion (X ahead, Y ahead, or neither) with the "
        "same test at the same family level; else 'depends on the selection', with every result. A runner-up "
        "without reruns is named ('rests on a near tie ... whose runner-up was not rerun').",
        f"Claims: each row's conclusion as a sentence made from its numbers (render.claim), under the table. {UNCORRECTED_ONLY}",
        "steps to target X / Y: the median of the ratios of each of X's reruns' steps to the first evaluation ≥ the "
        "target to each of Y's (Hodges-Lehmann; a miss counts as ∞) with the exact Mann-Whitney interval on log "
        "steps at 95% or the nearest coverage above it that the seeds allow, that coverage printed (5 vs 5: "
        "96.83%; distribution-free, no resampling; docs/algorithms.md, 'Intervals at five seeds'); < 1: X reaches "
        "the target in fewer steps; no number when the misses leave the median undetermined. Steps lie on the "
        "evaluation grid: ties make the interval cover at least as often as printed.",
        "A sweep that selected on steps to the target (select.metric steps_to_target: its runs stop at the target, "
        "so a final Top-1 is the crossing evaluation's, just above the target, not a quality) gives a speed verdict "
        "instead and no Top-1 test (its Top-1 and gap columns stay empty, and the plan table leaves it out): 'X "
        "faster' / 'Y faster' when the steps ratio's interval at the family's corrected level (1 − α/m, "
        "Bonferroni, Holm's first step, m = its family's comparisons with reruns on both sides: a primary pair's "
        "batches, or every secondary comparison; its attained coverage printed, "
        "5 vs 5 at 99%: 99.21%) excludes 1, 'within noise' with that interval otherwise, 'unresolved' when the "
        "medians differ by no more than one evaluation grid, 'too few seeds' where the reruns cannot reach that "
        "level (n vs m reach at most 1 − 2 / C(n+m, n), the smallest to the largest ratio: 2 vs 2, 66.67%), with "
        "the seeds a side that would. Quality at a fixed budget is a sweep of its own (select.metric top1).",
        "no reruns: why a side has none: every trial of its cell diverged (no point to rerun), or not rerun yet.",
        *_selection_notes(table_cells),
        *provenance_notes(study),
    ]
    return table


STEPS_SWEEP = (
    "This sweep selected on steps to the target: its runs stop there, so a final Top-1 or gap is the crossing's, "
    "not a quality; its batches are compared by the scaling table (bench table scaling)."
)


def _numbers(values) -> list[float]:
    """The numbers among a cell's rerun values (a rerun without a train-eval has no gap)."""
    return [float(v) for v in values if v == v and math.isfinite(v)]


def _interval_cell(values, reruns: int) -> Cell:
    """The reruns' mean with its 95% t interval and n; why there is none otherwise."""
    values = _numbers(values)
    mean = power.mean_interval(values)
    if mean is None:
        note = "" if values else "no rerun has one" if reruns else "no reruns"
        return Cell(values[0] if values else None, n=len(values) or None, note=note)
    return Cell(mean[0], n=len(values), ci=mean[1:])


ACROSS = {"gap_top1": ("gap", "larger", "smaller"), "val_top1": ("val Top-1", "higher", "lower")}  # name, up, down


def _across_word(metric: str, batch: int, c: power.Comparison | None, p_holm: float, detectable: float, n) -> str:
    """'gap larger at 2048' / 'val Top-1 lower at 2048' when Holm's p is under ALPHA; else within noise, with the
    MDE; too few seeds where a side has fewer than 2 values (`n`: each side's), no spread where neither varies."""
    name, up, down = ACROSS[metric]
    if c is None:
        if min(n) < 2:
            return f"{name}: too few seeds ({n[0]} vs {n[1]}, a test needs 2 a side)"
        return f"{name}: no spread to test"
    if p_holm < power.ALPHA:
        return f"{name} {up if c.diff > 0 else down} at {batch}"
    return f"{name} within noise (could detect ≥ {detectable:.1f} pp)"


def _sets_var(c) -> float:
    """The variance (pp²) a cell's mean gap carries from the two fixed image sets every seed is scored on: the
    binomial error of its mean train-eval and val Top-1 on the subset's and val set's images (the smaller where
    reruns differ); nan where a size is unknown."""
    te, val = _numbers(c["train_eval_top1"]), _numbers(c["val_top1"])
    if not te or not val:
        return math.nan
    sizes = [min(_numbers(c[k]), default=math.nan) for k in ("train_eval_images", "val_images")]
    return sum(selection_se(float(np.mean(x)), n) ** 2 for x, n in zip((te, val), sizes))


def _gap_exists_word(low: float, high: float) -> str:
    """A cell's gap in words from its interval: whether the train-eval Top-1 is resolved above the val Top-1."""
    if low > 0:
        return "a gap (train-eval Top-1 above val)"
    if high < 0:
        return "val Top-1 above train-eval"
    return "no gap resolved"


def across_batches(study: Study, baseline: str | None = None) -> Table:
    """Each arm of a sweep selected on Top-1 at each batch against itself at its smallest batch (Keskar et al.
    2017's question: does the gap grow with the batch?): the reruns' final val Top-1, train-eval Top-1 and gap with their 95% t
    intervals, each difference from the smallest batch with Welch's interval (another batch is another experiment:
    not paired by seed), p Holm over the table's tests of that metric, the MDE at the corrected level, the verdict
    in words; its claims say of each cell whether a gap exists (seeds and image sampling) and each difference's
    conclusion. `baseline` is not used: each arm is its own reference."""
    table_cells = cells(study)
    table = Table(
        _title("Across batches: each arm against itself at its smallest batch", table_cells),
        [
            "arm",
            "batch",
            "val Top-1 [95%]",
            "train-eval Top-1 [95%]",
            "gap [95%]",
            "Δ val Top-1 [95%]",
            "p Holm (val)",
            "Δ gap [95%]",
            "p Holm (gap)",
            "MDE gap 80% at α/m [95%]",
            "verdict",
        ],
        keys=2,
    )
    if selects_on_steps(table_cells):
        table.notes = [STEPS_SWEEP]
        return table
    rows = []
    for arm in arms(sweep_runs(study)):
        mine = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        first = mine.iloc[0] if len(mine) else None
        for i, (_, c) in enumerate(mine.iterrows()):
            tests = {m: power.compare(c[m], first[m]) if i else None for m in ACROSS}  # Welch
            rows.append({"arm": arm, "cell": c, "first": first, "reference": not i, **tests})
    holm = {m: power.holm([r[m].p if r[m] else math.nan for r in rows]) for m in ACROSS}
    alpha = {m: power.family_alpha(sum(r[m] is not None for r in rows)) for m in holm}
    for k, r in enumerate(rows):
        c, first, gap, val = r["cell"], r["first"], r["gap_top1"], r["val_top1"]
        batch, base = int(c["global_batch"]), int(first["global_batch"])
        mdes = {m: power.comparison_mde(r[m], alpha[m]) if r[m] else math.nan for m in holm}
        gap_subject, sets_var = f"{display(r['arm'])} gap at batch {batch}", _sets_var(c)
        if (gap_ci := power.mean_interval(_numbers(c["gap_top1"]), shared_var=sets_var)) is None:
            pass  # fewer than 2 reruns with a gap: the table's cell says why
        elif sets_var != sets_var:  # an older run without its image sets' sizes: no interval without their error
            table.claims.append(claim(gap_subject, "not judged (its runs do not record the image sets' sizes)"))
        else:
            table.claims.append(  # does a gap exist in this cell?
                claim(
                    gap_subject,
                    _gap_exists_word(*gap_ci[1:]),
                    gap_ci[1:],
                    f"{CONFIDENCE:.0%}: seeds and image sampling, uncorrected",
                    "pct",
                    " pp",
                )
            )
        words = []
        for metric in () if r["reference"] else ACROSS:
            test, n = r[metric], (len(_numbers(c[metric])), len(_numbers(first[metric])))
            word = _across_word(metric, batch, test, holm[metric][k], mdes[metric], n)
            words.append(word)
            subject = f"{display(r['arm'])} {ACROSS[metric][0]} at batch {batch} − at {base}"
            table.claims.append(
                difference_claim(subject, word, test, holm[metric][k]) if test else claim(subject, word)
            )
        diff = lambda t: Cell(t.diff, kind="pct", ci=(t.low, t.high)) if t else Cell(None, kind="pct")  # noqa: E731
        reference = Cell(None, note=f"reference ({base})")
        table.rows.append(
            [
                display(r["arm"]),
                batch,
                _interval_cell(c["val_top1"], c["n_reruns"]),
                _interval_cell(c["train_eval_top1"], c["n_reruns"]),
                _interval_cell(c["gap_top1"], c["n_reruns"]),
                reference if r["reference"] else diff(val),
                Cell(holm["val_top1"][k], kind="p"),
                reference if r["reference"] else diff(gap),
                Cell(holm["gap_top1"][k], kind="p"),
                mde_cell(gap, mdes["gap_top1"]),
                "; ".join(words) or "the reference",
            ]
        )
    one_batch = ["One batch per arm: nothing to compare across batches (bench table verdict compares the arms)."]
    table.notes = [
        *(one_batch if rows and all(r["reference"] for r in rows) else []),
        f"val Top-1, train-eval Top-1, gap: the final val Top-1 (%), the final Top-1 on the fixed train-eval subset "
        "(training images in evaluation mode: how well the budget fitted them) and the gap (train-eval Top-1 − val "
        f"Top-1, pp) of each cell's reruns (the best trial's point, other seeds), their mean with its "
        f"{CONFIDENCE:.0%} t interval (n = reruns that trained).",
        f"Δ: the cell's mean minus the same arm's at its smallest batch, with Welch's {CONFIDENCE:.0%} interval "
        "(uncorrected): another batch is another experiment, so its reruns are not paired by seed with the smallest "
        "batch's even where the seeds coincide.",
        "p Holm: Welch's two-sided p, adjusted by Holm's step-down method over every test of that metric in this "
        "table (each arm at each batch above its smallest). verdict: gap 'larger' / 'smaller', val Top-1 'higher' / "
        "'lower at B' when p Holm < 0.05; "
        "else 'within noise (could detect ≥ MDE pp)'. MDE 80% at α/m: the smallest true gap difference this test "
        "detects with 80% power at the observed noise at Holm's first level; [95%]: its interval from the noise's "
        "uncertainty (as in the verdict table).",
        "Claims: each cell's gap and each comparison's conclusion, as sentences made from their numbers, under the "
        "table. A cell's gap claim: 'a gap' where its interval lies above 0, 'val Top-1 above train-eval' where "
        "below, else 'no gap resolved' (uncorrected: one test a cell); its interval adds to the seeds' spread the "
        "sampling error of the two fixed image sets every seed is scored on (binomial, p(1 − p) / N for the "
        "train-eval subset and for the val set; Welch-Satterthwaite df), which the gap column, the seeds' alone, "
        "cannot show. A difference across batches leaves it out: both batches are scored on the same sets, so "
        f"their sampling largely cancels. {UNCORRECTED_ONLY}",
        *_selection_notes(table_cells),
        *provenance_notes(study),
    ]
    return table


def matched(study: Study, baseline: str | None = None) -> Table:
    """Matched points (reruns.matched): for each declared pair and batch where the arms selected different points,
    both arms at each point, paired by seed: does the update rule change the result at the same hyperparameters?
    One Holm family over every row; the MDE at its first step's level. `baseline` is not used (the pairs are the
    sweep file's)."""
    runs = sweep_runs(study)
    runs = runs[runs["finished"] & runs["role"].isin(["rerun", "matched"])]
    runs = pd.concat([once_per_seed(r) for _, r in runs.groupby("recipe", sort=False)]) if len(runs) else runs
    table_cells = cells(study)
    table = Table(
        _title("Matched points: both optimizers at each one's selected point", table_cells),
        [
            "batch",
            "point of",
            "X",
            "Y",
            "val Top-1 X",
            "val Top-1 Y",
            "Δ val Top-1 (X − Y)",
            "test",
            "p",
            "p Holm",
            "MDE 80% at α/m [95%]",
            "verdict",
        ],
        keys=4,
    )
    rows = []
    for (batch, owner), at in runs[runs["role"] == "matched"].groupby(["global_batch", "point_of"], sort=True):
        own = runs[(runs["role"] == "rerun") & (runs["arm"] == owner) & (runs["global_batch"] == batch)]
        for other, guest in at.groupby("arm", sort=False):
            x, y = sorted([owner, other], key=lambda a: a != PRIMARY[0])  # VRGD-LARS first, as in the verdict
            side = {owner: own.dropna(subset=["val_top1"]), other: guest.dropna(subset=["val_top1"])}
            c = power.compare(side[x]["val_top1"], side[y]["val_top1"], list(side[x]["seed"]), list(side[y]["seed"]))
            rows.append({"batch": int(batch), "owner": owner, "x": x, "y": y, "side": side, "c": c})
    tested = sum(r["c"] is not None for r in rows)
    alpha = power.family_alpha(tested)
    p_holms = power.holm([r["c"].p if r["c"] else math.nan for r in rows])
    for row, p_holm in zip(rows, p_holms):
        batch, owner, x, y, side, c = row.values()
        detectable = power.comparison_mde(c, alpha) if c else math.nan
        word = (
            "too few seeds"
            if c is None
            else f"{display(x) if c.diff > 0 else display(y)} better"
            if p_holm < power.ALPHA
            else f"within noise (could detect ≥ {detectable:.1f} pp)"
        )
        subject = f"{display(x)} − {display(y)} val Top-1 at batch {batch}, at {display(owner)}'s point"
        interval = (c.low, c.high) if c else None
        table.claims.append(claim(subject, word, interval, f"{CONFIDENCE:.0%}, uncorrected", "pct", " pp"))
        table.rows.append(
            [
                batch,
                display(owner),
                display(x),
                display(y),
                Cell(*mean_std_n(side[x]["val_top1"])),
                Cell(*mean_std_n(side[y]["val_top1"])),
                Cell(c.diff, kind="pct", ci=(c.low, c.high)) if c else Cell(None, kind="pct"),
                c.test if c else NO_NUMBER,
                Cell(c.p if c else None, kind="p"),
                Cell(p_holm, kind="p"),
                mde_cell(c, detectable),
                word,
            ]
        )
    table.notes = [
        "Each row: both arms trained at one arm's selected point (its lr, warm-up, ... from the tuning), the same "
        "seeds on both sides (paired); 'point of' names whose point. The tuned verdict answers 'which optimizer, "
        "each tuned, wins'; this table answers 'does the update rule change the result at the same "
        "hyperparameters'. A batch where both arms selected the same point has no row here: the tuned verdict "
        "already compares them at that point.",
        "p Holm: Holm's adjustment over every row of this table (its own family); MDE at α/m: at the level of "
        "Holm's first step, with its 95% interval from the noise's uncertainty.",
    ]
    if not rows:
        table.notes.append("No matched reruns here (the sweep file's reruns.matched names the pairs).")
    return table


PLAN_EFFECTS = (0.25, 0.5, 1.0)  # pp: the effects `bench table plan` sizes a next study for


def plan(study: Study, baseline: str | None = None) -> Table:
    """Seeds per side a next study needs, from this one's noise (a pilot): for each comparison of the verdict,
    the fewest seeds at which its test detects each of PLAN_EFFECTS with 80% power at its family's corrected level,
    at the observed noise and at the upper end of that noise's 95% interval (the planning value)."""
    rows, _, table = comparisons_table(
        study,
        baseline,
        "Plan: seeds per side to detect an effect after correction",
        [
            "tests m",
            "level α/m",
            "seeds now",
            "test",
            "noise sd [95%]",
            *(f"seeds for {e:g} pp (observed / planning)" for e in PLAN_EFFECTS),
        ],
    )
    for r in rows:
        if r.c is None:
            continue
        low, high = power.sd_interval(r.c.df)
        sd_x, sd_y = (mean_std_n(cell["val_top1"])[1] for cell in (r.cx, r.cy))
        noise = r.c.se * math.sqrt(r.c.n) if r.c.test == "paired" else math.sqrt((sd_x**2 + sd_y**2) / 2)
        worst = dataclasses.replace(r.c, se=r.c.se * high)

        def needed(effect: float) -> str:
            seen = power.seeds_to_resolve(effect, r.c, sd_x, sd_y, r.alpha)
            planning = power.seeds_to_resolve(effect, worst, sd_x * high, sd_y * high, r.alpha)
            return " / ".join(str(n) if n else "> 1000" for n in (seen, planning))

        m = round(power.ALPHA / r.alpha)
        table.rows.append(
            [
                r.batch,
                display(r.x),
                display(r.y),
                r.family_text,
                m,
                Cell(r.alpha, kind="p"),
                r.c.n,
                r.c.test,
                Cell(noise, kind="pct", ci=(noise * low, noise * high)),
                *(needed(e) for e in PLAN_EFFECTS),
            ]
        )
    table.notes = [
        "noise sd: paired: the sd of the per-seed differences; Welch: the root mean square of the two sides' sds; "
        "[95%]: its chi-square interval on the test's df. Seeds for E pp: the fewest seeds per side at which the "
        "same test detects a true difference of E points with 80% power at level α/m (Holm's first step over the "
        "family's m tests), at the observed noise / at the upper end of its interval (the planning value: a study "
        "sized on it is underpowered only if the noise is worse than this pilot's 95% interval allows).",
    ]
    if not table.rows and any(r.speed for r in rows):  # a speed sweep's pairs have no Top-1 test to plan for
        table.notes.insert(
            0,
            "This sweep selected on steps to the target: its runs stop there, so it has no Top-1 test to plan seeds "
            "for; the verdict's steps ratios say where the seeds were too few, and how many a side would reach the "
            "family's level.",
        )
    return table


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


def _rerun_cell(c: pd.Series, metric: str) -> Cell:
    mean, std, n = mean_std_n(c[metric])
    note = f"{c['n_rerun_diverged']} diverged" if c["n_rerun_diverged"] else ""
    if not n:
        return Cell(None, note=f"all {c['n_reruns']} diverged" if c["n_reruns"] else "no reruns")
    return Cell(mean, std, n, note)


def tuning(study: Study, baseline: str | None = None) -> Table:
    """Per (arm, batch): the search (trials, infeasible, best point), steps to result, and the reruns' figures."""
    table_cells = cells(study)
    by_steps = selects_on_steps(table_cells)  # the runner-up's figure: its steps
    table = Table(
        _title("Tuning: each optimizer at each global batch", table_cells),
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
                _rerun_cell(c, "val_top1"),
                runner_up,
                _rerun_cell(c, "gap_top1"),
                _rerun_steps_cell(c["rerun_steps"], c["rerun_grid"]),
                Cell(100 * c["clip_frac"], kind="pct"),
                c["unstable"],
            ]
        )
    table.notes = [
        "images per run: the training images of the cell's longest finished run (its steps x the batch: one budget "
        "gives every batch the same images to within one step; a run that stops at the target sees fewer than its "
        "budget).",
        "trials: finished / planned; infeasible: finished without a final accuracy (diverged: a non-finite loss, "
        "Top-1 at chance, or a loss spike that never came back below the first step's loss).",
        "instabilities: the trials and reruns whose loss spiked (an evaluation interval's mean training loss over "
        "2 x the first step's) and came back: their largest interval loss and its step; they keep their numbers.",
        *_best_trial_notes(table_cells),
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
        *_selection_notes(table_cells),
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


def _selection_notes(table_cells: pd.DataFrame) -> list[str]:
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


def _title(head: str, table_cells: pd.DataFrame) -> str:
    return f"{head} ({describe(table_cells)})"


def describe(table_cells: pd.DataFrame) -> str:
    """Dataset, model, budget, trials and seeds: what every figure and table of a sweep says it is. Trials and
    seeds as most cells ran them, then each other cell's ('2 seeds per rerun (Lion at 64: no reruns, every trial
    diverged)')."""
    first = table_cells.iloc[0]
    epochs = sorted(set(table_cells["planned_epochs"]))
    budget = f"{epochs[0]:.3g} epochs"
    if len(epochs) > 1:  # epochs that differ with the training set's size are still one image budget
        one_budget = table_cells["planned_images"].round().nunique() == 1
        budget = f"{epochs[0]:.3g}-{epochs[-1]:.3g} epochs ({'one image budget' if one_budget else 'by batch'})"
    trials = [f"{n} trial{'s' * (n != 1)}" if n else "no trials in this tree" for n in table_cells["n_trials"]]
    seeds = [_reruns_text(c) for _, c in table_cells.iterrows()]
    tried, rerun = _per_cell(table_cells, trials, "per cell"), _per_cell(table_cells, seeds, "per rerun")
    return f"{first['problem_label']}, {first['model_shape']}, {budget} per run, {tried}, {rerun}"


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


def performance_profile(table_cells: pd.DataFrame, taus: np.ndarray) -> dict[str, np.ndarray]:
    """arm -> fraction of batches at which its reruns' median steps to the target is within tau x the best arm's
    (AlgoPerf's performance profile, over batches; the reruns, not the best trials, so no winner's luck); a miss
    never counts."""
    table_cells = table_cells.assign(_median=table_cells["rerun_steps"].map(_median_steps))
    best = table_cells.groupby("global_batch")["_median"].min()
    out = {}
    for arm, c in table_cells.groupby("arm", sort=False):
        ratio = (c["_median"] / c["global_batch"].map(best)).to_numpy()
        ratio = np.where(np.isfinite(ratio), ratio, np.inf)
        out[arm] = np.array([(ratio <= t).mean() for t in taus])
    return out


def _median_steps(samples) -> float:
    return float(np.median(np.asarray(samples, float))) if len(samples) else math.nan


def median_steps_ci(steps) -> tuple[float, float, float] | None:
    """(low, high, exact coverage) of a cell's reruns' median steps from order statistics (power.median_interval;
    the scaling table's and the steps figure's); None for a median that missed or fewer than two reruns."""
    steps = np.asarray(steps, float)
    if len(steps) < 2 or not math.isfinite(_median_steps(steps)):
        return None
    return power.median_interval(steps)


def linear_from(spec: dict | None) -> str:
    """Where a sweep's critical batch measures linear scaling from (its `.sweep.yaml`'s scaling.linear_from, default
    the ladder's smallest batch; ladder.LINEAR_FROM)."""
    return ((spec or {}).get("scaling") or {}).get("linear_from", ladder.LINEAR_FROM[0])


def ladder_fits(table_cells: pd.DataFrame) -> dict[str, ladder.Fit | None]:
    """arm -> its whole-ladder fit (ladder.fit_ladder); None while some batch of it waits for reruns."""
    return {
        arm: ladder.fit_ladder(cells_of, cells_of["linear_from"].iloc[0])
        if cells_of["rerun_steps"].map(len).all()
        else None
        for arm, cells_of in table_cells.groupby("arm", sort=False)
    }


def cells_at_target(study: Study, cells_of: pd.DataFrame, target: float) -> pd.DataFrame | None:
    """An arm's cells with their reruns' steps read at another target (ladder.steps_at), near ties off (only the
    selected point's reruns); None when some rerun cannot say (it stopped at a lower target before this one)."""
    rows = []
    for _, c in cells_of.iterrows():
        found = [
            ladder.steps_at(study.curves_of([run]), target, True, c["target_top1"] if stopped else None)
            for run, stopped in zip(c["reruns"], c["rerun_stopped"])
        ]
        if any(f is None for f in found):
            return None
        steps, ran, grid = zip(*found) if found else ((), (), ())
        rows.append({**c, "rerun_steps": steps, "rerun_ran": ran, "rerun_grid": grid, "near_tie": False})
    return pd.DataFrame(rows)


def fit_checks(study: Study, table_cells: pd.DataFrame, fits: dict) -> dict[str, ladder.Checks]:
    """arm -> the checks of its fit (ladder.checks): misses, each batch left out, the targets ladder.TARGET_SHIFT
    below and above the declared one where the reruns allow."""
    out = {}
    for arm, f in fits.items():
        if f is None or not f.found:
            continue
        cells_of = table_cells[table_cells["arm"] == arm]
        target = float(cells_of["target_top1"].iloc[0])
        shifted = {
            t: cells_at_target(study, cells_of, t) for t in (target - ladder.TARGET_SHIFT, target + ladder.TARGET_SHIFT)
        }
        out[arm] = ladder.checks(cells_of, f, shifted, cells_of["linear_from"].iloc[0])
    return out


def estimates(table_cells: pd.DataFrame, names: list[str], reference: str | None, fits: dict) -> tuple[dict, dict]:
    """arm -> its critical batch beside the curve's (ladder.alternatives), and arm -> its critical batch over the
    reference arm's by each estimate (ladder.ESTIMATES -> ladder.Ratio or None), every arm against the reference
    at the level Bonferroni's correction over those comparisons gives; each arm's seed-bootstrap draws made once,
    the same draws for every arm (the seeds of all the arms with a fit)."""
    others = [a for a in names if a != reference and reference is not None]
    level = 1 - power.family_alpha(max(len(others), 1))
    of = {arm: cells_of for arm, cells_of in table_cells.groupby("arm", sort=False)}
    ready = [a for a in names if fits.get(a) is not None and fits[a].found]
    seeds = sorted({s for a in ready for s in itertools.chain.from_iterable(of[a]["rerun_seeds"])})
    linear = {a: of[a]["linear_from"].iloc[0] for a in ready}
    base = min((ladder.base_batch(of[a], linear[a]) for a in ready), default=0.0)
    draws = {a: ladder.arm_draws(of[a], seeds, base) for a in ready}
    alternatives = {a: ladder.alternatives(of[a], draws[a]) for a in ready if base}
    ratio_of = {
        arm: {e: ladder.draws_ratio(draws[arm], draws[reference], e, level) for e in ladder.ESTIMATES}
        if arm in draws and reference in draws
        else None
        for arm in others
    }
    return alternatives, ratio_of


ALTERNATIVES_NOTE = (
    "critical batch beside the curve's (bench/analysis/critical.py; a word on a ratio only where they agree): "
    "bent curve: S(B) = S_min (1 + (B_noise / B)^alpha) fitted as the curve is (alpha = 1 is the curve), its "
    "critical batch where S(B) B / (S(B0) B0) passes 1.2, [95%] the profile-likelihood interval of it and of "
    "alpha; alpha = 1: F test p: the third parameter's F test on the batch means (each batch's mean log steps), a "
    "test with power against the bend that the lack-of-fit test, which weighs it against the reruns' scatter, "
    "misses; model-free: where the reruns' median steps x batch over the smallest batch's first pass 1.2, "
    "interpolated on log batch between the two batches that bracket it (no curve), [95%] from the same seed "
    "bootstrap as the ratios (its log's sd x sqrt(n / (n - 1)) x Student's t on n - 1 degrees of freedom); batches "
    "in the linear regime: the smallest batch and those above it whose images / linear the seeds' noise does not "
    "tell from 1 (its bootstrap interval holds 1), in a row. The ratio rows put each estimate's ratio in its "
    "column, from the same draws. The coverage of each interval in simulated ladders, with alpha = 1 and bent: "
    "docs/algorithms.md (tools/ladder_coverage.py --only estimates)."
)


def alternative_cells(a: ladder.Alternatives | None) -> list:
    """The bent curve's, the F test's, the model-free and the linear regime's cells of an arm's first row."""
    if a is None:
        return [NO_NUMBER, Cell(None, kind="p"), NO_NUMBER, NO_NUMBER]
    return [bent_text(a.bent), Cell(a.alpha.p, kind="p"), ladder.interval_text(*a.model_free), linear_text(a.linear)]


def bent_text(c) -> str:
    """'230 [163, 323] (alpha 1.16 [1.04, 1.28])': the bent curve's critical batch and alpha."""
    if not c.found:
        return NO_NUMBER
    alpha = f"alpha {c.alpha:.2f} [{c.alpha_low:.2f}, {c.alpha_high:.2f}]"
    return f"{ladder.interval_text(c.critical, c.critical_low, c.critical_high)} ({alpha})"


def linear_text(batches: tuple[int, ...]) -> str:
    """'2 (64, 128)': the batches seen in the linear regime, the smallest (the reference itself) included."""
    return f"{len(batches)} ({', '.join(f'{b:,}' for b in batches)})"


def _crossing_text(fraction: float, lr: float) -> str:
    return f"{fraction:.0%} (lr {lr:.2f} of peak)" if fraction == fraction else NO_NUMBER


def _ratio_text(r: ladder.Ratio | None) -> str:
    if r is None:
        return "no ratio (an arm has no fit, or lacks reruns at some batch)"
    return f"{r.text})" + (f"; resolves ≥ {r.resolvable_text}" if r.resolvable == r.resolvable else "")


def _base_text(f: ladder.Fit) -> str:
    return f"from batch {f.base:,.0f}" if f.base else "from the fit's batch-0 limit"


def _reached_text(steps: np.ndarray, diverged) -> str:
    """'4/5' reruns that reached the target, '3/5 (1 diverged)'; 'no reruns'."""
    if not len(steps):
        return "no reruns"
    gone = int(sum(bool(d) for d in diverged)) if isinstance(diverged, tuple) else 0  # a hand-made cell: none
    return f"{int(np.isfinite(steps).sum())}/{len(steps)}" + (f" ({gone} diverged)" if gone else "")


def untested_ties(table_cells: pd.DataFrame) -> dict[str, list[int]]:
    """arm -> the batches whose selection was a near tie and whose runner-up was not rerun: the fit and its
    interval rest on the selected point alone there."""
    out = {}
    for _, c in table_cells.sort_values("global_batch").iterrows():
        if c["near_tie"] and not len(c["runner_up_rerun_steps"]):
            out.setdefault(c["arm"], []).append(int(c["global_batch"]))
    return out


def scaling_claims(
    fits: dict,
    names: list[str],
    reference: str | None,
    crossings: dict,
    checks=None,
    ratio_of=None,
    ties=None,
    secondary: bool = False,
    alternatives=None,
):
    """The scaling table's claims in words, made from its numbers: each arm's critical batch with its checks and
    the near ties it rests on (untested_ties), the ratios to the reference arm, and where the crossings fell in the
    schedule from the smallest batch to the largest. secondary: the sweep selected its cells on the final Top-1
    (secondary_steps_note), which each critical batch and ratio says, so a claim quoted alone keeps it."""
    checks, ratio_of, ties, alternatives = checks or {}, ratio_of or {}, ties or {}, alternatives or {}
    caveat = f"; {SECONDARY_TEXT}" if secondary else ""
    claims = []
    for arm in names:
        f = fits[arm]
        if f is None or not f.found:
            claims.append(f"{display(arm)}: no critical batch (reruns missing, or fewer than two batches reached it).")
            continue
        critical = ladder.interval_text(*f.critical)
        words = [f"{display(arm)}: critical batch {critical} (95%; {EXCESS_TEXT} above linear scaling {_base_text(f)})"]
        if not f.resolved:
            words.append("the ladder does not locate it")
        check = checks.get(arm)
        outside = check.outside(f) if check else []
        if outside:
            words.append("not robust (outside the interval: " + ", ".join(outside) + ")")
        elif check and check.left_out:
            words.append("every batch left out in turn keeps it inside")
        if check:
            words.append(check.targets_text())
        if check and check.unexplained():
            words.append("the fit does not explain " + "; ".join(check.unexplained()))
        if check and (medians := check.medians_text(f)):
            words.append(medians)
        if check and check.diverged_text():
            words.append(check.diverged_text())
        if f.lack_of_fit_p < ladder.LACK_OF_FIT_ALPHA:
            words.append(
                f"its batches scatter about the fit more than their reruns do (lack of fit p {f.lack_of_fit_p:.3f}): "
                "the interval is the batch means'"
            )
        if f.alternatives:
            words.append("its interval holds every near-tied selection's estimate")
        if ties.get(arm):
            at = ", ".join(f"{b:,}" for b in ties[arm])
            words.append(f"it rests on near-tied selections at {at} whose runner-ups were not rerun")
        if f.base:
            words.append("batch-0 reference (0.2 B_noise): " + ladder.interval_text(*f.critical_at_zero))
        if arm in alternatives:
            words += alternatives_words(alternatives[arm], f)
        claims.append("; ".join(words) + caveat + ".")
    for arm in names:
        if arm == reference or arm not in ratio_of:
            continue
        estimated = ratio_of[arm] or {}
        r = estimated.get("curve")
        pair = f"{display(arm)} / {display(reference)} critical batch"
        if r is None:
            claims.append(f"{pair}: no ratio (an arm has no fit, or lacks reruns at some batch).")
            continue
        others = {e: v for e, v in estimated.items() if e != "curve" and v is not None}
        said = f"{pair}: {r.text}, seed-paired bootstrap)" + "".join(
            f"; by the {e}: {v.text})" if e != "model-free" else f"; model-free: {v.text})" for e, v in others.items()
        )
        unlocated = [display(a) for a in (arm, reference) if not fits[a].resolved]
        if unlocated:  # a ratio of critical batches the ladder does not locate is not read
            word = f"not judged ({' and '.join(unlocated)}: critical batch not resolved)"
        else:
            word = combined_word({"curve": r, **others})
            if word.startswith("no ") and r.resolvable == r.resolvable:
                low, high = r.resolvable_range
                word += f"; could resolve ≥ {ladder.ratio_text(r.resolvable)}x at 80% power" + (
                    f" ([{ladder.ratio_text(low)}, {ladder.ratio_text(high)}] at 95%, from the seeds' noise)"
                    * (low == low)
                )
            if r.unbounded:
                word += f"; in {r.unbounded:,} of its {r.draws:,} draws an arm had no finite critical batch"
            scatter = [display(a) for a in (arm, reference) if fits[a].lack_of_fit_p < ladder.LACK_OF_FIT_ALPHA]
            if scatter:  # the bootstrap redraws seeds, not the batches' selections
                word += f" (too narrow: the batches of {' and '.join(scatter)} scatter more than the seeds it redraws)"
        untested = [f"{display(a)} {len(ties[a])} of {len(crossings[a])}" for a in (arm, reference) if ties.get(a)]
        if untested and others:  # what the intervals leave out: they hold each cell's selected point fixed
            word += f"; the intervals hold the selections fixed, near ties not rerun ({', '.join(untested)} batches)"
        claims.append(f"{said}: {word}{caveat}.")
    for arm in names:
        ends = [crossings[arm][b] for b in sorted(crossings[arm]) if crossings[arm][b][0] == crossings[arm][b][0]]
        if len(ends) > 1:
            (f0, lr0), (f1, lr1) = ends[0], ends[-1]
            claims.append(
                f"{display(arm)}: the target was crossed at {f0:.0%} of the schedule (lr {lr0:.2f} of its peak) at the "
                f"smallest batch and at {f1:.0%} (lr {lr1:.2f}) at the largest where a rerun reached it"
                + (
                    ": the schedule's state at the crossing changes along the ladder, which biases steps to result."
                    if max(lr0, lr1) > 1.5 * min(lr0, lr1)
                    else "."
                )
            )
    return claims


EXCESS_TEXT = f"{ladder.EXCESS - 1:.0%}"


def combined_word(estimated: dict) -> str:
    """A ratio's word over its estimates (ladder.ESTIMATES -> Ratio): 'larger' or 'smaller' only where every
    estimate resolves it the same way, 'no difference resolved' where none resolves one, else 'depends on the
    curve' with each estimate's word."""
    words = {e: r.word for e, r in estimated.items()}
    if len(set(words.values())) == 1:
        return next(iter(words.values()))
    return "depends on the curve (" + "; ".join(f"{e}: {w}" for e, w in words.items()) + ")"


def alternatives_words(a: ladder.Alternatives, f: ladder.Fit) -> list[str]:
    """An arm's critical batch beside the curve's, in words (scaling_claims)."""
    words = []
    if a.bent.found:
        test = a.alpha
        verdict = "rejected" if test.p < ladder.LACK_OF_FIT_ALPHA else "not rejected"
        words.append(
            f"the bent curve S_min (1 + (B_noise / B)^alpha) puts it at {bent_text(a.bent)}; alpha = 1 {verdict} on "
            f"the {test.batches} batch means (F test p {test.p:.3f})"
        )
    if a.model_free[0] == a.model_free[0]:
        words.append(f"model-free (where the reruns' medians pass 1.2 x linear): {ladder.interval_text(*a.model_free)}")
    words.append(f"batches seen in the linear regime: {linear_text(a.linear)}")
    if near := a.near_smallest(f):
        words.append(f"within 2x of the smallest batch ({a.smallest:,.0f}): {', '.join(near)}; extend the ladder down")
    return words


def _no_fit_text(cells_of: pd.DataFrame) -> str:
    """Why an arm's ladder has no fit (ladder_fits): the batches whose reruns its sweep can still run, and those
    whose trials all diverged."""
    waiting, diverged = [], []
    for _, c in cells_of[cells_of["n_reruns"] == 0].iterrows():
        (diverged if never_rerun(c) else waiting).append(f"{c['global_batch']:,}")
    return "; ".join(
        [f"waiting for reruns at {', '.join(waiting)}"] * bool(waiting)
        + [f"no reruns at {', '.join(diverged)} (every trial diverged)"] * bool(diverged)
    )


def scaling(study: Study, baseline: str | None = None) -> Table:
    """Steps to result along the batch ladder for each arm (the reruns at each cell's selected point), how far
    each batch is from perfect linear scaling, where each cell crossed the target in its schedule, the fitted
    B_noise and the critical batch (Zhang et al. 2024's 20% rule) from the whole ladder (bench/analysis/ladder.py)
    with the fit's checks, the gradient noise scale the reruns logged, each arm's critical batch against the
    reference arm's, and the claims in words. `baseline`: the reference arm (default: the sweep's `primary:
    {reference: ARM}`, else LARS, else the first arm)."""
    table_cells = cells(study)
    table = Table(
        _title("Scaling: steps to result and the critical batch", table_cells),
        [
            "arm",
            "batch",
            "fewest over trials",
            "steps to result (reruns' median [≥ 95% or min-max])",
            "fitted steps",
            "reached",
            "misses' chance under the fit",
            "grid",
            "images / linear",
            "crossing: schedule (lr)",
            f"B_simple, epochs {NOISE_WINDOW[0]:g}-{NOISE_WINDOW[1]:g} (reruns' median)",
            "B_noise (fit) [95%]",
            "lack of fit p",
            "critical batch [95%]",
            "critical batch without this batch",
            "batch-0 reference, 0.2 B_noise [95%]",
            "critical batch, bent curve [95%] (alpha [95%])",
            "alpha = 1: F test p (batch means)",
            "critical batch, model-free [95%]",
            "batches in the linear regime",
        ],
        keys=2,
    )
    names = [a for a in arms(sweep_runs(study)) if a in set(table_cells["arm"])]
    check_arm(baseline, names)
    fits = ladder_fits(table_cells)
    checks = fit_checks(study, table_cells, fits)
    declared = declared_reference(study)
    reference = baseline or (
        declared if declared in fits else PRIMARY[1] if PRIMARY[1] in fits else names[0] if names else None
    )
    alternatives, ratio_of = estimates(table_cells, names, reference, fits)
    crossings = {arm: {} for arm in names}
    for arm in names:
        cells_of = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        medians = cells_of["rerun_steps"].map(_median_steps).to_numpy()
        f, check = fits[arm], checks.get(arm)
        for i, (_, c) in enumerate(cells_of.iterrows()):
            steps = np.asarray(c["rerun_steps"], float)
            ci = median_steps_ci(steps)
            grids = np.asarray(c["rerun_grid"], float)
            grid = float(np.nanmax(grids)) if np.isfinite(grids).any() else math.nan
            base = medians[0] * cells_of["global_batch"].iloc[0]  # a miss at the smallest batch: no base
            linear = medians[i] * c["global_batch"] / base if math.isfinite(base) else math.nan
            crossings[arm][c["global_batch"]] = ladder.crossings(study, c)
            fitted = critical = at_zero = NO_NUMBER
            lack = Cell(None, kind="p")
            if i == 0 and f is None:
                fitted = critical = at_zero = _no_fit_text(cells_of)
            elif i == 0:
                lack = Cell(f.lack_of_fit_p, kind="p")
                fitted = ladder.interval_text(f.b_noise, f.low, f.high)
                critical = ladder.interval_text(*f.critical)
                at_zero = ladder.interval_text(*f.critical_at_zero)
            others = alternative_cells(alternatives.get(arm)) if i == 0 else ["", Cell(None, kind="p"), "", ""]
            chance = check.misses_chance[i] if check else math.nan
            left_out = check.left_out.get(c["global_batch"], math.nan) if check else math.nan
            table.rows.append(
                [
                    display(arm),
                    c["global_batch"],
                    steps_cell(c["steps_to_result"], c["steps_to_result_grid"]),
                    Cell(medians[i], kind="steps", ci=ci[:2] if ci else None, note=_median_level(ci) if ci else ""),
                    Cell(check.fitted[i] if check else None, kind="steps"),
                    _reached_text(steps, c.get("rerun_diverged")),
                    NO_NUMBER if chance != chance or not check.misses[i] else f"{chance:.3f}",
                    Cell(grid, kind="steps"),
                    Cell(linear, kind="ratio"),
                    _crossing_text(*crossings[arm][c["global_batch"]]),
                    Cell(c["noise_scale"], kind="images"),
                    fitted,
                    lack,
                    critical,
                    NO_NUMBER if left_out != left_out else ladder.batch_text(left_out),
                    at_zero,
                    *others,
                ]
            )
    for arm, r in ratio_of.items():
        blank = [Cell(None, kind=k) for k in ("steps", "steps", "steps")] + ["", "", Cell(None, kind="steps")]
        table.rows.append(
            [
                f"{display(arm)} / {display(reference)}",
                "—",
                *blank,
                Cell(None, kind="ratio"),
                "",
                Cell(None, kind="images"),
                "",
                Cell(None, kind="p"),
                _ratio_text(r and r["curve"]),
                "",
                "",
                _ratio_text(r and r["bent curve"]),
                Cell(None, kind="p"),
                _ratio_text(r and r["model-free"]),
                "",
            ]
        )
    table.notes = [
        *([secondary] if (secondary := secondary_steps_note(table_cells)) else []),
        "fewest over trials: the fewest steps to the target over the cell's trials (Shallue et al. 2018's steps to "
        "result, chosen after the fact, so it carries the winner's luck; ∞: no trial reached it), with its grid.",
        "steps to result: the median over the reruns (the selected point of each cell with seeds other than the "
        "trials', so no selection luck) of the steps to the first evaluation at or above the target on the "
        "validation set, a miss counting as ∞; [low, high] (coverage): the median's distribution-free interval from "
        "two order statistics of the reruns with its exact coverage (at least 95% where the reruns allow it, else "
        "the smallest to the largest: 93.75% for 5; a miss ranks above every finite value; power.median_interval); "
        "reached: reruns that reached the target ('(k diverged)': reruns that diverged, which the fit leaves out: "
        "they stopped early and bound nothing); grid: the evaluation resolution (the largest over the reruns).",
        "images / linear: steps to result x batch over the smallest batch's (1 = perfect linear scaling: doubling "
        "the batch halves the steps); where it passes 1.2 outside the critical batch's interval, the claim says so.",
        "crossing: where the reruns crossed the target in their schedule, medians over the reruns that reached it: "
        "the crossing step over the run's planned steps, and the learning rate at that evaluation over the recipe's "
        f"peak (from each run's {RECIPE} and {METRICS}). Under a schedule that decays over the budget, small "
        "batches cross on a high learning rate and large ones on an annealed one, which biases steps to result "
        "and with them the critical batch.",
        "fitted steps: the fit's S(B) at the batch, beside the reruns' median; misses' chance under the fit: where "
        "reruns missed, the chance of that many misses or more when each rerun's log steps scatter about the fit "
        f"with its residual spread and a miss needs more steps than the budget (below {ladder.MISSES_ALPHA:g}: "
        "the fit does not explain them, and the claim says so).",
        "B_noise (fit): every rerun of every batch in one least-squares fit of S(B) = S_min (1 + B_noise / B) "
        "(McCandlish et al. 2018) in log steps, each rerun's steps at the middle of its last evaluation interval, a "
        "miss a lower bound at the steps it ran; [95%]: the profile-likelihood interval (the residual variance at "
        "least the evaluation grid's rounding), widened to hold the fit of every near-tied selection (a cell whose "
        "runner-up trial is near-tied and was rerun: both points' reruns). Its coverage in simulated ladders of "
        "64-1,024 with 5 reruns is in docs/algorithms.md (under the model, and with misses at the top batch the "
        "model does not predict). An interval wider than a factor of 2 prints no point: 'between L and H (not "
        "resolved)'.",
        "lack of fit p: the reruns of a batch share its selected lr, so a batch can sit off the curve as a whole: "
        "the F test of the batches' scatter about the fit (the residual sum of squares less the reruns' scatter "
        "within their batches, at least the grid's rounding) against that within-batch scatter; below "
        f"{ladder.LACK_OF_FIT_ALPHA:g}, the interval takes the batches' variance on their degrees of freedom (it "
        "widens to what the batch means can say) and the claim says so. The residual variance counts the points "
        "that cost the fit (every reached rerun, and each miss the curve passes below).",
        f"critical batch: where images to result are {EXCESS_TEXT} above perfect linear scaling (Zhang et al. 2024, "
        "'How Does Critical Batch Size Scale in Pre-training?'), linear scaling from the ladder's smallest batch B0 "
        "(the fit's steps there): B_crit = 0.2 B_noise + 1.2 B0, its interval B_noise's mapped (a sweep's "
        "scaling.linear_from: zero takes the fit's small-batch limit instead, B_crit = 0.2 B_noise); the "
        "batch-0 reference column is that 0.2 B_noise either way. Robustness (the claims): the estimate with each "
        f"batch left out (column 'without this batch') and at the targets {ladder.TARGET_SHIFT:g} point below and "
        "above the declared one (read from the reruns' evaluations: before the last, on the val subset of "
        "eval.curve_images where the recipe sets it, a crossing the target's full-val confirmation does not check; "
        "above only where the reruns went on past the target); 'not robust' when one falls outside the interval; "
        "and the batches between which the images / linear column passes 1.2 where they lie outside it.",
        "The last rows divide each arm's critical batch by the reference arm's: the point from the two fits, the "
        f"interval from {ladder.BOOTSTRAP_DRAWS:,} seed-paired bootstrap draws (the same seeds, drawn with "
        "replacement, in every cell of both arms; both refitted at the selected points): the point times exp(± t "
        "se), se the draws' standard deviation of log ratios scaled by sqrt(n / (n - 1)), t Student's on n - 1 "
        "degrees of freedom for n seeds, at 95% Bonferroni-corrected over the m arms compared with the reference "
        f"(1 − 0.05/m, m = {max(len(ratio_of), 1)}); 'resolves ≥ R x': the smallest ratio (either way) it would "
        "resolve with 80% power, exp((t_level + t_80%) se), [95%] its interval from the se's own uncertainty "
        "(chi-square on n - 1 degrees of freedom, as the verdict's MDE). A draw where an arm has no finite critical "
        "batch (its reseeded fit scales linearly) is a ratio of 0 or ∞ the se leaves out, and the claim counts such "
        "draws; where more of them than the interval's tail are, or the point itself is 0 or ∞, the interval is the "
        "draws' percentiles (which cover less than asked at 5 seeds), with no resolvable ratio. Its coverage in "
        "simulated ladders: docs/algorithms.md.",
        ALTERNATIVES_NOTE,
        f"B_simple: the simple gradient noise scale tr(Σ)/|G|² (McCandlish et al. 2018) over the steps each rerun "
        f"started within epochs {NOISE_WINDOW[0]:g} to {NOISE_WINDOW[1]:g} of the training set (the same images at "
        "every batch; a run that stopped before the window's end has none), median over the reruns; '—': no rerun "
        "logged it (one gradient group a step, or a plain optimizer's run made before those logged it). It equals "
        "McCandlish's B_noise (the batch at which images to a result are twice their small-batch minimum) only "
        "where the Hessian is a multiple of the identity (McCandlish et al.'s B_simple assumes a well-conditioned, "
        "preconditioner-free problem); on a curved, ill-conditioned loss it falls below B_noise, so read its trend "
        "along the ladder beside the B_noise (fit) column, not its value.",
        *provenance_notes(study),
        *(
            f"Claim: {claim}"
            for claim in scaling_claims(
                fits,
                names,
                reference,
                crossings,
                checks,
                ratio_of,
                untested_ties(table_cells),
                bool(secondary),
                alternatives,
            )
        ),
    ]
    return table
