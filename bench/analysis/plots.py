"""`bench plot`: the figures of a large-batch study, PNG and SVG, matplotlib's Agg backend, in the suite's one style
(style.py: an arm's colour and marker, a one-line title with the details in <figure>.caption.txt beside it, misses in
a band inside the axes; `bench plot --paper` also writes each at one column's width, <figure>-paper.pdf and .svg).

Per setting (model, data, image size, target; see results.SETTING_KEYS), one
line per optimizer; where several recipes exist for one optimizer at one batch
the one with the highest mean final val Top-1 is drawn (results.best_groups).
Means over seeds with ± 1 sample std bands or error bars.

- curves:          val (solid) and train-eval (dashed) Top-1 against epochs, a panel per global batch
- top1_vs_batch:   final val Top-1 against global batch (published points where the runs are a paper's setting);
                   with one batch, the optimizers side by side (so do gap_vs_batch and steps_to_target)
- gap_vs_batch:    train-eval − val Top-1 against global batch
- steps_to_target: steps to the target against global batch, log-log, with the perfect-scaling line
- gsnr, diagnostics: per-step optimizer statistics from events.jsonl, when runs logged them
- batch_scaling:   per-step AdaScale gain, SimiGrad similarity, global batch (only when it changed during a
                   run) and gradient noise scale B_simple, a panel for each that some run logged
Per-step figures: one line per drawn recipe group, x = epochs (images seen / training-set size, the images
summed from each step's `batch`; AdaScale's x is the epoch of its schedule, Σ gain × base batch, so runs of
one budget end together), y labelled with its unit (log where the values span 10x), smoothed by averaging in at most BINS equal slices of the x axis, over the
group's seeds together; the noise scale of a slice is the ratio of its sums, Σ noise_trace / Σ grad_sqnorm
(as a run's B_simple, results.py), where the runs logged those, in slices of at least RATIO_STEPS steps.

Across models (steps_to_target_by_model): for data, image size and target that several model shapes
(timm name + kwargs) were trained on, e.g. a width-vs-depth study, steps to the target against global
batch, one line per model (and optimizer, when there are several).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from bench import catalog  # noqa: E402
from bench.analysis import paper  # noqa: E402
from bench.analysis.paper import MLPERF_TARGET, display  # noqa: E402
from bench.analysis.results import (  # noqa: E402
    Study,
    after_warmup,
    best_groups,
    file_stem,
    images_before,
    numbers,
    refuse_sweep,
    step_batches,
    variant_names,
)
from bench.analysis.style import (  # noqa: E402
    MARKERS,
    WIDTH,
    arm_axis,
    batch_label,
    binomial_floor,
    caption,
    color,
    columns,
    draw,
    in_paper,
    legend_below,
    log2_batch_axis,
    look,
    miss_band,
    plain_log_y,
    readable_top,
    save,
    shift,
    size,
    x_axis,
)

COLORS = catalog.COLORS
# key -> (panel title, y-axis label with the unit, what the caption says of it)
DIAGNOSTICS = {
    "gsnr_clip_frac": ("GSNR factors clipped at γ", "fraction of live coordinates", ""),
    "gsnr_dead_frac": ("dead coordinates", "fraction of coordinates", "dead coordinates: 0 in every group"),
    "gsnr_r_mean": ("mean GSNR r (raw)", "r = mean² / var (ratio)", ""),
    "trust": ("trust ratio", "lr multiplier", "trust ratio: LARS's and LAMB's per-layer lr multiplier"),
    "gain": ("AdaScale gain", "lr multiplier (1 to S)", ""),
    "noise_scale": ("noise scale B_simple", "images", ""),
    "similarity": ("half-batch cosine similarity", "cosine", ""),
    "batch": ("global batch size", "images", ""),
    "grad_sqnorm": (
        "|G|² (estimate, can be < 0)",
        "(∂loss/∂w)²",
        "|G|²: an unbiased estimate of the true gradient's squared norm, which can be below 0 (the line at 0)",
    ),
    "grad_var": ("E|g_d − G|², group noise", "(∂loss/∂w)²", "E|g_d − G|²: one gradient group's noise"),
    "noise_trace": ("tr(Σ), per-image noise", "(∂loss/∂w)² × images", ""),
}
NOT_DIAGNOSTICS = ("step", "lr", "loss", "epoch", "run", "after_warmup")
# The statistics adaptive-batch methods act on, drawn in their own figure (batch_scaling).
BATCH_SCALING = ("gain", "similarity", "batch", "noise_scale")
BINS = 200
EPOCH_AXIS = "x: epochs, the images seen / the training-set size"
ADASCALE_EPOCHS = "; AdaScale's x is the epochs of its schedule (images × gain / S), so runs of one budget end together"
# The noise scale's slices hold at least this many steps (fewer slices for short runs, but at least 5): a ratio
# of sums over a handful of steps spikes wherever their summed |G|^2 happens to be near 0.
RATIO_STEPS = 20


def series(study: Study, setting: str) -> tuple[pd.DataFrame, list[str]]:
    """The groups drawn for one setting (best recipe per batch and optimizer) and the optimizers' order."""
    chosen = [g for (s, _, _), g in best_groups(study.groups).items() if s == setting]
    groups = pd.DataFrame(chosen).sort_values(["optimizer", "global_batch"], ignore_index=True)
    order = sorted(set(groups["optimizer"]), key=lambda o: (o not in catalog.BASELINES, o))
    return groups, order


