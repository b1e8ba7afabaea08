"""The scaling table: steps to result along the batch ladder, the critical batch by the curve, the bent curve
and model-free (bench/analysis/ladder.py, critical.py), its checks, the ratios to the reference arm, and the
claims in words."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from bench.analysis import ladder, power, search
from bench.analysis.cells import (
    SECONDARY_TEXT,
    arms,
    cells,
    median_steps,
    median_steps_ci,
    never_rerun,
    provenance_notes,
    rank_trials,
    replaced_cells,
    secondary_steps_note,
    steps_cell,
    sweep_runs,
    title,
)
from bench.analysis.critical import LACK_OF_FIT_ALPHA
from bench.analysis.pairs import PRIMARY, check_arm, declared_reference, median_level, steps_ratio_of
from bench.analysis.paper import display
from bench.analysis.render import NO_NUMBER, Cell, Table
from bench.analysis.results import NOISE_WINDOW, Study
from bench.rundir import METRICS, RECIPE


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
    edges=None,
    rungs=None,
):
    """The scaling table's claims in words, made from its numbers: each arm's critical batch with its checks and
    the near ties it rests on (untested_ties), the ratios to the reference arm, and where the crossings fell in the
    schedule from the smallest batch to the largest. secondary: the sweep selected its cells on the final Top-1
    (secondary_steps_note), which each critical batch and ratio says, so a claim quoted alone keeps it."""
    checks, ratio_of, ties, alternatives = checks or {}, ratio_of or {}, ties or {}, alternatives or {}
    caveat = f"; {SECONDARY_TEXT}" if secondary else ""
    claims = [
        _arm_claim(arm, fits[arm], checks.get(arm), ties, alternatives, caveat, _search_words(arm, edges, rungs))
        for arm in names
    ]
    for arm in names:
        if arm != reference and arm in ratio_of:
            claims.append(
                _ratio_claim(arm, reference, ratio_of[arm] or {}, fits, ties, crossings, caveat, alternatives)
            )
    return claims + [c for arm in names if (c := _crossings_claim(arm, crossings[arm]))]


def _arm_claim(arm: str, f: ladder.Fit | None, check, ties: dict, alternatives: dict, caveat: str, more=()) -> str:
    """An arm's critical batch in words, with its checks (ladder.Checks or None), the near ties it rests on, the
    estimates beside the curve's and `more` (_search_words) (scaling_claims)."""
    if f is None or not f.found:
        return f"{display(arm)}: no critical batch (reruns missing, or fewer than two batches reached it)."
    critical = ladder.interval_text(*f.critical)
    words = [f"{display(arm)}: critical batch {critical} (95%; {EXCESS_TEXT} above linear scaling {_base_text(f)})"]
    if not f.resolved:
        words.append("the ladder does not locate it")
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
    if f.lack_of_fit_p < LACK_OF_FIT_ALPHA:
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
    return "; ".join([*words, *more]) + caveat + "."


GRID_SHARE = 0.1  # an evaluation grid over this share of the steps is half the 20% rule's excess: the claim says it


def _search_words(arm: str, edges: dict | None, rungs: dict | None) -> list[str]:
    """What an arm's claim owes the search and the smallest rung: the batches whose selected point lay on the edge
    of what was tried (`edges`: (arm, batch) -> search.edges' text), and, where linear scaling is measured from
    the smallest batch, how finely its reruns' crossing is read (`rungs`: arm -> (batch, median steps, grid)) when
    its grid exceeds GRID_SHARE of its steps."""
    words = []
    at = sorted((b, text) for (a, b), text in (edges or {}).items() if a == arm)
    if at:
        places = ", ".join(f"{b:,} ({text})" for b, text in at)
        words.append(f"its selected point lay on the edge of the search at {places}: the optimum may lie beyond")
    batch, steps, grid = (rungs or {}).get(arm, (None, math.nan, math.nan))
    if grid == grid and steps == steps and grid > GRID_SHARE * steps:
        words.append(
            f"the smallest batch ({batch:,}), which linear scaling is measured from, reads its crossing to within "
            f"{grid:,.0f} steps (its evaluation grid) of {steps:,.0f} ({grid / steps:.0%})"
        )
    return words


