"""The tables of a sweep's pairs (bench/analysis/pairs.py): the verdict (each pair at each batch, tuned), the
matched points (both arms at one arm's point) and the plan (seeds a next study needs)."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from bench.analysis import power
from bench.analysis.cells import (
    CONFIDENCE,
    arms,
    cells,
    mean_std_n,
    provenance_notes,
    rerun_cell,
    selection_notes,
    sweep_runs,
    title,
)
from bench.analysis.pairs import (
    PRIMARY,
    UNCORRECTED_ONLY,
    Pair,
    comparisons_table,
    difference_claim,
    gap_word,
    mde_cell,
    near_tie_word,
    primary_pairs,
    primary_text,
    selection_word,
    steps_ratio,
    verdict_claim,
)
from bench.analysis.paper import display
from bench.analysis.render import NO_NUMBER, Cell, Table, claim
from bench.analysis.results import Study, once_per_seed

PLAN_EFFECT = 1.0  # pp: "seeds for 1 pp" plans the next study at the observed noise


# a val Top-1 difference's columns, the verdict's and the matched table's
DIFFERENCE_COLUMNS = [
    "val Top-1 X",
    "val Top-1 Y",
    "Δ val Top-1 (X − Y)",
    "test",
    "p",
    "p Holm",
    "MDE 80% at α/m [95%]",
]

VERDICT_COLUMNS = [
    *DIFFERENCE_COLUMNS,
    f"seeds for {PLAN_EFFECT:g} pp",
    "Δ gap (X − Y)",
    "p Holm (gap)",
    "MDE gap 80% at α/m [95%]",
    "gap verdict",
    "steps to target X / Y",
    "verdict",
]


def verdict(study: Study, baseline: str | None = None) -> Table:
    """For each batch and pair of arms (or each arm against `baseline`): differences with 95% intervals, p-values
    Holm-adjusted within their family, the minimum detectable effect at the family's corrected level (with its
    interval), and a word (bench/analysis/pairs.py's docstring)."""
    rows, table_cells, table = comparisons_table(
        study, baseline, "Verdict: tuned optimizers compared at each global batch", VERDICT_COLUMNS
    )
    for r in rows:
        family = [m for m in rows if m.holm_family == r.holm_family]
        word = near_tie_word(r, selection_word(r, r.cx, r.cy, family), family)
        table.claims.append(verdict_claim(r, word))
        if r.gap:
            subject = f"{display(r.x)} − {display(r.y)} generalization gap {r.subject}"
            table.claims.append(difference_claim(subject, gap_word(r), r.gap, r.gap_p_holm))
        table.rows.append(_verdict_row(r, word))
    names = arms(sweep_runs(study))
    primary, source = primary_pairs(study, names, baseline)
    for x, y in primary:  # each primary pair's average over the batches; a control is another question
        _pooled_row(table, [r for r in rows if (r.x, r.y) == (x, y) and not r.control], x, y)
    control = any(r.control for r in rows)
    table.notes = [
        *VERDICT_NOTES[:3],
        _families_note(primary_text(primary, names), source, control),
        *VERDICT_NOTES[3:],
        *selection_notes(table_cells),
        *provenance_notes(study),
    ]
    return table


def _verdict_row(r: Pair, word: str) -> list:
    """Pair r's row of the verdict table, `word` its verdict."""
    c, gap = r.c, r.gap
    detectable = power.comparison_mde(c, r.alpha) if c else math.nan
    sd = lambda cell: mean_std_n(cell["val_top1"])[1]  # noqa: E731
    seeds = power.seeds_to_resolve(PLAN_EFFECT, c, sd(r.cx), sd(r.cy), r.alpha) if c else None
    return [
        r.batch,
        display(r.x),
        display(r.y),
        r.family_text,
        *(
            Cell(None, note="not compared (speed)") if r.speed else rerun_cell(cell, "val_top1")
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


def _pooled_row(table: Table, tests: list[Pair], x: str, y: str) -> None:
    """A primary pair's exploratory average over its batches (power.pooled), its claim and its row."""
    pooled = power.pooled([r.c for r in tests]) if len(tests) > 1 else None
    if pooled is None:
        return
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


VERDICT_NOTES = (  # the verdict table's notes; _families_note goes fourth
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
)


def _families_note(primary: str, source: str, control: bool) -> str:
    """The verdict's note on its p-values and Holm families: `primary` in words, where it was declared (`source`),
    and whether the sweep declares control batches."""
    return (
        f"p: the test's two-sided p-value; p Holm: adjusted by Holm's step-down method within the family, 'primary' "
        f"= {primary} at each batch ({source}), each pair a family of its own over the batches "
        "(a declared question each)"
        + (
            ", 'primary (control)' at the batches the sweep declares a control (primary.control: where the question "
            "expects no difference; tested and corrected with its family, left out of the exploratory average)"
            * control
        )
        + ", 'secondary' = every other comparison in this table, one family; 'exploratory' = a primary pair's "
        "average difference over the batches with the pooled sd of its "
        "per-seed differences (power.pooled: assumes equal noise at every batch; another question than the declared "
        "one, so not in its family and not Holm-adjusted; MDE at α = 0.05)."
    )


MATCHED_NOTES = (
    "Each row: both arms trained at one arm's selected point (its lr, warm-up, ... from the tuning), the same "
    "seeds on both sides (paired); 'point of' names whose point. The tuned verdict answers 'which optimizer, "
    "each tuned, wins'; this table answers 'does the update rule change the result at the same "
    "hyperparameters'. A batch where both arms selected the same point has no row here: the tuned verdict "
    "already compares them at that point.",
    "p Holm: Holm's adjustment over every row of this table (its own family); MDE at α/m: at the level of "
    "Holm's first step, with its 95% interval from the noise's uncertainty.",
)


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
        title("Matched points: both optimizers at each one's selected point", table_cells),
        ["batch", "point of", "X", "Y", *DIFFERENCE_COLUMNS, "verdict"],
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
    table.notes = list(MATCHED_NOTES)
    if not rows:
        table.notes.append("No matched reruns here (the sweep file's reruns.matched names the pairs).")
    return table


PLAN_EFFECTS = (0.25, 0.5, 1.0)  # pp: the effects `bench table plan` sizes a next study for


PLAN_NOTE = (
    "noise sd: paired: the sd of the per-seed differences; Welch: the root mean square of the two sides' sds; "
    "[95%]: its chi-square interval on the test's df. Seeds for E pp: the fewest seeds per side at which the "
    "same test detects a true difference of E points with 80% power at level α/m (Holm's first step over the "
    "family's m tests), at the observed noise / at the upper end of its interval (the planning value: a study "
    "sized on it is underpowered only if the noise is worse than this pilot's 95% interval allows)."
)


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
    table.notes = [PLAN_NOTE]
    if not table.rows and any(r.speed for r in rows):  # a speed sweep's pairs have no Top-1 test to plan for
        table.notes.insert(
            0,
            "This sweep selected on steps to the target: its runs stop there, so it has no Top-1 test to plan seeds "
            "for; the verdict's steps ratios say where the seeds were too few, and how many a side would reach the "
            "family's level.",
        )
    return table