BEST_RECIPE = "of the recipe with the highest mean final val Top-1 for each optimizer at that batch"


def plot_curves(
    study: Study, groups: pd.DataFrame, order: list[str], title: str, which: str = BEST_RECIPE, target: bool = True
) -> plt.Figure:
    """Val (solid) and train-eval (dashed) Top-1 against epochs, a panel per global batch, a line per group (its
    `optimizer`, one of `order`, colours it; its `runs` are its seeds); `title`: the setting, and `which`: the
    groups drawn, for the caption; `target`: draw the recipes' target (not where the question is the final Top-1)."""
    batches = sorted(set(groups["global_batch"]))
    ncols = columns(len(batches), 4)
    nrows = math.ceil(len(batches) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=size(True, 1.9 * nrows + 0.9), sharey=True, squeeze=False, layout="constrained"
    )
    target_top1 = groups["target_top1"].iloc[0]
    any_diverged = final_only = False
    for ax, b in zip(axes.flat, batches):
        for _, g in groups[groups["global_batch"] == b].iterrows():
            c = color(g["optimizer"], order)
            m = study.mean_curve(g["runs"])
            for column, linestyle in (("val_top1", "-"), ("train_eval_top1", "--")):
                m_ok = m[m[column].notna()]  # runs that measure train-eval only at the end: one point, no line
                std = m_ok[f"{column}_std"].fillna(0)
                if len(m_ok) == 1:  # a band over one point draws nothing: a dot with its ± 1 std bar
                    final_only |= column == "train_eval_top1"
                    ax.errorbar(m_ok["epoch"], m_ok[column], yerr=std, fmt="o", color=c, markersize=4, capsize=2)
                    continue
                ax.plot(m_ok["epoch"], m_ok[column], linestyle, color=c)
                ax.fill_between(m_ok["epoch"], m_ok[column] - std, m_ok[column] + std, color=c, alpha=0.15, linewidth=0)
            diverged = study.runs[study.runs["run"].isin(g["runs"]) & study.runs["diverged"]]
            for run in diverged["run"]:
                last = study.curves_of([run]).tail(1)
                ax.plot(last["epoch"], last["val_top1"], "x", color=c, markersize=6, markeredgewidth=1.5)
                any_diverged |= bool(len(last))
        if target:
            ax.axhline(target_top1, color="0.4", linestyle=":", linewidth=1)
        ax.set_title(f"global batch {batch_label(b)}", fontsize="medium")
    for ax in axes.flat[len(batches) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("Top-1 (%)")
    for ax in axes.flat[: len(batches)]:
        ax.set_xlabel("epoch")
        ax.tick_params(labelbottom=True)
    present = [o for o in order if o in set(groups["optimizer"])]
    handles = [Line2D([], [], color=color(o, order), label=display(o)) for o in present]
    handles += [
        Line2D([], [], color="k", label="val"),
        Line2D([], [], color="k", linestyle="--", marker="o" if final_only else None, markersize=4, label="train-eval"),
    ]
    if target:
        handles.append(Line2D([], [], color="0.4", linestyle=":", label=f"target {target_top1:g}%"))
    if any_diverged:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label="diverged (run's last eval)"))
    fig.suptitle("Top-1 during training")
    caption(
        fig,
        f"Top-1 during training: {title}. Val Top-1 (solid) and train-eval Top-1 (dashed) against epochs, a panel per "
        f"global batch, the mean over seeds with a ± 1 sample std band, {which}"
        + ("; a dot with a ± 1 std bar: train-eval measured at the last evaluation only" if final_only else "")
        + ("; dotted: the target." if target else ".")
        + (" x: a diverged run's last evaluation." if any_diverged else ""),
    )
    legend_below(fig, handles, ncol=6)
    return fig


PUBLISHED = {
    ("val_top1", "imagenet"): ("vrgd_imagenet_top1", None),
    ("val_top1", "cifar10"): ("vrgd_cifar10_resnet56", None),
    ("gap_top1", "imagenet"): ("vrgd_imagenet_gap", "gap"),
}