def smallest_rungs(table_cells: pd.DataFrame) -> dict[str, tuple[int, float, float]]:
    """arm -> (its smallest batch, the reruns' median steps to the target there, the largest grid of those reruns):
    the reference linear scaling is measured from, for the claims (_search_words); an arm whose sweep measures it
    from the fit's batch-0 limit instead (scaling.linear_from zero) has none."""
    out = {}
    for arm, cells_of in table_cells.groupby("arm", sort=False):
        if cells_of["linear_from"].iloc[0] != ladder.LINEAR_FROM[0]:
            continue
        c = cells_of.sort_values("global_batch").iloc[0]
        grids = np.asarray(c["rerun_grid"], float)
        grid = float(np.nanmax(grids)) if np.isfinite(grids).any() else math.nan
        out[arm] = (int(c["global_batch"]), median_steps(c["rerun_steps"]), grid)
    return out


def _ratio_claim(
    arm: str,
    reference: str,
    estimated: dict,
    fits: dict,
    ties: dict,
    crossings: dict,
    caveat: str,
    alternatives: dict,
) -> str:
    """An arm's critical batch over the reference arm's in words, by each estimate (ladder.ESTIMATES -> Ratio),
    with the word they agree on (combined_word) and what the intervals leave out (scaling_claims): the curve's
    interval redraws seeds on the curve, so it is too narrow where an arm's batches scatter about the curve more
    than its seeds do, or where its batch means reject the curve's alpha = 1 (the F test: curvature)."""
    r = estimated.get("curve")
    pair = f"{display(arm)} / {display(reference)} critical batch"
    if r is None:
        return f"{pair}: no ratio (an arm has no fit, or lacks reruns at some batch)."
    others = {e: v for e, v in estimated.items() if e != "curve" and v is not None}
    said = f"{pair}: {r.text}, seed-paired bootstrap)" + "".join(
        f"; by the {e}: {v.text})" if e != "model-free" else f"; model-free: {v.text})" for e, v in others.items()
    )
    word = ratio_word(arm, reference, estimated, fits)
    if not word.startswith("not judged"):
        if word.startswith("no ") and r.resolvable == r.resolvable:
            low, high = r.resolvable_range
            word += f"; could resolve ≥ {ladder.ratio_text(r.resolvable)}x at 80% power" + (
                f" ([{ladder.ratio_text(low)}, {ladder.ratio_text(high)}] at 95%, from the seeds' noise)" * (low == low)
            )
        if r.unbounded:
            word += f"; in {r.unbounded:,} of its {r.draws:,} draws an arm had no finite critical batch"
        # the bootstrap redraws seeds on the curve: too narrow where the batches scatter about it more than the
        # seeds do, or where the batch means reject its shape (alpha = 1)
        scatter = [display(a) for a in (arm, reference) if fits[a].lack_of_fit_p < LACK_OF_FIT_ALPHA]
        bent = [
            display(a) for a in (arm, reference) if a in alternatives and alternatives[a].alpha.p < LACK_OF_FIT_ALPHA
        ]
        reasons = [f"the batches of {' and '.join(scatter)} scatter more than the seeds it redraws"] * bool(scatter)
        reasons += [f"the batch means of {' and '.join(bent)} reject the curve's alpha = 1"] * bool(bent)
        if reasons:
            word += f" (too narrow: {'; '.join(reasons)})"
    untested = [f"{display(a)} {len(ties[a])} of {len(crossings[a])}" for a in (arm, reference) if ties.get(a)]
    if untested and others:  # what the intervals leave out: they hold each cell's selected point fixed
        word += f"; the intervals hold the selections fixed, near ties not rerun ({', '.join(untested)} batches)"
    return f"{said}: {word}{caveat}."


def ratio_word(arm: str, reference: str, estimated: dict, fits: dict) -> str:
    """The word an arm's critical batch over the reference arm's earns (estimated: ladder.ESTIMATES -> Ratio or
    None, its curve's present): 'not judged' where the ladder does not locate one of them, else combined_word's."""
    unlocated = [display(a) for a in (arm, reference) if not fits[a].resolved]
    if unlocated:  # a ratio of critical batches the ladder does not locate is not read
        return f"not judged ({' and '.join(unlocated)}: critical batch not resolved)"
    return combined_word({e: v for e, v in estimated.items() if v is not None})


