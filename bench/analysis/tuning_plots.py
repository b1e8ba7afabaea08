"""The figures of a tuned comparison (`bench sweep`), PNG and SVG; definitions in tuning.py.

- steps_to_result:     the reruns' median steps to the target against global batch (log-log) with the scaling
                       table's 95% interval, the best trials as faint markers (their winner's luck visible), each
                       arm's fitted curve, the perfect-scaling line its critical batch is measured from (the fit's
                       steps at the ladder's smallest batch, ∝ 1/batch), and its critical batch with its band
                       (where the fitted curve is 20% above that line); misses in a band above
- tuned_top1_vs_batch: the reruns' final val Top-1 (mean ± std) against global batch
- tuned_gap_vs_batch:  the reruns' generalization gap against global batch, on a range symmetric about 0 and no
                       narrower than the gap difference's MDE (gap_axis)
- lr_sensitivity:      each trial's final Top-1 on the selection split (or its steps to the target) against its
                       peak lr, a panel per arm, a colour per batch, lines joining only trials of one warm-up;
                       diverged trials marked in a band, trials whose loss spiked and came back circled in red
- performance_profile: fraction of batches at which an arm's reruns' median steps is within tau x the best arm's
The data each draws comes from a function of its own (steps_lines, fit_lines, gap_axis, warmup_segments,
tuning.performance_profile, tuning.ladder_fits), which the tests check.
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

from bench.analysis import power, search, tuning
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
    plain_log_y,
    plt,
    save,
    shift,
)
from bench.analysis.results import Study

LINESTYLES = ("-", "--", "-.", ":")


def _title(ax, what: str, table_cells: pd.DataFrame) -> None:
    ax.set_title(f"{what}\n" + "\n".join(textwrap.wrap(tuning.describe(table_cells), 62)), fontsize=7, pad=BAND_PAD)


def steps_lines(table_cells: pd.DataFrame, order: list[str]) -> dict[str, pd.DataFrame]:
    """What the steps figure draws for each arm, by batch: the reruns' median steps to the target (inf: half or more
    missed) with the scaling table's order-statistics interval (tuning.median_steps_ci), and the fewest over the trials (the
    faint markers: the best trial carries the winner's luck)."""
    out = {}
    for arm in order:
        c = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        cis = [tuning.median_steps_ci(s) or (np.nan, np.nan) for s in c["rerun_steps"]]
        out[arm] = pd.DataFrame(
            {
                "global_batch": c["global_batch"].to_numpy(),
                "median": [float(np.median(s)) if len(s) else np.nan for s in c["rerun_steps"]],
                "low": [ci[0] for ci in cis],
                "high": [ci[1] for ci in cis],
                "best_trial": c["steps_to_result"].to_numpy(),
            }
        )
    return out


def fit_lines(f, batches) -> dict[str, np.ndarray]:
    """What the steps figure draws of one arm's fit over the ladder's span: the fitted steps S(B) and the
    perfect-scaling line the critical batch is measured from (S(B0) B0 / B; E_min / B from the batch-0 limit)."""
    b = np.geomspace(min(batches), max(batches), 64)
    anchor = float(f.steps(f.base)) * f.base if f.base else f.e_min
    return {"batch": b, "fitted": f.steps(b), "linear": anchor / b}


def plot_steps_to_result(table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(WIDTH / 2, 3.8), layout="constrained")
    handles, missed = [], False
    lines = steps_lines(table_cells, order)
    for i, arm in enumerate(order):
        d = lines[arm]
        look, dx = {"color": color(arm, order), "marker": MARKERS[i % len(MARKERS)]}, shift(i, len(order))
        ok = d[np.isfinite(d["median"])]
        ax.errorbar(
            ok["global_batch"] * dx,
            ok["median"],
            yerr=[ok["median"] - ok["low"].fillna(ok["median"]), ok["high"].fillna(ok["median"]) - ok["median"]],
            capsize=2,
            **look,
        )
        best = d[np.isfinite(d["best_trial"])]
        ax.plot(best["global_batch"] * dx, best["best_trial"], linestyle="", alpha=0.3, gid="best-trial", **look)
        unreached = d.loc[~np.isfinite(d["median"]), "global_batch"]  # half or more of the reruns missed
        miss_band(ax, unreached * dx, look["color"], top=True)
        missed |= bool(len(unreached))
        handles.append(Line2D([], [], label=display(arm), **look))
    handles.append(Line2D([], [], color="k", marker="o", alpha=0.3, linestyle="", label="best trial (winner's luck)"))
    batches = sorted(set(table_cells["global_batch"]))
    handles += _critical_batches(ax, table_cells, order)
    if missed:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=f"{MISSED} (reruns' median)"))
    plain_log_y(ax)
    log2_batch_axis(ax, batches)
    target = table_cells["target_top1"].iloc[0]
    ax.set_ylabel(f"steps to {target:g}% val Top-1\n(reruns' median, order-statistic interval)")
    _title(ax, "Steps to result against batch size", table_cells)
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=6)
    return fig