def published_points(metric: str, setting: str, optimizer: str) -> list[tuple[int, float]]:
    """(batch, value) a paper reports for `metric` of the method measured as `optimizer` in its setting."""
    if (metric, setting) not in PUBLISHED:
        return []
    stem, column = PUBLISHED[(metric, setting)]
    table, _ = paper.reference(stem)
    key = table.columns[0]
    methods = [m for m, names in paper.MEASURED_AS.items() if optimizer in names and m in set(table[key])]
    if not methods:
        return []
    if column:  # long format: method, batch, ..., column
        mine = table[table[key] == methods[0]]
        return list(zip(mine["batch"].astype(int), mine[column].astype(float)))
    row = table.set_index(key).loc[methods[0]]
    return [(int(b), float(v)) for b, v in row.items() if v == v]


MISSED = "did not reach the target"


TITLES = {"val_top1": "Final val Top-1", "gap_top1": "Generalization gap"}


def x_positions(rows: pd.DataFrame, i: int, n: int, single: bool) -> np.ndarray:
    """Where the i-th of n optimizers' rows are drawn: at their batch (shifted, so equal values do not hide each
    other), or, in a figure of one batch, side by side at i."""
    if single:
        return np.full(len(rows), float(i))
    return rows["global_batch"].to_numpy(float) * shift(i, n)


def plot_vs_batch(
    groups: pd.DataFrame, order: list[str], metric: str, ylabel: str, title: str, paper_setting: str = ""
) -> plt.Figure:
    """A final metric against global batch (one batch: the optimizers side by side): measured means ± std,
    published points in the paper's setting; diverged in a band below. `title`: the setting, for the caption."""
    fig, ax = plt.subplots(figsize=size(False, 2.8), layout="constrained")
    present = [o for o in order if o in set(groups["optimizer"])]
    batches = sorted(set(groups["global_batch"]))
    single = len(batches) == 1
    handles, axis_batches, diverged_rows = [], list(batches), []
    published = {
        o: [(b, v) for b, v in published_points(metric, paper_setting, o) if not single or b == batches[0]]
        for o in present
    }
    measured = " (measured)" if any(published.values()) else ""  # only where something is not measured
    for i, o in enumerate(present):
        g = groups[groups["optimizer"] == o].sort_values("global_batch")
        arm = look(o, order)
        ok = g[g[metric].notna()]
        xs = x_positions(ok, i, len(present), single)
        ax.errorbar(
            xs, ok[metric], yerr=ok[f"{metric}_std"].where(ok["n"] > 1), capsize=2, label=display(o) + measured, **arm
        )
        if groups["n"].nunique() > 1:  # a lone seed must not read as a mean: each point says its n
            for x, y, n in zip(xs, ok[metric], ok["n"]):
                ax.annotate(
                    f"n={n:g}",
                    (x, y),
                    xytext=(3, 3),
                    textcoords="offset points",
                    fontsize=5.5,
                    color=arm["color"],
                    gid="n-label",
                )
        diverged = g[(g["n_diverged"] == g["n"]) & (g["n"] > 0)]
        diverged_rows.append((x_positions(diverged, i, len(present), single), arm["color"]))
        handles.append(Line2D([], [], label=f"{display(o)}{measured}", **arm))
        if published[o]:
            handles.append(_published(ax, [(i if single else b, v) for b, v in published[o]], o, arm["color"]))
            axis_batches += [b for b, _ in published[o]]
    any_diverged = any(len(xs) for xs, _ in diverged_rows)
    if any_diverged:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label="all seeds diverged"))
    if single:
        arm_axis(ax, present, {o: display(o) for o in present}, batches[0])
    else:
        log2_batch_axis(ax, axis_batches)
    ax.set_ylabel(ylabel)
    what = TITLES.get(metric, ylabel)
    ax.set_title(f"{what} at batch {batch_label(batches[0])}" if single else f"{what} against batch size")
    if groups["n"].nunique() == 1:  # the same n everywhere: said once
        n = groups["n"].iloc[0]
        said = f"n = {n:g} seed{'s' if n != 1 else ''} a point" + (
            " (bars: ± sample std)" if n > 1 else ": no spread to show"
        )
        ax.text(0.99, 0.99, said, transform=ax.transAxes, ha="right", va="top", fontsize=6, gid="n-label")
    scored = groups[groups[metric].notna()]
    sizes = {"val_top1": "val_images", "train_eval_top1": "train_eval_images"}.get(metric)
    floored = sizes in scored and binomial_floor(ax, scored[metric], scored[sizes])
    miss_band(ax, diverged_rows, top=False)
    caption(
        fig,
        f"{what} ({ylabel}): {title}. {spread_text(groups['n'])} of the recipe with the highest mean final "
        "val Top-1 for each optimizer at each batch"
        + (", the optimizers side by side" if single else ", optimizers slightly apart along x so equal points show")
        + "."
        + (" Open diamonds: the values the paper reports." if any(published.values()) else "")
        + (" x in the band below: every seed diverged (no final value)." if any_diverged else "")
        + (
            " The y axis spans at least 2 binomial standard errors either side of each point (of the images it was "
            "scored on), so that a difference of a few images does not fill it."
            if floored
            else ""
        ),
    )
    legend_below(fig, handles, ncol=2)
    return fig