def ratio_words(
    study: Study, table_cells: pd.DataFrame, baseline: str | None = None
) -> tuple[str | None, dict[str, str]]:
    """The scaling table's reference arm and, for each other arm with a ratio, its word (ratio_word): what the
    figures' captions say of the critical batches they draw."""
    names = [a for a in arms(sweep_runs(study)) if a in set(table_cells["arm"])]
    fits = ladder_fits(table_cells)
    reference = _reference(study, baseline, names, fits)
    _, ratio_of = estimates(table_cells, names, reference, fits)
    return reference, _words(ratio_of, reference, fits)


def _words(ratio_of: dict, reference: str | None, fits: dict) -> dict[str, str]:
    """arm -> its ratio's word (ratio_word), for each arm with a ratio by the curve."""
    return {a: ratio_word(a, reference, r, fits) for a, r in ratio_of.items() if r and r.get("curve")}


def _reference(study: Study, baseline: str | None, names: list[str], fits: dict) -> str | None:
    """The arm the ratios divide by: `baseline`, else the sweep's `primary: {reference: ARM}`, else LARS, else the
    first arm."""
    declared = declared_reference(study)
    return baseline or (
        declared if declared in fits else PRIMARY[1] if PRIMARY[1] in fits else names[0] if names else None
    )


def _crossings_claim(arm: str, crossings: dict) -> str | None:
    """Where an arm's reruns crossed the target in their schedule at its smallest and largest batch that reached
    it (batch -> (fraction of the schedule, lr over its peak)); None with fewer than two such batches."""
    ends = [crossings[b] for b in sorted(crossings) if crossings[b][0] == crossings[b][0]]
    if len(ends) < 2:
        return None
    (f0, lr0), (f1, lr1) = ends[0], ends[-1]
    return (
        f"{display(arm)}: the target was crossed at {f0:.0%} of the schedule (lr {lr0:.2f} of its peak) at the "
        f"smallest batch and at {f1:.0%} (lr {lr1:.2f}) at the largest where a rerun reached it"
        + (
            ": the schedule's state at the crossing changes along the ladder, which biases steps to result."
            if max(lr0, lr1) > 1.5 * min(lr0, lr1)
            else "."
        )
    )


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
        if test.p != test.p:  # three parameters through three batch means leave no residual to test against
            tested = f"alpha = 1 not testable on {test.batches} batch means (the F test needs 4 or more)"
        else:
            verdict = "rejected" if test.p < LACK_OF_FIT_ALPHA else "not rejected"
            tested = f"alpha = 1 {verdict} on the {test.batches} batch means (F test p {test.p:.3f})"
        words.append(f"the bent curve S_min (1 + (B_noise / B)^alpha) puts it at {bent_text(a.bent)}; {tested}")
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


SCALING_COLUMNS = [
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
]

SCALING_NOTES = (  # before the ratio rows' note (_ratio_note)
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
    f"{LACK_OF_FIT_ALPHA:g}, the interval takes the batches' variance on their degrees of freedom (it "
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
)

NOISE_SCALE_NOTE = (
    f"B_simple: the simple gradient noise scale tr(Σ)/|G|² (McCandlish et al. 2018) over the steps each rerun "
    f"started within epochs {NOISE_WINDOW[0]:g} to {NOISE_WINDOW[1]:g} of the training set (the same images at "
    "every batch; a run that stopped before the window's end has none), median over the reruns; '—': no rerun "
    "logged it (one gradient group a step, or a plain optimizer's run made before those logged it). It equals "
    "McCandlish's B_noise (the batch at which images to a result are twice their small-batch minimum) only "
    "where the Hessian is a multiple of the identity (McCandlish et al.'s B_simple assumes a well-conditioned, "
    "preconditioner-free problem); on a curved, ill-conditioned loss it falls below B_noise, so read its trend "
    "along the ladder beside the B_noise (fit) column, not its value."
)


