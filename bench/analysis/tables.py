"""The named tables of `bench table NAME`: the papers' tables side by side with measured runs, and `compare`.

Measured cells come from seed aggregates (results.aggregate): mean ± sample std
over seeds, n = runs. A paper table uses only runs in that paper's setting
(catalog.PAPER_SETTINGS); a cell with no such run says '—', nothing is filled in. When
several recipes exist for one optimizer at one batch (e.g. a learning-rate
sweep), the one with the highest mean final val Top-1 is used and the footnote
says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd

from bench import catalog
from bench.analysis import paper
from bench.analysis.paper import MLPERF_TARGET, display
from bench.analysis.render import NO_NUMBER, Cell, Table, cell
from bench.analysis.results import Study, best_groups, refuse_sweep, variant_names
from bench.errors import UserError

MEASURED_TOP1 = "measured = val Top-1 (%) at the last evaluation, mean ± sample std over seeds (n = runs)"
MISSING = f"{NO_NUMBER} = no published number, or no measured run in the paper's setting at that batch"
ROUNDING_PP = 0.011  # two printed decimals: train − test may differ from the printed gap by one last digit
FINAL_VALUES = ("val_top1", "val_top5", "train_eval_top1", "gap_top1", "gap_loss")
SPEEDUP_DEFINITIONS = [
    "speedup (a) = B's mean steps (epochs, training seconds) to reach the target / A's; A = the row, B = the "
    "baseline optimizer's recipe at the same global batch and setting; > 1: A reaches the target sooner; "
    "∞: only A reached it; 'not reached': A did not (never a number, which would read as a speedup); — : neither "
    "did.",
    "speedup (b) = B's mean steps at its last evaluation / the steps at which A's mean val Top-1 over seeds first "
    "reaches B's mean final val Top-1; 'not reached' when it never does.",
    "to-target columns: first evaluation with val Top-1 ≥ the recipe's target_top1 (training time only); "
    "∞ when a seed never reached it (mean over seeds is ∞ if any seed missed; 'reached' says how many did).",
]


def measured_cell(group: pd.Series, metric: str, kind: str = "pct", n: bool = True, notes: bool = True) -> Cell:
    """A measured cell from a seed aggregate; says when seeds diverged or runs are unfinished.
    Final values (FINAL_VALUES) of a diverged run do not exist: they are averaged over the other seeds.
    notes=False leaves the remarks to another column (the report's status)."""
    remarks = []
    if metric in FINAL_VALUES and group["n_diverged"]:
        if group["n_diverged"] == group["n"]:
            return Cell(None, n=group["n"] if n else None, note="diverged", kind=kind)
        remarks.append(f"{group['n_diverged']} of {group['n']} diverged, mean of the rest")
    if group["unfinished"]:
        remarks.append("unfinished")
    return Cell(
        group[metric], group[f"{metric}_std"], group["n"] if n else None, ", ".join(remarks) if notes else "", kind
    )


def _several(groups: pd.DataFrame) -> list[str]:
    counts = groups.groupby(["setting", "global_batch", "optimizer"]).size()
    if (counts > 1).any():
        return [
            "Where several recipes exist for one optimizer at one batch, the one with the highest mean final "
            "val Top-1 is shown (`bench table compare` lists all)."
        ]
    return []


class PaperRuns:
    """The seed aggregates of one paper setting, looked up by published method name and batch."""

    def __init__(self, study: Study | None, setting: str):
        """`study` None: no runs (`bench table NAME` where the default results folder does not exist), the
        published numbers alone."""
        no_runs = pd.DataFrame({k: [] for k in ("paper", "setting", "optimizer", "global_batch")})
        groups = study.groups if study else no_runs
        self.study, self.setting = study, setting
        self.groups = groups[groups["paper"] == setting]
        self.others = int((groups["paper"] != setting).sum())
        self.best = {(b, o): g for (_, b, o), g in best_groups(self.groups).items()} if study else {}
        self.finals = study.runs.set_index("run")["val_top1"] if study else None  # each run's final val Top-1
        self.used_names: set[str] = set()

    def get(self, method: str, batch: int) -> pd.Series | None:
        for name in paper.MEASURED_AS.get(method, (method,)):
            if (batch, name) in self.best:
                self.used_names.add(f"{method}={name}")
                return self.best[(batch, name)]
        return None

    def batches(self, methods) -> set[int]:
        names = {n for m in methods for n in paper.MEASURED_AS.get(m, (m,))}
        return set(self.groups.loc[self.groups["optimizer"].isin(names), "global_batch"].astype(int))

    def measured(self, method: str, batch: int, metric: str = "val_top1", judged: bool = False) -> Cell:
        """The seed aggregate's cell; judged: its note says how many seeds' final val Top-1 reached the
        paper's target (its PaperSetting record)."""
        g = self.get(method, batch)
        if g is None:
            return Cell(None)
        out = measured_cell(g, metric)
        if not judged:
            return out
        target = paper.SETTINGS[self.setting].target
        finals = self.finals.loc[list(g["runs"])]
        reached = f"{int((finals >= target).sum())}/{len(finals)} ≥ {target:g}"
        return replace(out, note="; ".join(filter(None, [out.note, reached])))

    def published(self, value: float) -> Cell:
        """A published Top-1, noted 'below target' where it misses the paper's own target."""
        below = value == value and value < paper.SETTINGS[self.setting].target
        return cell(value, note="below target") if below else cell(value)

    def target_note(self) -> str:
        setting = paper.SETTINGS[self.setting]
        target, where = setting.target, setting.target_source
        return (
            f"target: {target:g}% val Top-1 ({where}); a published number under it is marked 'below target', "
            f"a measured cell says how many seeds' final val Top-1 reached it."
        )

    def notes(self) -> list[str]:
        out = [paper.criteria(paper.SETTINGS[self.setting]) + "."]
        substitutes = sorted(u for u in self.used_names if u.split("=")[0] != u.split("=")[1])
        if substitutes:
            out.append("Measured with another registry name: " + ", ".join(substitutes) + ".")
        if self.study is None:
            out.append(
                "Measured: no runs given (the default results folder does not exist): the published numbers alone."
            )
        if self.others:
            out.append(
                f"{self.others} recipe group(s) outside this setting are not used here (see `bench table compare`)."
            )
        return out + _several(self.groups)


def _delta(a: Cell, b: Cell) -> Cell:
    """b - a for two cells with numbers (pp), else '—'."""
    if a.empty or b.empty:
        return Cell(None)
    return Cell(b.value - a.value)


def vrgd_imagenet(study: Study, baseline: str | None = None) -> Table:
    pub, source = paper.reference("vrgd_imagenet_top1")
    pub = pub.set_index("method")
    runs = PaperRuns(study, "imagenet")
    batches = sorted({int(c) for c in pub.columns} | runs.batches(["lars", "vrgd_lars"]))
    table = Table(
        f"ImageNet ResNet-50 Top-1 (%) by global batch: LARS vs VRGD-LARS, judged at "
        f"{paper.SETTINGS['imagenet'].target:g}%",
        [
            "batch",
            "LARS published",
            "LARS measured",
            "VRGD-LARS published",
            "VRGD-LARS measured",
            "delta published",
            "delta measured",
        ],
    )
    for b in batches:
        lp, vp = (runs.published(pub.loc[m].get(str(b), math.nan)) for m in ("lars", "vrgd_lars"))
        lm, vm = runs.measured("lars", b, judged=True), runs.measured("vrgd_lars", b, judged=True)
        table.rows.append([b, lp, lm, vp, vm, _delta(lp, vp), _delta(lm, vm)])
    table.notes = [
        f"published: {source}",
        MEASURED_TOP1 + ".",
        runs.target_note(),
        "delta = VRGD-LARS − LARS (percentage points).",
        MISSING + ".",
        *runs.notes(),
    ]
    return table


def vrgd_gap(study: Study, baseline: str | None = None) -> Table:
    pub, source = paper.reference("vrgd_imagenet_gap")
    runs = PaperRuns(study, "imagenet")
    methods = list(dict.fromkeys(pub["method"]))
    table = Table(
        "ImageNet ResNet-50 generalization gap by global batch",
        [
            "method",
            "batch",
            "train published",
            "train measured",
            "test published",
            "test measured",
            "gap published",
            "gap measured",
        ],
    )
    inconsistent = []
    for method in methods:
        mine = pub[pub["method"] == method].set_index("batch")
        for b in sorted(set(mine.index.astype(int)) | runs.batches([method])):
            p = mine.loc[b] if b in mine.index else {}
            gap = cell(p.get("gap", math.nan))
            difference = p.get("train_top1", math.nan) - p.get("test_top1", math.nan)
            if not gap.empty and abs(difference - gap.value) > ROUNDING_PP:  # the published row does not add up
                gap = replace(gap, note=f"≠ train − test = {difference:.2f}")
                inconsistent.append(
                    f"{display(method)} at {b:,}: train {p['train_top1']:.2f} − test "
                    f"{p['test_top1']:.2f} = {difference:.2f}, printed gap {gap.value:.2f}"
                )
            table.rows.append(
                [
                    display(method),
                    b,
                    cell(p.get("train_top1", math.nan)),
                    runs.measured(method, b, "train_eval_top1"),
                    cell(p.get("test_top1", math.nan)),
                    runs.measured(method, b, "val_top1"),
                    gap,
                    runs.measured(method, b, "gap_top1"),
                ]
            )
    table.notes = [
        f"published: {source}",
        *(
            f"The published row does not add up: {row}; one of its printed numbers is a typo (shown as printed)."
            for row in inconsistent
        ),
        "measured: train = Top-1 on the fixed train-eval subset (training images, validation transforms) "
        "and test = val Top-1, both at the last evaluation; gap = train − test (pp); mean ± sample std "
        "over seeds (n = runs). The paper does not say how its train accuracy was measured.",
        MISSING + ".",
        *runs.notes(),
    ]
    return table


def vrgd_cifar10(study: Study, baseline: str | None = None) -> Table:
    pub, source = paper.reference("vrgd_cifar10_resnet56")
    pub = pub.set_index("optimizer")
    runs = PaperRuns(study, "cifar10")
    batches = sorted({int(c) for c in pub.columns} | runs.batches(pub.index))
    columns = ["optimizer"] + [f"{b} {what}" for b in batches for what in ("published", "measured")]
    table = Table(
        f"CIFAR-10 ResNet-56 Top-1 (%) by global batch, 8 optimizers, judged at {paper.SETTINGS['cifar10'].target:g}%",
        columns,
    )
    for method in pub.index:
        row = [display(method)]
        for b in batches:
            row += [runs.published(pub.loc[method].get(str(b), math.nan)), runs.measured(method, b, judged=True)]
        table.rows.append(row)
    table.notes = [f"published: {source}", MEASURED_TOP1 + ".", runs.target_note(), MISSING + ".", *runs.notes()]
    return table


def mlperf_epochs(study: Study, baseline: str | None = None) -> Table:
    pub, source = paper.reference("mlperf_resnet50_rcp")
    pub = pub.set_index("batch")
    runs = PaperRuns(study, "imagenet")
    optimizers = ["lars"] + sorted(set(runs.groups["optimizer"]) - {"lars"})
    batches = sorted(set(pub.index.astype(int)) | set(runs.groups["global_batch"].astype(int)))
    table = Table(
        f"Epochs to {MLPERF_TARGET}% Top-1, ImageNet ResNet-50, against the MLPerf reference range",
        ["batch", "MLPerf epochs (min–max)"] + [f"{display(o)} measured" for o in optimizers],
    )
    for b in batches:
        lo, hi = (pub.loc[b, "epochs_min"], pub.loc[b, "epochs_max"]) if b in pub.index else (None, None)
        row = [b, f"{lo:g}–{hi:g}" if lo is not None else NO_NUMBER]
        for o in optimizers:
            g = runs.best.get((b, o))
            if g is None:
                row.append(Cell(None, kind="epochs"))
                continue
            mean, std = study.reach(g["runs"], MLPERF_TARGET)["epochs_to_target"]
            where = (
                ""
                if lo is None or math.isinf(mean)
                else ("below range" if mean < lo else "above range" if mean > hi else "in range")
            )
            row.append(Cell(mean, std, int(g["n"]), where, "epochs"))
        table.rows.append(row)
    table.notes = [
        f"published: {source}",
        f"measured = epoch of the first evaluation with val Top-1 ≥ {MLPERF_TARGET}% (whatever the "
        "recipe's own target), mean ± sample std over seeds (n = runs); ∞ = a seed never reached it; "
        "the resolution is the recipe's eval.every_epochs.",
        MISSING + ".",
        *runs.notes(),
    ]
    return table


def _ratio(b: float, a: float) -> float:
    """B / A for to-target means, with a miss as infinity (see SPEEDUP_DEFINITIONS)."""
    if any(isinstance(x, float) and math.isnan(x) for x in (a, b)):
        return math.nan
    if math.isinf(a):
        return math.nan if math.isinf(b) else 0.0  # only B reached it: shown as "not reached", never as 0.00
    return math.inf if math.isinf(b) else b / a


def speedups(study: Study, a: pd.Series, b: pd.Series) -> dict[str, float]:
    """Convergence speedup of group A over group B (same setting and batch): (a) and (b) of SPEEDUP_DEFINITIONS."""
    out = {f"speedup_{k}": _ratio(b[f"{k}_to_target"], a[f"{k}_to_target"]) for k in ("steps", "epochs", "seconds")}
    out["speedup_to_b_final"] = _ratio(b["steps"], steps_to_mean(study, a, b["val_top1"]))
    return out


def steps_to_mean(study: Study, group: pd.Series, threshold: float) -> float:
    """The first evaluation step at which the group's mean val Top-1 over seeds is >= threshold (inf: never)."""
    if threshold != threshold:
        return math.nan
    curve = study.mean_curve(group["runs"])
    reached = curve.loc[curve["val_top1"] >= threshold, "step"]
    return float(reached.iloc[0]) if len(reached) else (math.nan if group["unfinished"] else math.inf)


def default_baseline(optimizers) -> str:
    names = set(optimizers)
    return next((o for o in catalog.BASELINES if o in names), min(names) if names else catalog.BASELINES[0])


def fixed_batch_notes(rows: pd.DataFrame) -> list[str]:
    """What a SimiGrad optimizer run at a fixed batch is (rows: runs or groups with optimizer, adaptive_batch):
    its base optimizer's update, with the similarity only measured. Said where its numbers are printed."""
    adaptive = rows["optimizer"].map(lambda o: o in catalog.OPTIMIZERS and catalog.OPTIMIZERS[o].pace == "adaptive")
    fixed = rows.loc[adaptive & ~rows["adaptive_batch"].astype(bool), "optimizer"]
    return [
        f"{display(o)} without adaptive_batch is {display(catalog.OPTIMIZERS[o].base)} at a fixed batch: the same "
        "update, with the cosine similarity of the two half-batch gradients measured and logged (the batch "
        "controller is off)."
        for o in sorted(set(fixed))
    ]


def few_runs_note(study: Study, a: pd.Series, b: pd.Series) -> str:
    """'1 run each: no interval; grid 39 and 39 steps' where a side has one run: its speedup is one draw of the
    seeds' noise, read on the evaluation grid (the steps between the evaluation that saw the target and the one
    before); '' with two or more a side (their spread is the std beside each mean)."""
    if min(a["n"], b["n"]) > 1:
        return ""
    runs = " each" if a["n"] == b["n"] else f" and {b['n']}"
    grid = study.runs.set_index("run")["steps_to_target_grid"]
    grids = [grid.loc[list(g["runs"])].max() for g in (a, b)]
    said = " and ".join("—" if v != v else f"{v:,.0f}" for v in grids)
    return f"{a['n']} run{'s' * (a['n'] > 1)}{runs}: no interval; grid {said} steps"


def compare(study: Study, baseline: str | None = None, batch: int | None = None) -> Table:
    """Every recipe group (any optimizer) against the baseline optimizer's best recipe at the same global batch and
    setting; `batch`: only that global batch (an adaptive run's is its starting batch)."""
    groups = study.groups
    baseline = baseline or default_baseline(groups["optimizer"])
    best = best_groups(groups)
    if batch is not None:
        groups = groups[groups["global_batch"] == batch]
    settings = list(dict.fromkeys(groups["setting_label"]))
    several = len(settings) > 1
    keys = groups.drop_duplicates("setting_label").set_index("setting_label")["setting_keys"]
    names = variant_names({s: json.loads(keys[s]) for s in settings})  # the keys in which the settings differ
    columns = (["setting"] if several else []) + [
        "batch",
        "optimizer",
        "recipe",
        "val Top-1",
        "train-eval Top-1",
        "gap Top-1",
        "steps to target",
        "epochs to target",
        "train s to target",
        "reached",
        "speedup steps (a)",
        "speedup epochs (a)",
        "speedup seconds (a)",
        "speedup to B's final (b)",
    ]
    title = (
        "Optimizers compared at each global batch"
        if batch is None
        else f"Optimizers compared at global batch {batch:,}"
    ) + ("" if several else f": {settings[0]}")
    table = Table(title, columns)
    for _, g in groups.iterrows():
        base = best.get((g["setting"], g["global_batch"], baseline))
        if base is None:
            ratios = [Cell(None, note="no baseline", kind="ratio")] * 4
        elif base["group"] == g["group"]:
            ratios = [Cell(None, note="baseline B", kind="ratio")] * 4
        else:
            few = few_runs_note(study, g, base)  # said in full once, its first words in the other speedups
            ratios = [
                Cell(None, note="not reached", kind="ratio")
                if v == 0.0
                else Cell(v, kind="ratio", note=few if i == 0 else few.partition(";")[0])
                for i, v in enumerate(speedups(study, g, base).values())
            ]
        used = best.get((g["setting"], g["global_batch"], g["optimizer"]))
        marker = "" if used is None or used["group"] == g["group"] else " (not best)"
        table.rows.append(
            ([names[g["setting_label"]]] if several else [])
            + [
                int(g["global_batch"]),
                display(g["optimizer"]),
                g["recipe"] + marker,
                measured_cell(g, "val_top1"),
                *(
                    measured_cell(g, m, k, n=False, notes=False)
                    for m, k in (
                        ("train_eval_top1", "pct"),
                        ("gap_top1", "pct"),
                        ("steps_to_target", "steps"),
                        ("epochs_to_target", "epochs"),
                        ("seconds_to_target", "seconds"),
                    )
                ),
                f"{g['n_reached']}/{g['n']}",
                *ratios,
            ]
        )
    table.notes = ([f"setting {names[s]}: {s}" for s in settings] if several else []) + [
        f"baseline B = {display(baseline)} (change with --baseline); val/train-eval Top-1 (%) at the last "
        "evaluation, gap = train-eval − val (pp); mean ± sample std over seeds (n = runs).",
        "train s: wall-clock training seconds (evaluation excluded) on the machine that ran the run, which may have "
        "been shared (the committed studies ran on a shared 2-core CPU): not a speed claim; `bench perf` measures "
        "speed side by side.",
        *SPEEDUP_DEFINITIONS,
        "'(not best)': another recipe of this optimizer at this batch has a higher mean val Top-1 and is the one "
        "used as B and in the plots.",
        *fixed_batch_notes(groups),
    ]
    if groups["adaptive_batch"].any():
        table.notes.append(
            "Adaptive-batch recipes (adaptive_batch) are listed under their starting global batch and "
            "compared with the baseline there; their batch grows or shrinks, so compare them in epochs "
            "or images (`bench report` shows their mean and final batch), not in steps."
        )
    labels = " or ".join(f"'{s.label}'" for s in paper.SETTINGS.values())
    first_tables = "`, `".join(s.tables[0] for s in paper.SETTINGS.values() if s.tables)
    table.notes.append(
        f"A setting = the model, data, image size and target the recipes train; only settings named {labels} meet a "
        f"paper's criteria (`bench table {first_tables}`); anything else is not those datasets."
    )
    return table


TABLES = catalog.TABLES
SWEEP_TABLES = tuple(name for name, t in TABLES.items() if t.sweep)  # --baseline is an arm, checked by pairs.check_arm
# Which paper setting a table's measured cells need (regenerate() writes it only when such runs exist).
NEEDS = {name: t.needs for name, t in TABLES.items() if t.needs}


HAND_RUN = (
    "no runs made by bench sweep here (recipe tag role: trial or rerun), which `bench table {name}` reads; to get a "
    "paired verdict on runs made by hand, run each optimizer over the same seeds tagged as reruns (`bench run "
    "RECIPE --set seed=1 --set tags.role=rerun`, then seed=2, ...; the arm is the optimizer's name unless tags.arm "
    "says otherwise) and the verdict pairs them by seed; `bench table compare` sets these runs side by side now "
    "(mean ± std over seeds, unpaired)"
)


def baseline_for(name: str, baseline: str | None) -> str | None:
    """`baseline` where the table `name` reads one, else None (a command that writes every table passes it on)."""
    return baseline if TABLES[name].baseline else None


def build(
    name: str, study: Study, baseline: str | None = None, batch: int | None = None, swapped_in: Study | None = None
) -> Table:
    """The table `name`; `batch` (compare only): only the recipes of that global batch; `swapped_in` (scaling
    only): another sweep's cells in place of the study's own (scaling.swapped_scaling)."""
    if name not in TABLES:
        raise UserError(f"unknown table '{name}'; choose from {', '.join(TABLES)}")
    if baseline is not None and not TABLES[name].baseline:
        takers = ", ".join(n for n, t in TABLES.items() if t.baseline)
        raise UserError(f"--baseline is not an option of `bench table {name}`; the tables that take it: {takers}")
    if TABLES[name].sweep and study.runs["role"].isna().all():  # every run made by hand (bench run)
        raise UserError(HAND_RUN.format(name=name))
    if name == "compare":
        refuse_sweep(study.runs, "bench table compare")
    if baseline is not None and name not in SWEEP_TABLES and baseline not in set(study.groups["optimizer"]):
        raise UserError(
            f"--baseline '{baseline}': no run uses that optimizer; the runs use "
            f"{', '.join(sorted(set(study.groups['optimizer'])))}"
        )
    if swapped_in is not None:
        if name != "scaling":
            raise UserError(f"--cells is an option of `bench table scaling` only, not of '{name}'")
        return TABLES[name].load()(study, baseline, swapped_in)
    if batch is None:
        return TABLES[name].load()(study, baseline)
    if name != "compare":
        raise UserError(f"--batch is an option of `bench table compare` only, not of '{name}'")
    batches = sorted(set(study.groups["global_batch"].astype(int)))
    if batch not in batches:
        raise UserError(f"--batch {batch}: no run has that global batch; the runs have {', '.join(map(str, batches))}")
    return compare(study, baseline, batch)


MLPERF_EVAL_EPOCHS = 4  # MLPerf's ResNet-50 evaluates every 4 epochs: an RCP's epochs are read on that grid


def mlperf_scaling(study: Study | None = None, baseline: str | None = None) -> Table:
    """MLPerf's ResNet-50 reference convergence points (LARS, ImageNet, epochs to 75.9% at batches 1,632-67,840)
    through the scaling table's fit (bench/analysis/ladder.py): LARS's ImageNet critical batch with its interval
    and checks. Reads the published table only."""
    from bench.analysis import ladder

    pub, source = paper.reference("mlperf_resnet50_rcp")
    rows = []
    for _, r in pub.sort_values("batch").iterrows():
        per_epoch = paper.IMAGENET_TRAIN / r["batch"]
        steps = (r["epochs_min"] * per_epoch, r["epochs_max"] * per_epoch)
        rows.append(
            {
                "global_batch": int(r["batch"]),
                "near_tie": False,
                "runner_up_rerun_steps": (),
                "rerun_steps": steps,
                "rerun_ran": steps,
                "rerun_grid": (MLPERF_EVAL_EPOCHS * per_epoch,) * 2,
                "rerun_budget": math.inf,
            }
        )
    cells_of = pd.DataFrame(rows)
    f = ladder.fit_ladder(cells_of)
    check = ladder.checks(cells_of, f)
    table = Table(
        f"LARS's ImageNet critical batch from MLPerf's ResNet-50 reference convergence points ({MLPERF_TARGET}% Top-1)",
        [
            "batch",
            "MLPerf epochs (min–max)",
            "steps (mid-range)",
            "fitted steps",
            "images / linear",
            "critical batch [95%]",
            "critical batch without this batch",
            "batch-0 reference, 0.2 B_noise [95%]",
        ],
    )
    first = cells_of.iloc[0]
    for i, (_, c) in enumerate(cells_of.iterrows()):
        mid = sum(c["rerun_steps"]) / 2
        table.rows.append(
            [
                c["global_batch"],
                "{:g}–{:g}".format(*(s / (paper.IMAGENET_TRAIN / c["global_batch"]) for s in c["rerun_steps"])),
                Cell(mid, kind="steps"),
                Cell(check.fitted[i], kind="steps"),
                Cell(mid * c["global_batch"] / (sum(first["rerun_steps"]) / 2 * first["global_batch"]), kind="ratio"),
                ladder.interval_text(*f.critical) if i == 0 else NO_NUMBER,
                ladder.batch_text(check.left_out[c["global_batch"]]),
                ladder.interval_text(*f.critical_at_zero) if i == 0 else NO_NUMBER,
            ]
        )
    outside = check.outside(f)
    robust = (
        f"not robust (outside the interval: {', '.join(outside)})"
        if outside
        else "every batch left out in turn keeps it inside"
    )
    table.notes = [
        f"published: {source}",
        "Each batch's two ends of MLPerf's range (over reference runs) enter the fit as two points, in steps of the "
        f"batch on ImageNet's {paper.IMAGENET_TRAIN:,} training images, read on MLPerf's {MLPERF_EVAL_EPOCHS}-epoch "
        "evaluation grid (the crossing at the middle of the interval before it); the fit, interval and critical batch "
        "(20% above perfect linear scaling from the smallest batch) are `bench table scaling`'s. Every batch had its "
        "own tuned hyperparameters and epoch budget (the reference runs'), so this is a tuned ladder under a "
        "poly(2) decay over each run's budget, and its spread is MLPerf's range, not seeds of one recipe.",
        f"Claim: LARS on ImageNet (MLPerf ResNet-50 references): critical batch {ladder.interval_text(*f.critical)} "
        f"(95%; 20% above linear scaling from batch {f.base:,.0f}); {robust}; batch-0 reference (0.2 B_noise): "
        f"{ladder.interval_text(*f.critical_at_zero)}.",
    ]
    return table