def _published(ax, points: list[tuple[float, float]], optimizer: str, c) -> Line2D:
    """A paper's published values (x, value) as open diamonds in the optimizer's colour; returns the legend handle."""
    label = f"{display(optimizer)} (published)"
    style_of = {"linestyle": "", "marker": "D", "markerfacecolor": "none", "color": c}
    ax.plot(*zip(*points), markersize=5, label=label, **style_of)
    return Line2D([], [], label=label, **style_of)


def spread_text(n: pd.Series) -> str:
    """What a figure's points and bars are, as their seeds allow: a mean ± 1 sample std needs two runs a point."""
    if (n <= 1).all():
        return "One run a point (no bars: one run has no spread to show)"
    if (n > 1).all():
        return "The mean over seeds ± 1 sample std"
    return "The mean over seeds (± 1 sample std where a point has two runs or more; n beside each point)"


def perfect_scaling(ax, finite: pd.DataFrame, metric: str, last_batch: float) -> list[Line2D]:
    """The perfect-scaling line (steps ∝ 1/batch) through the fewest `metric` steps at the smallest batch of
    `finite` (rows that reached the target), drawn up to `last_batch`, its legend handle naming the point it starts
    from (none without data, or with one batch: nothing to scale to)."""
    if not len(finite) or finite["global_batch"].min() >= last_batch:
        return []
    b0 = finite["global_batch"].min()
    first = finite[finite["global_batch"] == b0].sort_values(metric).iloc[0]
    s0 = first[metric]
    whose = display(first["optimizer"]) if "optimizer" in first else first.get("line", "")
    label = f"perfect scaling (∝ 1/batch) from {whose} at {batch_label(b0)}"
    xs = np.array([b0, last_batch], dtype=float)
    ax.plot(xs, s0 * b0 / xs, "--", color="0.5", linewidth=1, label=label, gid="perfect-scaling")
    return [Line2D([], [], color="0.5", linestyle="--", label=label)]


def no_run_reached(ax, target: float) -> None:
    """A steps-to-target panel where no run reached the target: says so where the points would be, with no
    y scale to read (an empty log axis reads as a drawing error); the misses stay marked in the band above."""
    ax.set_yticks([])
    ax.text(
        0.5,
        0.5,
        f"no run reached {target:g}% val Top-1",
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=8,
        gid="no-run-reached",
    )


def steps_line(ax, rows: pd.DataFrame, arm: dict, xs: np.ndarray, label: str) -> tuple[Line2D, np.ndarray]:
    """One line of steps to the target against the batch (at xs) and its error bars; returns its legend handle and
    the xs where runs missed the target (inf; NaN: not there yet), for the band of misses."""
    order = np.argsort(rows["global_batch"].to_numpy())
    rows, xs = rows.iloc[order], np.asarray(xs)[order]
    finite = np.isfinite(rows["steps_to_target"]).to_numpy()
    ok = rows[finite]
    yerr = ok["steps_to_target_std"].fillna(0)
    ax.errorbar(xs[finite], ok["steps_to_target"], yerr=yerr, capsize=2, label=label, **arm)
    return Line2D([], [], label=label, **arm), xs[np.isinf(rows["steps_to_target"]).to_numpy()]