def _ratio_note(m: int) -> str:
    """The note on the ratio rows, `m` the arms compared with the reference (Bonferroni over them)."""
    return (
        "The last rows divide each arm's critical batch by the reference arm's: the point from the two fits, the "
        f"interval from {ladder.BOOTSTRAP_DRAWS:,} seed-paired bootstrap draws (the same seeds, drawn with "
        "replacement, in every cell of both arms; both refitted at the selected points): the point times exp(± t "
        "se), se the draws' standard deviation of log ratios scaled by sqrt(n / (n - 1)), t Student's on n - 1 "
        "degrees of freedom for n seeds, at 95% Bonferroni-corrected over the m arms compared with the reference "
        f"(1 − 0.05/m, m = {m}); 'resolves ≥ R x': the smallest ratio (either way) it would "
        "resolve with 80% power, exp((t_level + t_80%) se), [95%] its interval from the se's own uncertainty "
        "(chi-square on n - 1 degrees of freedom, as the verdict's MDE). A draw where an arm has no finite critical "
        "batch (its reseeded fit scales linearly) is a ratio of 0 or ∞ the se leaves out, and the claim counts such "
        "draws; where more of them than the interval's tail are, or the point itself is 0 or ∞, the interval is the "
        "draws' percentiles (which cover less than asked at 5 seeds), with no resolvable ratio. Its coverage in "
        "simulated ladders: docs/algorithms.md."
    )


def scaling(study: Study, baseline: str | None = None, swapped_in: Study | None = None) -> Table:
    """Steps to result along the batch ladder for each arm (the reruns at each cell's selected point), how far
    each batch is from perfect linear scaling, where each cell crossed the target in its schedule, the fitted
    B_noise and the critical batch (Zhang et al. 2024's 20% rule) from the whole ladder (bench/analysis/ladder.py)
    with the fit's checks, the gradient noise scale the reruns logged, each arm's critical batch against the
    reference arm's, and the claims in words. `baseline`: the reference arm (default: the sweep's `primary:
    {reference: ARM}`, else LARS, else the first arm). `swapped_in`: another sweep's cells in place of the study's
    own (swapped_scaling)."""
    if swapped_in is not None:
        return swapped_scaling(study, swapped_in, baseline)
    return _scaling(study, baseline)[0]


def swapped_scaling(study: Study, other: Study, baseline: str | None = None) -> Table:
    """`bench table scaling PATH --cells OTHER`: the scaling table with OTHER's cells in place of the study's own
    (cells.replaced_cells; a check that searched those cells otherwise, e.g. the warm-up with the lr), its ratio
    rows and claims only for the arms swapped in (the others' ratios stand against a reference searched otherwise);
    beside, each swapped cell's selection and steps to result against the study's own cell; and the rule, in
    words: the answer holds where no ratio read changes its word (larger, smaller, depends on the curve, no
    difference resolved, not judged), and hinges on the swapped cells where one does."""
    swapped, replaced = replaced_cells(study, other)
    read = set(a for a, _ in replaced)
    table, reference, words, new_cells = _scaling(swapped, baseline, read)
    own_cells = cells(study)
    _, own_words = ratio_words(study, own_cells, reference)
    own, new = (c.set_index(["arm", "global_batch"], drop=False) for c in (own_cells, new_cells))
    table.notes += [f"Swapped: {_swapped_cell_text(new.loc[c], own.loc[c])}" for c in replaced] + [
        SWAPPED_NOTE,
        f"Claim: {_swap_rule(sweep_runs(other)['sweep'].iloc[0], replaced, reference, own_words, words)}",
    ]
    return table


SWAPPED_NOTE = (
    "The swapped lines: each cell swapped in against the study's own at that batch: the selected lr and warm-up "
    "(epochs), the reruns' median steps to result, and their ratio (Hodges-Lehmann) with its exact Mann-Whitney interval, "
    "95% a cell, uncorrected: a description beside the rule (the claim below), which reads the ratios' words."
)