def _critical_batches(ax, table_cells: pd.DataFrame, order: list[str]) -> list[Line2D]:
    """Each arm's whole-ladder fit (tuning.ladder_fits): its fitted curve, the perfect-scaling line its critical
    batch is measured from (fit_lines), and the critical batch as its 95% band in its colour with a dotted line at
    the point only where the interval locates it (within a factor of 2); an interval open above is an arrow from
    its lower end. Legend handles."""
    fits = tuning.ladder_fits(table_cells)
    batches = sorted(set(table_cells["global_batch"]))
    drawn = False
    for arm in order:
        f = fits.get(arm)
        if f is None or not f.found:
            continue
        look = {"color": color(arm, order), "linewidth": 0.8}
        line = fit_lines(f, batches)
        ax.plot(line["batch"], line["fitted"], alpha=0.7, gid=f"fit-{arm}", **look)
        ax.plot(line["batch"], line["linear"], "--", alpha=0.7, gid=f"perfect-scaling-{arm}", **look)
        point, low, high = f.critical
        if math.isinf(high):
            ax.annotate(
                "",
                (max(low, 1.0) * 1.4, 0.5),
                (max(low, 1.0), 0.5),
                xycoords=("data", "axes fraction"),
                arrowprops={"arrowstyle": "->", "color": look["color"]},
            )
        else:
            ax.axvspan(max(low, 1.0), high, color=look["color"], alpha=0.1, linewidth=0)
        if f.resolved:
            ax.axvline(point, color=look["color"], linestyle=":", linewidth=1.2)
        drawn = True
    if not drawn:
        return []
    return [
        Line2D([], [], color="k", linewidth=0.8, label="fit S(B) = S_min (1 + B_noise / B)"),
        Line2D(
            [],
            [],
            color="k",
            linewidth=0.8,
            linestyle="--",
            label="perfect scaling the critical batch is measured from",
        ),
        Line2D(
            [],
            [],
            color="k",
            linestyle=":",
            label=f"critical batch (fit {tuning.EXCESS_TEXT} above the dashed line) and 95% band",
        ),
    ]


def gap_axis(table_cells: pd.DataFrame, order: list[str]) -> tuple[float, float]:
    """The gap figure's y range ± limit (symmetric about 0, so a zero gap sits in the middle and a difference reads
    against the range of possible signs) and the largest MDE over the batches of the first two arms' gap
    difference (the verdict's test, 80% power at Holm's first-step level over the batches): the range is never
    narrower than ± that MDE, so a difference the study could not detect never fills the axis."""
    x, y = (
        (tuning.PRIMARY if set(tuning.PRIMARY) <= set(order) else tuple(order[:2])) if len(order) > 1 else (None,) * 2
    )
    mdes = []
    if x is not None:
        batches = table_cells.groupby("global_batch")
        alpha = power.family_alpha(table_cells["global_batch"].nunique())
        for _, at in batches:
            sides = {c["arm"]: c for _, c in at.iterrows()}
            if x in sides and y in sides:
                c = power.compare(sides[x]["gap_top1"], sides[y]["gap_top1"], sides[x]["seeds"], sides[y]["seeds"])
                mdes.append(power.comparison_mde(c, alpha) if c else math.nan)
    mde = max((m for m in mdes if m == m), default=math.nan)
    reach = [abs(m) + (s if s == s else 0) for m, s, _ in map(tuning.mean_std_n, table_cells["gap_top1"]) if m == m]
    return max([*reach, mde if mde == mde else 0.0, 1.0]) * 1.1, mde


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
    if metric == "gap_top1":
        limit, mde = gap_axis(table_cells, order)
        ax.set_ylim(-limit, limit)
        ax.axhline(0, color="0.7", linewidth=0.8)
        if mde == mde:
            ax.text(
                0.01,
                0.99,
                f"smallest gap difference detectable (MDE, 80% power, corrected): {mde:.1f} pp",
                fontsize=6,
                va="top",
                transform=ax.transAxes,
                gid="mde-note",
            )
    _title(ax, what, table_cells)
    ax.legend(handles=handles, loc="best", fontsize=7)
    return fig


def warmup_segments(trials: pd.DataFrame) -> list[pd.DataFrame]:
    """One cell's trials split by warm-up, each sorted by lr: the lr sensitivity figure joins points only within
    one (a line across warm-ups would draw two hyperparameters' effect as one lr curve)."""
    return [group.sort_values("lr") for _, group in trials.groupby("warmup_epochs", sort=True)]


def plot_lr_sensitivity(runs: pd.DataFrame, table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    trials = runs[runs["role"].isin(["trial", "local"])]
    by_steps = tuning.selects_on_steps(table_cells)
    # what the sweep ranked on: steps to the target (a miss in the band above), else the selection split's Top-1
    column = "steps_to_target" if by_steps else search.selection_column(trials, by_steps)
    trials = trials.assign(**{column: trials[column].where(np.isfinite(trials[column]))})
    batches = sorted(set(trials["global_batch"]))
    shades = plt.get_cmap("viridis")(np.linspace(0, 0.85, len(batches)))
    fig, axes = plt.subplots(1, len(order), figsize=(WIDTH, 2.8), layout="constrained", sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], order):
        for shade, batch in zip(shades, batches):
            t = trials[(trials["arm"] == arm) & (trials["global_batch"] == batch)].sort_values("lr")
            ok = t[t[column].notna()]
            for segment in warmup_segments(ok):  # a line joins only trials of one warm-up: lr is all that moves
                ax.plot(segment["lr"], segment[column], marker="o", color=shade, markersize=3)
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
        f"epochs; lines join one warm-up's trials)\n{tuning.describe(table_cells)}",
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