def plot_steps_to_target(groups: pd.DataFrame, order: list[str], title: str, paper_setting: str) -> plt.Figure:
    """Steps to the target against global batch, log-log (one batch: the optimizers side by side), the perfect-scaling
    line, misses in a band above; `title`: the setting, for the caption."""
    fig, ax = plt.subplots(figsize=size(False, 2.8), layout="constrained")
    handles, missed = [], []
    present = [o for o in order if o in set(groups["optimizer"])]
    batches = sorted(set(groups["global_batch"]))
    single = len(batches) == 1
    finite = groups[np.isfinite(groups["steps_to_target"])]
    for i, o in enumerate(present):
        g = groups[groups["optimizer"] == o]
        arm = look(o, order)
        handle, misses = steps_line(ax, g, arm, x_positions(g, i, len(present), single), display(o))
        handles.append(handle)
        missed.append((misses, arm["color"]))
    if not single:
        handles += perfect_scaling(ax, finite, "steps_to_target", max(batches))
    target = groups["target_top1"].iloc[0]
    mlperf = paper_setting == "imagenet" and target == MLPERF_TARGET and not single
    if mlperf:
        ref, _ = paper.reference("mlperf_resnet50_rcp")
        mid = (ref["epochs_min"] + ref["epochs_max"]) / 2 * paper.IMAGENET_TRAIN / ref["batch"]
        half = (ref["epochs_max"] - ref["epochs_min"]) / 2 * paper.IMAGENET_TRAIN / ref["batch"]
        label = "MLPerf LARS reference (range)"
        ax.errorbar(
            ref["batch"],
            mid,
            yerr=half,
            linestyle="",
            marker="D",
            markerfacecolor="none",
            color="0.3",
            capsize=2,
            label=label,
        )
        handles.append(Line2D([], [], linestyle="", marker="D", markerfacecolor="none", color="0.3", label=label))
        batches = sorted({*batches, ref["batch"]})
    if len(finite):
        plain_log_y(ax)
        readable_top(ax, finite["steps_to_target"] + finite["steps_to_target_std"].fillna(0))
    else:
        no_run_reached(ax, target)
    x_axis(ax, batches, present, {o: display(o) for o in present})  # ticks at the measured batches only
    any_missed = any(len(xs) for xs, _ in missed)
    if any_missed:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=MISSED))
    ax.set_ylabel(f"steps to {target:g}% val Top-1")
    ax.set_title(f"Steps to target at batch {batch_label(batches[0])}" if single else "Steps to target against batch")
    miss_band(ax, missed, top=True)
    caption(
        fig,
        f"Steps to {target:g}% val Top-1: {title}. {spread_text(groups['n'])} of the recipe with the highest "
        "mean final val Top-1 for each optimizer at each batch"
        + (
            "."
            if single
            else ", log-log; dashed: perfect scaling (steps ∝ 1/batch) from the fewest steps at the smallest batch."
        )
        + (" Open diamond: MLPerf's LARS reference range." if mlperf else "")
        + (f" x in the band above: {MISSED} (some seed never reached it)." if any_missed else ""),
    )
    legend_below(fig, handles, ncol=2)
    return fig


def slices(x: pd.Series, bins: int = BINS) -> np.ndarray:
    """The index of each value's slice among `bins` equal slices of [min, max] (each value its own when few)."""
    if len(x) <= bins:
        return pd.factorize(x, sort=True)[0]
    edges = np.linspace(x.min(), x.max(), bins + 1)
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)


def binned(events: pd.DataFrame, key: str, bins: int = BINS) -> pd.DataFrame:
    """Mean of `key` in at most `bins` equal slices of the epoch axis (smooths per-step noise)."""
    e = pd.DataFrame({"epoch": events["epoch"], key: numbers(events, key)}).dropna()
    if e.empty:
        return e
    return (
        e.groupby(slices(e["epoch"], bins))
        .agg(epoch=("epoch", "mean"), value=(key, "mean"))
        .rename(columns={"value": key})
        .reset_index(drop=True)
    )


def binned_ratio(events: pd.DataFrame, key: str, numerator: str, denominator: str, bins: int = BINS) -> pd.DataFrame:
    """Σ numerator / Σ denominator in at most `bins` equal slices of the epoch axis, over the steps that logged
    both (NaN where a slice's summed denominator is not positive)."""
    e = pd.DataFrame(
        {"epoch": events["epoch"], "num": numbers(events, numerator), "den": numbers(events, denominator)}
    ).dropna()
    if e.empty:
        return pd.DataFrame(columns=["epoch", key], dtype=float)
    sums = e.groupby(slices(e["epoch"], bins)).agg(epoch=("epoch", "mean"), num=("num", "sum"), den=("den", "sum"))
    ratio = (sums["num"] / sums["den"]).where(sums["den"] > 0)
    return pd.DataFrame({"epoch": sums["epoch"], key: ratio}).reset_index(drop=True)


