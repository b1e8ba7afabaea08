"""Each arm against itself at its smallest batch (Keskar et al. 2017's question: does the gap grow with the
batch?): the across-batches table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.analysis import power
from bench.analysis.cells import (
    CONFIDENCE,
    arms,
    cells,
    provenance_notes,
    selection_notes,
    selection_se,
    selects_on_steps,
    sweep_runs,
    title,
)
from bench.analysis.pairs import UNCORRECTED_ONLY, difference_claim, mde_cell
from bench.analysis.paper import display
from bench.analysis.render import Cell, Table, claim
from bench.analysis.results import Study

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


ACROSS_COLUMNS = [
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
]

ACROSS_NOTES = (
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
)


def across_batches(study: Study, baseline: str | None = None) -> Table:
    """Each arm of a sweep selected on Top-1 at each batch against itself at its smallest batch (Keskar et al.
    2017's question: does the gap grow with the batch?): the reruns' final val Top-1, train-eval Top-1 and gap with their 95% t
    intervals, each difference from the smallest batch with Welch's interval (another batch is another experiment:
    not paired by seed), p Holm over the table's tests of that metric, the MDE at the corrected level, the verdict
    in words; its claims say of each cell whether a gap exists (seeds and image sampling) and each difference's
    conclusion. `baseline` is not used: each arm is its own reference."""
    table_cells = cells(study)
    head = title("Across batches: each arm against itself at its smallest batch", table_cells)
    table = Table(head, ACROSS_COLUMNS, keys=2)
    if selects_on_steps(table_cells):
        table.notes = [STEPS_SWEEP]
        return table
    rows = _tests(study, table_cells)
    holm = {m: power.holm([r[m].p if r[m] else math.nan for r in rows]) for m in ACROSS}
    alpha = {m: power.family_alpha(sum(r[m] is not None for r in rows)) for m in holm}
    for k, r in enumerate(rows):
        mdes = {m: power.comparison_mde(r[m], alpha[m]) if r[m] else math.nan for m in holm}
        table.claims += _gap_claims(r["arm"], r["cell"])
        words = []
        for metric in () if r["reference"] else ACROSS:
            words.append(_difference_claim(table, r, metric, holm[metric][k], mdes[metric]))
        table.rows.append(_row(r, {m: holm[m][k] for m in holm}, mdes, words))
    one_batch = ["One batch per arm: nothing to compare across batches (bench table verdict compares the arms)."]
    table.notes = [
        *(one_batch if rows and all(r["reference"] for r in rows) else []),
        *ACROSS_NOTES,
        *selection_notes(table_cells),
        *provenance_notes(study),
    ]
    return table


def _tests(study: Study, table_cells: pd.DataFrame) -> list[dict]:
    """Each arm's cells in batch order, each with its Welch tests against the arm's smallest batch (None there)."""
    rows = []
    for arm in arms(sweep_runs(study)):
        mine = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        first = mine.iloc[0] if len(mine) else None
        for i, (_, c) in enumerate(mine.iterrows()):
            tests = {m: power.compare(c[m], first[m]) if i else None for m in ACROSS}  # Welch
            rows.append({"arm": arm, "cell": c, "first": first, "reference": not i, **tests})
    return rows


def _gap_claims(arm: str, c: pd.Series) -> list[str]:
    """Whether cell c has a gap, in words (seeds and image sampling); none where it has fewer than 2 reruns."""
    batch = int(c["global_batch"])
    subject, sets_var = f"{display(arm)} gap at batch {batch}", _sets_var(c)
    if (gap_ci := power.mean_interval(_numbers(c["gap_top1"]), shared_var=sets_var)) is None:
        return []  # fewer than 2 reruns with a gap: the table's cell says why
    if sets_var != sets_var:  # an older run without its image sets' sizes: no interval without their error
        return [claim(subject, "not judged (its runs do not record the image sets' sizes)")]
    scope = f"{CONFIDENCE:.0%}: seeds and image sampling, uncorrected"
    return [claim(subject, _gap_exists_word(*gap_ci[1:]), gap_ci[1:], scope, "pct", " pp")]


def _difference_claim(table: Table, r: dict, metric: str, p_holm: float, detectable: float) -> str:
    """Row r's difference from its arm's smallest batch in `metric`: its claim added to the table, its word
    returned."""
    c, first = r["cell"], r["first"]
    batch, base = int(c["global_batch"]), int(first["global_batch"])
    test, n = r[metric], (len(_numbers(c[metric])), len(_numbers(first[metric])))
    word = _across_word(metric, batch, test, p_holm, detectable, n)
    subject = f"{display(r['arm'])} {ACROSS[metric][0]} at batch {batch} − at {base}"
    table.claims.append(difference_claim(subject, word, test, p_holm) if test else claim(subject, word))
    return word


def _row(r: dict, holm: dict, mdes: dict, words: list[str]) -> list:
    """Row r of the across-batches table (`holm`, `mdes`: its p Holm and MDE by metric)."""
    c, gap, val = r["cell"], r["gap_top1"], r["val_top1"]
    diff = lambda t: Cell(t.diff, kind="pct", ci=(t.low, t.high)) if t else Cell(None, kind="pct")  # noqa: E731
    reference = Cell(None, note=f"reference ({int(r['first']['global_batch'])})")
    return [
        display(r["arm"]),
        int(c["global_batch"]),
        _interval_cell(c["val_top1"], c["n_reruns"]),
        _interval_cell(c["train_eval_top1"], c["n_reruns"]),
        _interval_cell(c["gap_top1"], c["n_reruns"]),
        reference if r["reference"] else diff(val),
        Cell(holm["val_top1"], kind="p"),
        reference if r["reference"] else diff(gap),
        Cell(holm["gap_top1"], kind="p"),
        mde_cell(gap, mdes["gap_top1"]),
        "; ".join(words) or "the reference",
    ]