def _swapped_cell_text(c: pd.Series, mine: pd.Series) -> str:
    """A swapped-in cell `c` against the study's own cell `mine`, in words (swapped_scaling)."""
    r = steps_ratio_of(c, mine)
    selected = (
        f"{display(c['arm'])} at {int(c['global_batch']):,}: lr {c['best_lr']:.3g}, warm-up "
        f"{c['best_warmup_epochs']:.2f} (the study's: lr {mine['best_lr']:.3g}, warm-up "
        f"{mine['best_warmup_epochs']:.2f})"
    )
    if not len(c["rerun_steps"]):
        return f"{selected}; " + ("no reruns (every trial diverged)" if never_rerun(c) else "no reruns yet")
    if r.ratio is None or not r.number:
        ratio = "none (" + ("; ".join(r.notes) or "fewer than 2 reruns a side") + ")"
    else:
        low, high = (f"{v:.2f}".replace("inf", "∞") for v in (r.ratio.low, r.ratio.high))
        grid = [n.removeprefix("unresolved: ") for n in r.notes if n.startswith("unresolved")]
        word = (
            "no difference resolved" + "".join(f" ({g})" for g in grid)
            if grid or r.ratio.low <= 1 <= r.ratio.high
            else "fewer steps swapped in"
            if r.ratio.high < 1
            else "more steps swapped in"
        )
        ratio = f"{r.ratio.point:.2f} [{low}, {high}] ({power.coverage_text(r.ratio.coverage)}): {word}"
        ratio += "".join(f"; {n}" for n in r.notes if not n.startswith("unresolved"))
    return (
        f"{selected}; steps to result {median_steps(c['rerun_steps']):,.0f} against "
        f"{median_steps(mine['rerun_steps']):,.0f}, ratio {ratio}"
    )


def _swap_rule(sweep: str, replaced: list, reference: str | None, before: dict, after: dict) -> str:
    """The swap's rule in words: each swapped arm's ratio word with the study's cells and with the swapped ones;
    the answer holds where none changes, hinges on the swapped cells where one does (swapped_scaling)."""
    names = list(dict.fromkeys(a for a, _ in replaced))
    batches = ", ".join(f"{b:,}" for b in sorted({b for _, b in replaced}))
    head = f"The cells of {sweep} ({', '.join(map(display, names))} at {batches}) in place of the study's"
    read = [a for a in names if a != reference]
    if not read:
        return f"{head}: no ratio to read (only the reference arm {display(reference)} was swapped)"
    pending = [display(a) for a in read if a not in before or a not in after]
    if pending:
        return f"{head}: the rule is not read yet ({', '.join(pending)}: no ratio, an arm lacks reruns)"
    kind = {a: tuple(w[a].split(" (")[0] for w in (before, after)) for a in read}
    said = "; ".join(
        f"{display(a)} / {display(reference)}: {old}" + (" either way" if old == now else f" before, {now} swapped")
        for a, (old, now) in kind.items()
    )
    changed = sum(old != now for old, now in kind.values())
    verdict = (
        f"the answer hinges on the swapped cells ({changed} of {len(read)} ratio words change)"
        if changed
        else "the answer holds (no ratio word changes)"
    )
    return f"{head}: {said}: {verdict}"


def _scaling(study: Study, baseline: str | None, read: set[str] | None = None) -> tuple:
    """The scaling table (scaling), its reference arm, each other arm's ratio word (ratio_word) and the cells it
    was made from; `read`: the arms whose ratio rows and claims it prints (None: all)."""
    table_cells = cells(study)
    table = Table(title("Scaling: steps to result and the critical batch", table_cells), SCALING_COLUMNS, keys=2)
    names = [a for a in arms(sweep_runs(study)) if a in set(table_cells["arm"])]
    check_arm(baseline, names)
    fits = ladder_fits(table_cells)
    checks = fit_checks(study, table_cells, fits)
    reference = _reference(study, baseline, names, fits)
    alternatives, ratio_of = estimates(table_cells, names, reference, fits)
    words = _words(ratio_of, reference, fits)
    compared = max(len(ratio_of), 1)  # the Bonferroni family: every arm against the reference, read or not
    ratio_of = {a: r for a, r in ratio_of.items() if read is None or a in read}
    crossings = {}
    for arm in names:
        cells_of = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        crossings[arm] = {c["global_batch"]: ladder.crossings(study, c) for _, c in cells_of.iterrows()}
        table.rows += _arm_rows(arm, cells_of, fits[arm], checks.get(arm), alternatives.get(arm), crossings[arm])
    table.rows += [_ratio_row(f"{display(arm)} / {display(reference)}", r) for arm, r in ratio_of.items()]
    secondary = secondary_steps_note(table_cells)
    edges = search.edges_by_cell(study, sweep_runs(study), table_cells, rank_trials)
    rungs = smallest_rungs(table_cells)
    claims = scaling_claims(
        fits,
        names,
        reference,
        crossings,
        checks,
        ratio_of,
        untested_ties(table_cells),
        bool(secondary),
        alternatives,
        edges,
        rungs,
    )
    table.notes = [
        *([secondary] if secondary else []),
        *SCALING_NOTES,
        _ratio_note(compared),
        ALTERNATIVES_NOTE,
        NOISE_SCALE_NOTE,
        *provenance_notes(study),
        *(f"Claim: {claim}" for claim in claims),
    ]
    return table, reference, words, table_cells


