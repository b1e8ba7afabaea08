"""The figures of a tuned comparison (`bench sweep`), PNG and SVG; definitions in tuning.py.

- steps_to_result:     fewest steps to the target over the trials against global batch, log-log, with the
                       perfect-scaling line (Shallue et al. 2018, their Figure 1); misses in a band above;
                       hollow markers: the reruns' median steps at the selected point (what the reruns did)
- tuned_top1_vs_batch: the reruns' final val Top-1 (mean ± std) against global batch
- tuned_gap_vs_batch:  the reruns' generalization gap against global batch
- lr_sensitivity:      each trial's final Top-1 on the selection split against its peak lr, a panel per arm,
                       a line per batch; diverged trials marked in a band below, trials whose
                       loss spiked and came back circled in red
- performance_profile: fraction of batches at which an arm's steps to result is within tau x the best arm's
Each title says the dataset, the model, the budget and the numbers of trials and seeds.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter

from bench.analysis import tuning
from bench.analysis.paper import display
from bench.analysis.plots import (
    BAND_PAD,
    MARKERS,
    MISSED,
    STYLE,
    WIDTH,
    color,
    log2_batch_axis,
    miss_band,
    perfect_scaling,
    plain_log_y,
    plt,
    save,
    shift,
)
from bench.analysis.results import Study

LINESTYLES = ("-", "--", "-.", ":")


def _title(ax, what: str, table_cells: pd.DataFrame) -> None:
    ax.set_title(f"{what}\n" + "\n".join(textwrap.wrap(tuning.describe(table_cells), 62)), fontsize=7, pad=BAND_PAD)


def plot_steps_to_result(table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(WIDTH / 2, 3.0), layout="constrained")
    handles, missed = [], False
    for i, arm in enumerate(order):
        c = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        ok = c[np.isfinite(c["steps_to_result"])]
        look, dx = {"color": color(arm, order), "marker": MARKERS[i % len(MARKERS)]}, shift(i, len(order))
        ax.plot(ok["global_batch"] * dx, ok["steps_to_result"], **look)
        misses = c.loc[~np.isfinite(c["steps_to_result"]), "global_batch"]
        miss_band(ax, misses * dx, look["color"], top=True)
        missed |= bool(len(misses))
        handles.append(Line2D([], [], label=display(arm), **look))
        medians = c["rerun_steps"].map(lambda s: float(np.median(s)) if len(s) else np.nan)  # a miss is inf
        shown = np.isfinite(medians)
        unreached = c.loc[np.isinf(medians), "global_batch"]  # half or more of the reruns missed: in the band too
        miss_band(ax, unreached * dx, look["color"], top=True)
        missed |= bool(len(unreached))
        ax.plot(
            c.loc[shown, "global_batch"] * dx,
            medians[shown],
            linestyle="",
            marker=look["marker"],
            markerfacecolor="none",
            markeredgecolor=look["color"],
            markersize=8,
        )
    if table_cells["rerun_steps"].map(len).any():
        handles.append(
            Line2D(
                [],
                [],
                color="k",
                marker="o",
                markerfacecolor="none",
                linestyle="",
                label="reruns' median (selected point)",
            )
        )
    finite = table_cells[np.isfinite(table_cells["steps_to_result"])]
    batches = sorted(set(table_cells["global_batch"]))
    handles += perfect_scaling(ax, finite, "steps_to_result", max(batches))
    handles += _critical_batches(ax, table_cells, order)
    if missed:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=f"{MISSED} (best trial or median)"))
    plain_log_y(ax)
    log2_batch_axis(ax, batches)
    ax.set_ylabel(f"steps to {table_cells['target_top1'].iloc[0]:g}% val Top-1 (best trial)")
    _title(ax, "Steps to result against batch size", table_cells)
    ax.legend(handles=handles, loc="best", fontsize=7)
    return fig


def _critical_batches(ax, table_cells: pd.DataFrame, order: list[str]) -> list[Line2D]:
    """Each arm's critical batch (tuning.critical_batches: from its reruns' median steps) as a dotted line in its
    colour over its 95% bootstrap band; one beyond the ladder is an arrow at the ladder's end, one only bounded
    below (the next batch missed the target) an arrow from the bound. Legend handles."""
    found = tuning.critical_batches(table_cells)
    drawn = False
    for arm in order:
        point, boot, lower_bound = found.get(arm, tuning.Critical(math.nan, None))
        if boot is None or point != point:
            continue
        look = {"color": color(arm, order), "linestyle": ":", "linewidth": 1.2}
        if math.isinf(point) or lower_bound:
            start = max(table_cells["global_batch"]) if math.isinf(point) else point
            ax.annotate(
                "",
                (start * 1.4, 0.5),
                (start, 0.5),
                xycoords=("data", "axes fraction"),
                arrowprops={"arrowstyle": "->", "color": look["color"]},
            )
        else:
            ax.axvline(point, **look)
            band = boot[np.isfinite(boot)]
            if len(band):
                low, high = np.quantile(band, [0.025, 0.975], method="inverted_cdf")
                ax.axvspan(low, high, color=look["color"], alpha=0.1, linewidth=0)
        drawn = True
    if not drawn:
        return []
    return [
        Line2D(
            [],
            [],
            color="k",
            linestyle=":",
            label=f"critical batch ({tuning.CRITICAL_EXCESS - 1:.0%} above linear; reruns) and 95% band",
        )
    ]


def plot_reruns_vs_batch(
    table_cells: pd.DataFrame, order: list[str], metric: str, ylabel: str, what: str
) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(WIDTH / 2, 3.0), layout="constrained")
    batches = sorted(set(table_cells["global_batch"]))
    handles = []
    for i, arm in enumerate(order):  # arms side by side, so equal points do not hide each other
        c = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        stats = [tuning.mean_std_n(v) for v in c[metric]]
        mean = np.array([s[0] for s in stats])
        std = np.nan_to_num(np.array([s[1] for s in stats]))
        look = {"color": color(arm, order), "marker": MARKERS[i % len(MARKERS)]}
        ax.errorbar(c["global_batch"] * shift(i, len(order)), mean, yerr=std, capsize=2, **look)
        handles.append(Line2D([], [], label=display(arm), **look))
    log2_batch_axis(ax, batches)
    ax.set_ylabel(ylabel)
    seeds = "/".join(map(str, sorted(set(table_cells["n_reruns"]))))
    ax.text(
        0.01,
        0.01,
        f"mean ± sample sd over n = {seeds} reruns; the verdict pairs them by seed",
        fontsize=6,
        transform=ax.transAxes,
        gid="error-bar-note",
    )
    _title(ax, what, table_cells)
    ax.legend(handles=handles, loc="best", fontsize=7)
    return fig


def plot_lr_sensitivity(runs: pd.DataFrame, table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    trials = runs[runs["role"].isin(["trial", "local"])]
    by_steps = tuning.selects_on_steps(table_cells)
    # what the sweep ranked on: steps to the target (a miss in the band above), else the selection split's Top-1
    column = "steps_to_target" if by_steps else tuning.selection_column(trials, by_steps)
    trials = trials.assign(**{column: trials[column].where(np.isfinite(trials[column]))})
    batches = sorted(set(trials["global_batch"]))
    shades = plt.get_cmap("viridis")(np.linspace(0, 0.85, len(batches)))
    fig, axes = plt.subplots(1, len(order), figsize=(WIDTH, 2.8), layout="constrained", sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], order):
        for shade, batch in zip(shades, batches):
            t = trials[(trials["arm"] == arm) & (trials["global_batch"] == batch)].sort_values("lr")
            ok = t[t[column].notna()]
            ax.plot(ok["lr"], ok[column], marker="o", color=shade, markersize=3)
            for _, t_ in ok.iterrows():  # each point's warm-up, the other searched key
                ax.annotate(
                    f"{t_['warmup_epochs']:.2g}",
                    (t_["lr"], t_[column]),
                    fontsize=4,
                    color=shade,
                    xytext=(2, 2),
                    textcoords="offset points",
                )
            miss_band(ax, list(t.loc[t[column].isna() & t["finished"], "lr"]), shade, top=by_steps)
            spiked = ok[ok["unstable"]]
            ax.plot(
                spiked["lr"],
                spiked[column],
                linestyle="",
                marker="o",
                markersize=7,
                markerfacecolor="none",
                markeredgecolor="red",
            )
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        if by_steps:
            ax.set_yscale("log")
        ax.set_xlabel(f"peak lr ({display(arm)})")
        ax.set_title(display(arm), fontsize=8, pad=12 if by_steps else 6)  # room for the miss band above
    axes[0][0].set_ylabel(
        f"steps to {table_cells['target_top1'].iloc[0]:g}% val Top-1"
        if by_steps
        else f"final Top-1 (%), {'held-out' if column == 'holdout_top1' else 'val'} images"
    )
    handles = [Line2D([], [], color=s, marker="o", label=f"batch {b}") for s, b in zip(shades, batches)]
    if (trials[column].isna() & trials["finished"]).any():
        miss = "target not reached (or diverged)" if by_steps else "diverged (no final accuracy)"
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=miss))
    if (trials["unstable"] & trials[column].notna()).any():
        handles.append(
            Line2D(
                [], [], color="red", marker="o", markerfacecolor="none", linestyle="", label="loss spiked and came back"
            )
        )
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7)
    fig.suptitle(
        f"Learning-rate sensitivity of the trials (each point one trial, labelled with its warm-up in "
        f"epochs)\n{tuning.describe(table_cells)}",
        fontsize=7,
    )
    return fig


def plot_performance_profile(table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    taus = np.linspace(1, 4, 301)
    profile = tuning.performance_profile(table_cells, taus)
    fig, ax = plt.subplots(figsize=(WIDTH / 2, 3.0), layout="constrained")
    for i, arm in enumerate(order):
        ax.step(
            taus,
            profile[arm],
            where="post",
            color=color(arm, order),
            label=display(arm),
            linestyle=LINESTYLES[i % len(LINESTYLES)],
            linewidth=2.4 - 0.5 * (i % 4),
        )  # equal curves stay visible
    ax.set_xlabel("τ (steps to result ≤ τ × the best arm's at that batch)")
    ax.set_ylabel("fraction of batch sizes")
    ax.set_ylim(-0.05, 1.08)
    _title(ax, "Performance profile over batch sizes", table_cells)
    if not any(values.any() for values in profile.values()):  # flat lines at 0 would read as a drawing error
        ax.text(
            0.5,
            0.5,
            "no arm reached the target at any batch:\nno steps to result to compare",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=7,
            gid="no-result-note",
        )
    ax.legend(loc="lower right", fontsize=7)
    return fig


def plot_all(study: Study, out: str | Path) -> list[Path]:
    table_cells = tuning.cells(study)
    runs = tuning.sweep_runs(study)
    order = tuning.arms(runs)
    out = Path(out)
    # a steps-to-result sweep's runs stop at the target: their final Top-1 and gap are the crossing evaluation's,
    # so it draws no Top-1 or gap figure (as its verdict tests none)
    by_steps = tuning.selects_on_steps(table_cells)
    with plt.rc_context(STYLE):
        figures = {"steps_to_result": plot_steps_to_result(table_cells, order)}
        if not by_steps:
            figures["tuned_top1_vs_batch"] = plot_reruns_vs_batch(
                table_cells, order, "val_top1", "final val Top-1 (%), reruns", "Tuned Top-1 against batch size"
            )
            figures["tuned_gap_vs_batch"] = plot_reruns_vs_batch(
                table_cells,
                order,
                "gap_top1",
                "train-eval − val Top-1 (pp), reruns",
                "Generalization gap against batch size",
            )
        figures["lr_sensitivity"] = plot_lr_sensitivity(runs, table_cells, order)
        figures["performance_profile"] = plot_performance_profile(table_cells, order)
        return [path for stem, fig in figures.items() for path in save(fig, out, stem)]