def line(events: pd.DataFrame, key: str) -> pd.DataFrame:
    """The smoothed curve of `key` (columns epoch, key): the noise scale as a ratio of sums in slices of at least
    RATIO_STEPS steps where its parts were logged, anything else binned()."""
    if key == "noise_scale" and {"noise_trace", "grad_sqnorm"} <= set(events.columns):
        if "after_warmup" in events:  # results.after_warmup: the report's B_simple counts the same steps
            events = events[events["after_warmup"]]
        n = int((numbers(events, "noise_trace").notna() & numbers(events, "grad_sqnorm").notna()).sum())
        ratio = binned_ratio(events, key, "noise_trace", "grad_sqnorm", max(min(BINS, n // RATIO_STEPS), min(n, 5)))
        if ratio[key].notna().any():
            return ratio
    return binned(events, key)


def logs(events: pd.DataFrame, key: str) -> bool:
    """Whether some step in `events` has a number for `key` (for noise_scale: or for both of its parts)."""
    if key == "noise_scale" and all(logs(events, k) for k in ("noise_trace", "grad_sqnorm")):
        return True
    return key in events and numbers(events, key).notna().any()


def run_events(study: Study, group: pd.Series) -> pd.DataFrame:
    """The events of a group's runs with an epoch column: images seen after the step (results.images_before and
    the step's `batch`, the plan's global_batch where not logged) / training-set size; for AdaScale (a `gain`
    logged) the epochs of its schedule (engine/pace.py), Σ gain × base batch / training-set size with the base
    batch one gradient group (global batch / gsnr_groups = S), so every run of one budget spans the same x axis."""
    frames = []
    train_size = group["train_size"] or math.nan
    plan = study.runs.set_index("run")
    for run in group["runs"]:
        e = study.record(run).events
        if e.empty or "step" not in e:
            continue
        e = e.drop_duplicates("step", keep="last").sort_values("step", ignore_index=True)
        plan_batch = plan.loc[run, "plan_batch"]
        before = images_before(e, plan_batch)  # the images before each logged step
        images = before + step_batches(e, plan_batch)
        if "gain" in e:  # AdaScale (every step logged): each step advances its schedule by gain x the base batch
            per_step = numbers(e, "gain").fillna(1.0) * plan_batch / plan.loc[run, "plan_groups"]
            images = per_step.cumsum()
            before = images - per_step
        warmup = 0.0 if pd.isna(plan.loc[run, "warmup_epochs"]) else float(plan.loc[run, "warmup_epochs"])
        frames.append(
            e.assign(epoch=images / train_size, run=run, after_warmup=after_warmup(before, warmup * train_size))
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def panels(keys: list[str]) -> list[tuple[str, list[str]]]:
    """Diagnostic keys to panels: a family `<x>_min`, `<x>_median`, `<x>_max` shares one panel (median, min-max band)."""
    out, done = [], set()
    for key in keys:
        stem = key.rsplit("_", 1)[0]
        family = [f"{stem}_{s}" for s in ("median", "min", "max")]
        if key.rsplit("_", 1)[-1] in ("min", "median", "max") and all(k in keys for k in family):
            if stem not in done:
                out.append((stem, family))
                done.add(stem)
        else:
            out.append((key, [key]))
    return out


def plot_diagnostics(
    events: dict, keys: list[str], groups: pd.DataFrame, order: list[str], title: str, setting: str = ""
) -> plt.Figure:
    """One panel per statistic some group logged (none drawn empty), binned along epochs, its y axis labelled
    with its unit and logarithmic where the values span 10x or more: lines coloured by batch and styled by
    optimizer, or coloured by optimizer when only one batch logged these statistics."""
    shown = [
        (name, family) for name, family in panels(keys) if any(all(logs(e, k) for k in family) for e in events.values())
    ]
    ncols = columns(len(shown), 3)
    nrows = math.ceil(len(shown) / ncols)
    width, height = size(True, 2.2 * nrows + 0.8)
    width = width if ncols == 3 or in_paper() else WIDTH * ncols / 3 + 1
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained")
    logged = groups[[any(logs(events.get(g, pd.DataFrame()), k) for k in keys) for g in groups["group"]]]
    batches = sorted(set(logged["global_batch"]))
    present = [o for o in order if o in set(logged["optimizer"])]
    if len(batches) == 1:

        def style_of(g):
            return color(g["optimizer"], order), "-"

        handles = [Line2D([], [], color=color(o, order), label=display(o)) for o in present]
        title += f" (global batch {batch_label(batches[0])})"
    else:
        cmap = plt.get_cmap("viridis")
        shade = {b: cmap(i / max(1, len(batches) - 1) * 0.9) for i, b in enumerate(batches)}
        styles = dict(zip(present, ["-", "--", ":", "-."] * 4))

        def style_of(g):
            return shade[g["global_batch"]], styles[g["optimizer"]]

        handles = [Line2D([], [], color=shade[b], label=f"batch {batch_label(b)}") for b in batches]
        if len(present) > 1:
            handles += [Line2D([], [], color="k", linestyle=styles[o], label=display(o)) for o in present]
        else:
            title += f" ({', '.join(map(display, present))})"
    band = len(logged) <= 3  # more min-max bands than that only blur each other
    details = []
    for ax, (name, family) in zip(axes.flat, shown):
        values = []
        for _, g in logged.iterrows():
            e = events[g["group"]]
            if not all(logs(e, k) for k in family):
                continue
            c, linestyle = style_of(g)
            curve = line(e, family[0])
            ax.plot(curve["epoch"], curve[family[0]], linestyle, color=c, linewidth=1.1)
            values.append(curve[family[0]].dropna())
            if len(family) == 3 and band:
                lo, hi = binned(e, family[1]), binned(e, family[2])
                ax.fill_between(lo["epoch"], lo[family[1]], hi[family[2]], color=c, alpha=0.15, linewidth=0)
                values += [lo[family[1]], hi[family[2]]]
        v = pd.concat(values) if values else pd.Series(dtype=float)
        if len(v) and (v > 0).all() and v.max() / v.min() >= 10:
            plain_log_y(ax)
        if len(v) and (v < 0).any():  # an unbiased estimate of a non-negative quantity dips below 0: show where 0 is
            ax.axhline(0, color="0.3", linewidth=0.8, gid="zero-line")
        what, unit, detail = DIAGNOSTICS.get(name, (name, "as logged", ""))
        ax.set_title(what, fontsize="medium")
        ax.set_ylabel(unit)
        details.append(
            f"{what}: " + ("median over the layers, min-max band" if band else "median over the layers")
            if len(family) == 3
            else ""
        )
        details.append(detail)
    for ax in axes.flat[len(shown) :]:
        ax.set_visible(False)
    for ax in axes.flat[: len(shown)]:
        ax.set_xlabel("epoch")  # on the axes, so the legend below cannot cover it
    fig.suptitle(title, fontsize="medium")
    adascale = any(logs(e, "gain") for e in events.values())
    caption(
        fig,
        f"{title}: {setting}. Per-step statistics from events.jsonl, averaged in at most {BINS} equal slices of the "
        f"x axis over each drawn group's seeds; {EPOCH_AXIS}{ADASCALE_EPOCHS if adascale else ''}. "
        + (
            "Lines coloured by optimizer."
            if len(batches) == 1
            else "Lines coloured by batch" + (", styled by optimizer." if len(present) > 1 else ".")
        )
        + " A y axis is logarithmic where its values span 10x or more."
        + "".join(f" {d}." for d in dict.fromkeys(details) if d),
    )
    legend_below(fig, handles, ncol=2 * ncols + 1)
    return fig


def plot_setting(study: Study, setting: str, out: Path, prefix: str = "") -> list[Path]:
    groups, order = series(study, setting)
    label = groups["setting_label"].iloc[0]
    which = groups["paper"].iloc[0]
    written = save(plot_curves(study, groups, order, label), out, f"{prefix}curves")
    written += save(
        plot_vs_batch(groups, order, "val_top1", "final val Top-1 (%)", label, which), out, f"{prefix}top1_vs_batch"
    )
    written += save(
        plot_vs_batch(groups, order, "gap_top1", "train-eval − val Top-1 (pp)", label, which),
        out,
        f"{prefix}gap_vs_batch",
    )
    written += save(plot_steps_to_target(groups, order, label, which), out, f"{prefix}steps_to_target")
    events = {g["group"]: run_events(study, g) for _, g in groups.iterrows()}
    keys = sorted(
        {
            k
            for e in events.values()
            for k in e.columns
            if k not in NOT_DIAGNOSTICS and pd.api.types.is_numeric_dtype(e[k])
        }
    )
    gsnr = [k for k in keys if k.startswith("gsnr_")]
    if {"noise_trace", "grad_sqnorm"} <= set(keys) and "noise_scale" not in keys:
        keys.append("noise_scale")  # B_simple from its parts, even where each step's ratio was null
    scaling = [k for k in BATCH_SCALING if k in keys and (k != "batch" or groups["batch_varies"].any())]
    other = [k for k in keys if k not in gsnr and k not in BATCH_SCALING]
    if gsnr:
        written += save(
            plot_diagnostics(events, gsnr, groups, order, "GSNR statistics over training", label), out, f"{prefix}gsnr"
        )
    if other:
        written += save(
            plot_diagnostics(events, other, groups, order, "Optimizer statistics over training", label),
            out,
            f"{prefix}diagnostics",
        )
    if scaling:
        written += save(
            plot_diagnostics(events, scaling, groups, order, "Batch-scaling statistics over training", label),
            out,
            f"{prefix}batch_scaling",
        )
    return written


BATCH_OR_SEED = re.compile(r"^(b?\d+k?|s\d+|s?\*)$")


def name_prefix(recipes) -> str:
    """The leading name tokens (split at - _ .) that a model's recipes share, without batch or seed tokens
    ('wide-b128', 'wide-b2000' -> 'wide')."""
    split = [re.split(r"[-_.]", r.split(" [")[0]) for r in recipes]
    common = []
    for tokens in zip(*split):
        if len(set(tokens)) > 1:
            break
        common.append(tokens[0])
    return "-".join(t for t in common if not BATCH_OR_SEED.match(t))


def by_model(study: Study) -> dict[str, pd.DataFrame]:
    """problem (data, image size, target: the setting but for the model) -> the steps to target of every model
    trained on it, when there are several: one row per (model, optimizer, global batch), the group drawn for it
    (best_groups), with columns line (the legend label), model_shape, optimizer, global_batch, recipe,
    steps_to_target (mean over seeds; inf: a seed missed the target; NaN: unfinished), steps_to_target_std, n,
    n_reached, problem_label."""
    chosen = pd.DataFrame(list(best_groups(study.groups).values()))
    out = {}
    for problem, members in chosen.groupby("problem", sort=False):
        if members["model_key"].nunique() < 2:
            continue
        several = members["optimizer"].nunique() > 1
        rows = []
        for (model, optimizer), line_groups in members.groupby(["model_key", "optimizer"], sort=False):
            first = line_groups.iloc[0]
            prefix = name_prefix(line_groups["recipe"])
            label = (
                (f"{prefix}: " if prefix else "")
                + first["model_shape"]
                + (f", {display(optimizer)}" if several else "")
            )
            for _, g in line_groups.sort_values("global_batch").iterrows():
                rows.append(
                    {
                        "line": label,
                        "model_shape": first["model_shape"],
                        "optimizer": optimizer,
                        "global_batch": int(g["global_batch"]),
                        "recipe": g["recipe"],
                        "steps_to_target": g["steps_to_target"],
                        "steps_to_target_std": g["steps_to_target_std"],
                        "n": g["n"],
                        "n_reached": g["n_reached"],
                        "target_top1": g["target_top1"],
                        "problem_label": g["problem_label"],
                    }
                )
        out[problem] = pd.DataFrame(rows).sort_values(["line", "global_batch"], ignore_index=True)
    return out


def plot_by_model(data: pd.DataFrame) -> plt.Figure:
    """Steps to target (log) against global batch (log2), a line per model; 'x' in the band above: target missed."""
    fig, ax = plt.subplots(figsize=size(False, 3.0), layout="constrained")
    lines = list(dict.fromkeys(data["line"]))
    palette = plt.get_cmap("tab10")
    handles, missed = [], []
    for i, name in enumerate(lines):
        d = data[data["line"] == name]
        arm = {"color": palette(i % 10), "marker": MARKERS[i % len(MARKERS)]}
        handle, misses = steps_line(ax, d, arm, d["global_batch"].to_numpy(float) * shift(i, len(lines)), name)
        handles.append(handle)
        missed.append((misses, arm["color"]))
    if np.isfinite(data["steps_to_target"]).any():
        plain_log_y(ax)
    else:
        no_run_reached(ax, data["target_top1"].iloc[0])
    log2_batch_axis(ax, data["global_batch"])
    any_missed = any(len(xs) for xs, _ in missed)
    if any_missed:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=MISSED))
    target = data["target_top1"].iloc[0]
    ax.set_ylabel(f"steps to {target:g}% val Top-1")
    ax.set_title("Steps to target by model")
    miss_band(ax, missed, top=True)
    caption(
        fig,
        f"Steps to {target:g}% val Top-1 by model: {data['problem_label'].iloc[0]}. A line per model shape (and "
        "optimizer, where several), the mean over seeds ± 1 sample std of its best recipe at each batch, log-log"
        + (f"; x in the band above: {MISSED}." if any_missed else "."),
    )
    legend_below(fig, handles, ncol=2)
    return fig


def prefixes(study: Study) -> dict[str, str]:
    """setting -> the prefix of its figures' file names: none for a single setting; else a paper's setting by the
    paper ('imagenet-'), the others by the keys in which they differ ('channels=20,40,80,160_layers=4,4,4,4-';
    results.variant_names), the hash only where that leaves two names equal."""
    first = study.groups.drop_duplicates("setting")
    if len(first) == 1:
        return {first["setting"].iloc[0]: ""}
    own = first[first["paper"].fillna("") == ""]
    names = variant_names({s: json.loads(k) for s, k in zip(own["setting"], own["setting_keys"])})
    names = {s: n or "setting" for s, n in names.items()}
    names.update({s: p for s, p in zip(first["setting"], first["paper"]) if p})
    counts = pd.Series(list(names.values())).value_counts()
    return {s: file_stem(n if counts[n] == 1 else f"{n}-{s}") + "-" for s, n in names.items()}


def plot_all(study: Study, out: str | Path, paper: bool = False) -> list[Path]:
    """Every figure for every setting in `study` (see prefixes() for the file names), each with its caption; with
    `paper`, each also at one column's width as PDF and SVG (style.for_paper). A sweep's runs: one sentence
    (results.refuse_sweep)."""
    refuse_sweep(study.runs, "bench plot")
    return draw(_figures, study, out, paper)


def _figures(study: Study, out: Path) -> list[Path]:
    written = []
    for setting, prefix in prefixes(study).items():
        written += plot_setting(study, setting, out, prefix)
    models = by_model(study)
    problems = study.groups.drop_duplicates("problem").set_index("problem")["problem_keys"]
    names = variant_names({p: json.loads(problems[p]) for p in models})
    for problem, data in models.items():
        prefix = "" if len(models) == 1 else f"models-{file_stem(names[problem])}-"
        written += save(plot_by_model(data), out, f"{prefix}steps_to_target_by_model")
    return written