def _arm_rows(arm: str, cells_of: pd.DataFrame, f, check, alternatives, crossings: dict) -> list[list]:
    """An arm's rows of the scaling table, a batch a row (`cells_of` in batch order; its fit, the fit's checks and
    the estimates beside it on the first row; `crossings`: batch -> ladder.crossings)."""
    medians = cells_of["rerun_steps"].map(median_steps).to_numpy()
    rows = []
    for i, (_, c) in enumerate(cells_of.iterrows()):
        steps = np.asarray(c["rerun_steps"], float)
        ci = median_steps_ci(steps)
        grids = np.asarray(c["rerun_grid"], float)
        grid = float(np.nanmax(grids)) if np.isfinite(grids).any() else math.nan
        base = medians[0] * cells_of["global_batch"].iloc[0]  # a miss at the smallest batch: no base
        linear = medians[i] * c["global_batch"] / base if math.isfinite(base) else math.nan
        fitted, lack, critical, at_zero = (
            _fit_cells(f, cells_of) if i == 0 else (NO_NUMBER, Cell(None, kind="p"), NO_NUMBER, NO_NUMBER)
        )
        others = alternative_cells(alternatives) if i == 0 else ["", Cell(None, kind="p"), "", ""]
        chance = check.misses_chance[i] if check else math.nan
        left_out = check.left_out.get(c["global_batch"], math.nan) if check else math.nan
        rows.append(
            [
                display(arm),
                c["global_batch"],
                steps_cell(c["steps_to_result"], c["steps_to_result_grid"]),
                Cell(medians[i], kind="steps", ci=ci[:2] if ci else None, note=median_level(ci) if ci else ""),
                Cell(check.fitted[i] if check else None, kind="steps"),
                _reached_text(steps, c.get("rerun_diverged")),
                NO_NUMBER if chance != chance or not check.misses[i] else f"{chance:.3f}",
                Cell(grid, kind="steps"),
                Cell(linear, kind="ratio"),
                _crossing_text(*crossings[c["global_batch"]]),
                Cell(c["noise_scale"], kind="images"),
                fitted,
                lack,
                critical,
                NO_NUMBER if left_out != left_out else ladder.batch_text(left_out),
                at_zero,
                *others,
            ]
        )
    return rows


def _fit_cells(f: ladder.Fit | None, cells_of: pd.DataFrame) -> tuple:
    """The whole-ladder fit's cells of an arm's first row: B_noise, lack of fit p, the critical batch and the
    batch-0 reference; why there is no fit where there is none."""
    if f is None:
        why = _no_fit_text(cells_of)
        return why, Cell(None, kind="p"), why, why
    return (
        ladder.interval_text(f.b_noise, f.low, f.high),
        Cell(f.lack_of_fit_p, kind="p"),
        ladder.interval_text(*f.critical),
        ladder.interval_text(*f.critical_at_zero),
    )


def _ratio_row(label: str, r: dict | None) -> list:
    """A ratio row of the scaling table: an arm's critical batch over the reference arm's by each estimate."""
    blank = [Cell(None, kind=k) for k in ("steps", "steps", "steps")] + ["", "", Cell(None, kind="steps")]
    return [
        label,
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
