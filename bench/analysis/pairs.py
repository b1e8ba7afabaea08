"""The pairs a sweep's verdict compares (each arm against --baseline, else the sweep file's `primary`, else
PRIMARY: VRGD-LARS against LARS; and every other pair, the secondary family), and the words each pair earns.

- Verdict on val Top-1 (bench/analysis/power.py): the difference of the reruns' means, X - Y, with its 95%
  interval, paired by seed when both sides reran the same seeds (same initialisation and data order), else
  Welch's; its p-value, and that p Holm-adjusted within its family: a primary pair, one test per batch, each pair
  a family of its own (primary_pairs), or the secondary comparisons (every other pair at every batch), one
  family. "X better" / "Y better" when the adjusted p is under 0.05, else "within noise (could detect ≥ MDE pp)":
  the minimum detectable effect at 80% power at the observed noise and seeds; "seeds for 1 pp" says how many
  seeds per side would detect a 1-point difference at that noise. A diverged rerun has no final accuracy and is
  left out of its side's mean (the row says so); a side whose reruns all diverged loses to one that trained. The
  gap difference gets the same interval; the steps ratio X / Y is the median of the pairwise ratios of the
  reruns' steps to target (Hodges-Lehmann; a miss = ∞) with the exact Mann-Whitney interval and its attained
  coverage (power.ratio_interval: distribution-free, no resampling), given when the misses leave that median
  finite; a speed verdict needs that interval at the family's level, which 2 vs 2 reruns cannot reach ("too few
  seeds"). Where a selection was a near tie, a verdict word stands only if the runner-up's reruns agree
  (near_tie_word); each row's conclusion ends the table as a sentence (render.claim).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from bench.analysis import power, search
from bench.analysis.cells import CONFIDENCE, arms, cells, never_rerun, sweep_runs, title
from bench.analysis.paper import display
from bench.analysis.render import Cell, Table, claim
from bench.analysis.results import Study
from bench.errors import UserError

PRIMARY = ("vrgd_lars", "lars")  # the study's declared question: its own Holm family, one test per batch


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
        notes.append(f"unresolved: the medians differ by no more than the grid of {grid:,.0f} step{'s' * (grid != 1)}")
    return StepsRatio(power.ratio_interval(sx, sy, confidence), notes, (len(sx), len(sy)), confidence)


def steps_ratio(cell_x: pd.Series, cell_y: pd.Series, confidence: float = CONFIDENCE) -> Cell:
    """steps_ratio_of as a table cell: 'point [low, high] (coverage)'; no number when the misses leave the median
    undetermined or infinite (0.00 or ∞ would read as a speedup)."""
    r = steps_ratio_of(cell_x, cell_y, confidence)
    if not r.number:
        return Cell(None, kind="ratio", note="; ".join(r.notes))
    return Cell(r.ratio.point, kind="ratio", ci=_finite(r.ratio), note="; ".join([_level(r.ratio), *r.notes]))


def median_level(ci: tuple[float, float, float]) -> str:
    """A median interval's exact coverage, with its ends where the upper is a miss (a Cell prints finite ones)."""
    return ("" if math.isfinite(ci[1]) else f"[{ci[0]:,.0f}, ∞] ") + power.coverage_text(ci[2])


def _finite(r: power.Ratio) -> tuple[float, float] | None:
    return (r.low, r.high) if math.isfinite(r.low) and math.isfinite(r.high) else None


def _level(r: power.Ratio) -> str:
    """The attained coverage, with the interval where an end is infinite (a Cell prints only finite ones)."""
    ends = "" if _finite(r) else f"[{r.low:.2f}, {r.high:.2f}] ".replace("inf", "∞")
    return ends + power.coverage_text(r.coverage)


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


def comparisons_table(study: Study, baseline: str | None, head: str, columns: list[str]):
    """The verdict's comparisons (pairs_of), the study's cells, and an empty table for them, a row a comparison
    (batch, X, Y, family first): the verdict's and the plan's common start."""
    table_cells = cells(study)
    pairs = pairs_of(study, table_cells, baseline)
    names = arms(sweep_runs(study))
    primary = primary_text(primary_pairs(study, names, baseline)[0], names)
    table = Table(title(f"{head}; primary: {primary}", table_cells), ["batch", "X", "Y", "family", *columns], keys=3)
    return pairs, table_cells, table
