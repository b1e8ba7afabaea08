"""The figures of a tuned comparison (`bench sweep`), PNG and SVG (with --paper also PDF and SVG one column wide), in
the suite's one style (style.py); definitions in tuning.py.

- steps_to_result:     the reruns' median steps to the target against global batch (log-log) with the scaling
                       table's order-statistic interval (its exact coverage named: 93.75% at 5 reruns), the best trials as faint markers (their winner's luck visible), each
                       arm's fitted curve, the perfect-scaling line its critical batch is measured from (the fit's
                       steps at the ladder's smallest batch, ∝ 1/batch), and its critical batch with its band
                       (where the fitted curve is 20% above that line); misses in a band above
- tuned_top1_vs_batch: the reruns' final val Top-1 (mean ± std) against global batch
- tuned_gap_vs_batch:  the reruns' generalization gap against global batch, on a range symmetric about 0 and no
                       narrower than the gap difference's MDE (gap_axis)
- tuned_curves:        val and train-eval Top-1 against epochs, a panel per batch, each arm's reruns' mean with a
                       ± 1 std band (plots.plot_curves of rerun_groups): where a gap opens during training
- lr_sensitivity:      each trial's final Top-1 on the selection split (or its steps to the target) against its
                       peak lr, a panel per arm that ran trials, a colour per batch, lines joining only trials of one
                       warm-up (each point labelled with its warm-up where the sweep searched it); misses in a band,
                       trials whose loss spiked and came back circled in red
- performance_profile: the fraction of the batches at which an arm's reruns' median steps is within tau x the best
                       arm's
A sweep of one batch (the demo's) draws the arms side by side in the first three, not an axis against batch size.
The data each draws comes from a function of its own (steps_lines, fit_lines, gap_axis, warmup_segments,
tuning.performance_profile, scaling.ladder_fits), which the tests check. Each title is one line; the caption beside
the figure (<figure>.caption.txt) says the dataset, the model, the budget and the numbers of trials and seeds
(cells.describe) and what each mark means.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bench.analysis import cells, pairs, power, scaling, search, tuning
from bench.analysis.paper import display
from bench.analysis.plots import MISSED, no_run_reached, plot_curves
from bench.analysis.results import Study
from bench.analysis.style import (
    arm_axis,
    batch_label,
    batch_limits,
    caption,
    color,
    columns,
    draw,
    kind_handle,
    legend_below,
    log2_batch_axis,
    look,
    miss_band,
    plain_log_x,
    plain_log_y,
    plt,
    room_below,
    save,
    shift,
    size,
    x_axis,
    y_range,
)

BEST_TRIAL = "best trial (winner's luck)"
FIT = "fit S(B) = S_min (1 + B_noise/B)"
CRITICAL = f"critical batch (fit {scaling.EXCESS_TEXT} above dashed)"
CRITICAL_BAND = "critical batch, 95% interval"


A_RERUN = "one rerun"


def _reruns(ax, i: int, values: list[float], arm_look: dict) -> None:
    """Each rerun's value as a small open marker just right of arm i's mean (a figure of one batch)."""
    jitter = np.linspace(-0.06, 0.06, len(values)) if len(values) > 1 else np.zeros(len(values))
    ax.plot(
        i + 0.22 + jitter,
        values,
        linestyle="",
        marker=arm_look["marker"],
        markerfacecolor="none",
        color=arm_look["color"],
        alpha=0.7,
        markersize=3,
        label=A_RERUN,
        gid="rerun-points",
    )


def _names(order: list[str]) -> dict[str, str]:
    return {arm: display(arm) for arm in order}


def _at(table_cells: pd.DataFrame) -> tuple[list, bool]:
    """The batches of a sweep's cells, and whether there is only one (then the arms stand side by side)."""
    batches = sorted(set(table_cells["global_batch"]))
    return batches, len(batches) == 1


def _xs(batches, i: int, n: int, single: bool) -> np.ndarray:
    """Where arm i of n draws its cells: at their batches (shifted, so equal values do not hide each other), or at i
    in a figure of one batch."""
    batches = np.asarray(batches, float)
    return np.full(len(batches), float(i)) if single else batches * shift(i, n)


def steps_lines(table_cells: pd.DataFrame, order: list[str]) -> dict[str, pd.DataFrame]:
    """What the steps figure draws for each arm, by batch: the reruns' median steps to the target (inf: half or more
    missed) with the scaling table's order-statistics interval (cells.median_steps_ci), and the fewest over the trials (the
    faint markers: the best trial carries the winner's luck)."""
    out = {}
    for arm in order:
        c = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        cis = [cells.median_steps_ci(s) or (np.nan, np.nan) for s in c["rerun_steps"]]
        out[arm] = pd.DataFrame(
            {
                "global_batch": c["global_batch"].to_numpy(),
                "median": [float(np.median(s)) if len(s) else np.nan for s in c["rerun_steps"]],
                "low": [ci[0] for ci in cis],
                "high": [ci[1] for ci in cis],
                "coverage": [ci[2] if len(ci) > 2 else np.nan for ci in cis],
                "best_trial": c["steps_to_result"].to_numpy(),
            }
        )
    return out


def coverage_words(lines: dict[str, pd.DataFrame], long: bool = False) -> str:
    """The exact coverage of the steps figure's intervals (power.median_interval at each cell's reruns): '93.75%
    interval' (5 reruns: the smallest to the largest, 95% out of reach), or their range where cells differ; `long`
    says why it is not 95%."""
    found = sorted({round(c, 6) for d in lines.values() for c in d["coverage"] if c == c})
    if not found:
        return "interval"
    words = f"{found[0]:.2%}" if len(found) == 1 else f"{found[0]:.2%}-{found[-1]:.2%}"
    why = ": the smallest to the largest, as fewer than 6 reruns cannot reach 95%" if long and found[0] < 0.95 else ""
    return f"{words.replace('.00%', '%')} exact coverage{why}" if long else f"{words.replace('.00%', '%')} interval"


def fit_lines(f, batches) -> dict[str, np.ndarray]:
    """What the steps figure draws of one arm's fit over the ladder's span: the fitted steps S(B) and the
    perfect-scaling line the critical batch is measured from (S(B0) B0 / B; E_min / B from the batch-0 limit)."""
    b = np.geomspace(min(batches), max(batches), 64)
    anchor = float(f.steps(f.base)) * f.base if f.base else f.e_min
    return {"batch": b, "fitted": f.steps(b), "linear": anchor / b}


def plot_steps_to_result(table_cells: pd.DataFrame, order: list[str], words=None) -> plt.Figure:
    """Steps to result against the batch, each arm's fit and critical batch; `words`: (the reference arm, arm ->
    its critical batch ratio's word: scaling.ratio_words), which the caption quotes."""
    fig, ax = plt.subplots(figsize=size(True, 4.8), layout="constrained")  # wide enough for its legend in 2 columns
    batches, single = _at(table_cells)
    handles, missed, any_best, any_reruns = [], [], False, False
    lines = steps_lines(table_cells, order)
    for i, arm in enumerate(order):
        d = lines[arm]
        arm_look = look(arm, order)
        xs = _xs(d["global_batch"], i, len(order), single)
        ok = np.isfinite(d["median"]).to_numpy()
        m = d[ok]
        ax.errorbar(
            xs[ok],
            m["median"],
            yerr=[m["median"] - m["low"].fillna(m["median"]), m["high"].fillna(m["median"]) - m["median"]],
            capsize=2,
            label=display(arm),
            **arm_look,
        )
        best = np.isfinite(d["best_trial"]).to_numpy()
        if single:  # beside the arm's median: its reruns (open markers) on one side, its best trial on the other
            steps = table_cells.loc[table_cells["arm"] == arm, "rerun_steps"]
            values = [v for v in (steps.iloc[0] if len(steps) else ()) if math.isfinite(v)]
            _reruns(ax, i, values, arm_look)
            any_reruns |= bool(values)
        if best.any():
            ax.plot(
                xs[best] - (0.22 if single else 0),
                d.loc[best, "best_trial"],
                linestyle="",
                alpha=0.3,
                gid="best-trial",
                label=BEST_TRIAL,
                **arm_look,
            )
            any_best = True
        # the reruns' median missed (half or more of them), or every trial missed and there are no reruns
        unreached = (np.isinf(d["median"]) | (d["median"].isna() & np.isinf(d["best_trial"]))).to_numpy()
        missed.append((xs[unreached], arm_look["color"]))
        handles.append(Line2D([], [], label=display(arm), **arm_look))
    if any_best:
        handles.append(kind_handle(order, BEST_TRIAL, alpha=0.3))
    if any_reruns:
        handles.append(kind_handle(order, A_RERUN, markerfacecolor="none"))
    drawn = set() if single else _critical_batches(ax, table_cells, order)
    handles += _critical_handles(drawn, table_cells, order)
    any_missed = any(len(xs) for xs, _ in missed)
    if any_missed:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=f"{MISSED} (reruns' median)"))
    target = table_cells["target_top1"].iloc[0]
    finite = any(np.isfinite(d[k]).any() for d in lines.values() for k in ("median", "best_trial"))
    if finite:
        plain_log_y(ax)
    else:
        no_run_reached(ax, target)
    x_axis(ax, batches, order, _names(order))
    ax.set_ylabel(f"steps to {target:g}% val Top-1\n(reruns' median, {coverage_words(lines)})")
    ax.set_title(f"Steps to result at batch {batch_label(batches[0])}" if single else "Steps to result against batch")
    miss_band(ax, missed, top=True)
    caption(
        fig,
        f"Steps to {target:g}% val Top-1: {cells.describe(table_cells)}. Markers and lines: the reruns' median steps "
        f"with the scaling table's order-statistic interval ({coverage_words(lines, long=True)})"
        + (f"; faint markers: each cell's {BEST_TRIAL}" if any_best else "")
        + ("; open markers: each rerun's steps" if any_reruns else "")
        + "."
        + _critical_caption(drawn)
        + (_ratio_caption(*words) if words and drawn else "")
        + (f" x in the band above: {MISSED} (half or more of the reruns missed, or every trial)." if any_missed else "")
        + _secondary(table_cells),
    )
    legend_below(fig, handles, ncol=2)
    return fig


def _critical_batches(ax, table_cells: pd.DataFrame, order: list[str]) -> set[str]:
    """Each arm's whole-ladder fit (scaling.ladder_fits): its fitted curve, the perfect-scaling line its critical
    batch is measured from (fit_lines), and the critical batch as its 95% band in its colour (the part inside the
    ladder's range) with a dotted line at the point only where the interval locates it (within a factor of 2); an
    interval open above is an arrow from its lower end (at the axis's right end where that lies beyond). Returns
    what it drew: fit, linear (with the base batch), band, point, open."""
    fits = scaling.ladder_fits(table_cells)
    batches = sorted(set(table_cells["global_batch"]))
    lo_x, hi_x = batch_limits(batches)
    drawn = set()
    for i, arm in enumerate(order):
        f = fits.get(arm)
        if f is None or not f.found:
            continue
        c = color(arm, order)
        line = fit_lines(f, batches)
        ax.plot(line["batch"], line["fitted"], alpha=0.7, gid=f"fit-{arm}", color=c, linewidth=0.8, label=FIT)
        ax.plot(
            line["batch"],
            line["linear"],
            "--",
            alpha=0.7,
            gid=f"perfect-scaling-{arm}",
            color=c,
            linewidth=0.8,
            label=_linear_label(f),
        )
        drawn |= {"fit", "linear"}
        point, low, high = f.critical
        if math.isinf(high):
            start = min(max(low, 1.0, lo_x), hi_x / 1.35)
            ax.annotate(
                "",
                (start * 1.3, 0.5 - 0.06 * i),
                (start, 0.5 - 0.06 * i),
                xycoords=("data", "axes fraction"),
                arrowprops={"arrowstyle": "->", "color": c},
            )
            drawn.add("open")
        else:
            a, b = max(low, 1.0, lo_x), min(high, hi_x)
            if a < b:  # its edges in the arm's colour: two arms' pale bands that overlap stay apart
                ax.axvspan(a, b, facecolor=c, alpha=0.15, linewidth=0, label=f"{CRITICAL_BAND}: {display(arm)}")
                for edge in (a, b):
                    ax.axvline(edge, color=c, linestyle=(0, (4, 2, 1, 2)), linewidth=0.7, alpha=0.8, gid=f"band-{arm}")
                drawn |= {"band", f"band-{arm}"}
        if f.resolved:
            ax.axvline(point, color=c, linestyle=":", linewidth=1.2, label=CRITICAL)
            if lo_x <= point <= hi_x:
                drawn.add("point")
    ax.set_xlim(lo_x, hi_x)
    return drawn


def _linear_label(f) -> str:
    return f"perfect scaling ∝ 1/B from each fit at {batch_label(f.base)}" if f.base else "perfect scaling E_min / B"


def _critical_handles(drawn: set[str], table_cells: pd.DataFrame, order: list[str]) -> list:
    """Legend entries for what _critical_batches drew, and only that: a band's swatch in each arm's colour."""
    handles = []
    if "fit" in drawn:
        handles.append(Line2D([], [], color="k", linewidth=0.8, label=FIT))
    if "linear" in drawn:
        f = next(f for f in scaling.ladder_fits(table_cells).values() if f is not None and f.found)
        handles.append(Line2D([], [], color="k", linewidth=0.8, linestyle="--", label=_linear_label(f)))
    if "point" in drawn:
        handles.append(Line2D([], [], color="k", linestyle=":", label=CRITICAL))
    for arm in order:
        if f"band-{arm}" in drawn:
            c = color(arm, order)
            label = f"{CRITICAL_BAND}: {display(arm)}"
            handles.append(Patch(facecolor=c, alpha=0.3, edgecolor=c, linestyle=(0, (4, 2, 1, 2)), label=label))
    return handles


def _critical_caption(drawn: set[str]) -> str:
    if not drawn:
        return ""
    return (
        f" Thin solid: each arm's {FIT} over the ladder; dashed in its colour: the perfect scaling (∝ 1/batch) its "
        "critical batch is measured from, from the fit's steps at the ladder's smallest batch"
        + (
            f"; dotted: its critical batch, where the fit is {scaling.EXCESS_TEXT} above the dashed line"
            if "point" in drawn
            else ""
        )
        + (
            "; shaded in its colour, between dash-dot edges: the critical batch's 95% interval within the ladder's "
            "range (the ratios of one arm's to another's, and whether they differ: bench table scaling)"
            if "band" in drawn
            else ""
        )
        + (
            "; an arrow: an interval open above (the fit does not bend away from linear scaling)"
            if "open" in drawn
            else ""
        )
        + "."
    )


def _ratio_caption(reference: str | None, words: dict[str, str]) -> str:
    """' Critical batch over LARS's (bench table scaling): NAdamW no difference resolved; ...' ('' without a ratio)."""
    if not words:
        return ""
    said = "; ".join(f"{display(arm)} {word}" for arm, word in words.items())
    return f" Critical batch over {display(reference)}'s (bench table scaling): {said}."


def gap_axis(table_cells: pd.DataFrame, order: list[str]) -> tuple[float, float]:
    """The gap figure's y range ± limit (symmetric about 0, so a zero gap sits in the middle and a difference reads
    against the range of possible signs) and the largest MDE over the batches of the first two arms' gap
    difference (the verdict's test, 80% power at Holm's first-step level over the batches): the range is never
    narrower than ± that MDE, so a difference the study could not detect never fills the axis."""
    x, y = (pairs.PRIMARY if set(pairs.PRIMARY) <= set(order) else tuple(order[:2])) if len(order) > 1 else (None,) * 2
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
    reach = [abs(m) + (s if s == s else 0) for m, s, _ in map(cells.mean_std_n, table_cells["gap_top1"]) if m == m]
    return max([*reach, mde if mde == mde else 0.0, 1.0]) * 1.1, mde


def _note(ax, y: float, text: str, gid: str) -> None:
    """A small note inside the axes, at its left edge, at the top (y near 1) or the bottom."""
    ax.text(
        0.01, y, text, fontsize=5.5, color="0.25", va="top" if y > 0.5 else "bottom", transform=ax.transAxes, gid=gid
    )


def plot_reruns_vs_batch(
    table_cells: pd.DataFrame, order: list[str], metric: str, ylabel: str, what: str
) -> plt.Figure:
    """The reruns' `metric` (mean ± sample sd) against global batch; a sweep of one batch: the arms side by side,
    each rerun a small open marker beside its arm's mean."""
    fig, ax = plt.subplots(figsize=size(False, 3.0), layout="constrained")
    batches, single = _at(table_cells)
    handles = []
    for i, arm in enumerate(order):  # arms side by side, so equal points do not hide each other
        c = table_cells[table_cells["arm"] == arm].sort_values("global_batch")
        stats = [cells.mean_std_n(v) for v in c[metric]]
        mean = np.array([s[0] for s in stats])
        std = np.nan_to_num(np.array([s[1] for s in stats]))
        arm_look = look(arm, order)
        xs = _xs(c["global_batch"], i, len(order), single)
        ax.errorbar(xs, mean, yerr=std, capsize=3 if single else 2, label=display(arm), **arm_look)
        if single:
            _reruns(ax, i, [v for v in c[metric].iloc[0] if v == v] if len(c) else [], arm_look)
        else:
            handles.append(Line2D([], [], label=display(arm), **arm_look))
    if single:
        arm_axis(ax, order, _names(order), batches[0])
        handles.append(kind_handle(order, A_RERUN, markerfacecolor="none"))
    else:
        log2_batch_axis(ax, batches)
    ax.set_ylabel(ylabel)
    seeds = "/".join(map(str, sorted(set(table_cells["n_reruns"]))))
    _note(ax, 0.01, f"mean ± sample sd over n = {seeds} reruns; the verdict pairs them by seed", "error-bar-note")
    mde_text = ""
    if metric == "gap_top1":
        limit, mde = gap_axis(table_cells, order)
        ax.set_ylim(-limit, limit)
        ax.axhline(0, color="0.7", linewidth=0.8)
        if mde == mde:
            mde_text = f"smallest gap difference detectable (MDE, 80% power, corrected): {mde:.1f} pp"
            _note(ax, 0.99, f"smallest detectable gap difference: {mde:.1f} pp", "mde-note")
    else:
        room_below(ax, 0.08)  # the note at the bottom covers no point
    ax.set_title(f"{what} at batch {batch_label(batches[0])}" if single else f"{what} against batch size")
    caption(
        fig,
        f"{what} ({ylabel}): {cells.describe(table_cells)}. The reruns' mean ± sample sd over n = {seeds} reruns "
        "(the verdict pairs them by seed)"
        + (", each rerun an open marker beside its arm" if single else "")
        + "."
        + (" The y range is symmetric about 0 and no narrower than the " + mde_text + "." if mde_text else ""),
    )
    legend_below(fig, handles, ncol=2)
    return fig


def warmup_segments(trials: pd.DataFrame) -> list[pd.DataFrame]:
    """One cell's trials split by warm-up, each sorted by lr: the lr sensitivity figure joins points only within
    one (a line across warm-ups would draw two hyperparameters' effect as one lr curve)."""
    return [group.sort_values("lr") for _, group in trials.groupby("warmup_epochs", sort=True, dropna=False)]


NO_TRIAL = "no successful trial"
SPIKED = "loss spiked and came back"


def plot_lr_sensitivity(runs: pd.DataFrame, table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    trials = runs[runs["role"].isin(["trial", "local"])]
    by_steps = cells.selects_on_steps(table_cells)
    # what the sweep ranked on: steps to the target (a miss in the band above), else the selection split's Top-1
    column = "steps_to_target" if by_steps else search.selection_column(trials, by_steps)
    trials = trials.assign(**{column: trials[column].where(np.isfinite(trials[column]))})
    arms = [arm for arm in order if (trials["arm"] == arm).any()]  # a panel for each arm that ran trials
    batches = sorted(set(trials["global_batch"]))
    shades = dict(zip(batches, plt.get_cmap("viridis")(np.linspace(0, 0.85, len(batches)))))
    failed = trials[column].isna() & trials["finished"]
    missing = [b for b in batches if (failed & (trials["global_batch"] == b)).any()]  # a band row each
    ncols = columns(len(arms), 4)
    nrows = math.ceil(len(arms) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=size(True, 2.3 * nrows + 0.6), layout="constrained", squeeze=False)
    panels = list(axes.flat[: len(arms)])
    searched_warmup = False
    for ax, arm in zip(panels, arms):
        searched_warmup |= _lr_panel(ax, trials[trials["arm"] == arm], arm, column, shades, by_steps)
    for ax in axes.flat[len(arms) :]:
        ax.set_visible(False)
    drawn = [ax for ax, arm in zip(panels, arms) if trials.loc[trials["arm"] == arm, column].notna().any()]
    if by_steps:
        for ax in drawn:
            plain_log_y(ax)
    limits = y_range(drawn) if drawn else None
    for k, (ax, arm) in enumerate(zip(panels, arms)):
        mine = trials[(trials["arm"] == arm) & failed]
        rows = [(list(mine.loc[mine["global_batch"] == b, "lr"]), shades[b]) for b in missing]
        if limits is not None and ax in drawn:
            ax.set_ylim(*limits)
        miss_band(ax, rows, top=by_steps, keep_places=True, limits=limits if ax in drawn else None, markersize=4.5)
        if k % ncols and ax in drawn and axes[k // ncols, 0] in drawn:  # one y range: its labels once a row
            ax.tick_params(labelleft=False)
    target = table_cells["target_top1"].iloc[0]
    for ax in axes[:, 0]:
        ax.set_ylabel(
            f"steps to {target:g}% val Top-1"
            if by_steps
            else f"final Top-1 (%), {'held-out' if column == 'holdout_top1' else 'val'} images"
        )
    present = sorted(set(trials.loc[trials[column].notna(), "global_batch"]))
    handles = [Line2D([], [], color=shades[b], marker="o", label=f"batch {batch_label(b)}") for b in present]
    spiked = (trials["unstable"] & trials[column].notna()).any()
    if missing:
        handles.append(Line2D([], [], color="k", marker="x", linestyle="", label=_lr_miss(by_steps)))
    if spiked:
        handles.append(Line2D([], [], color="red", marker="o", markerfacecolor="none", linestyle="", label=SPIKED))
    legend_below(fig, handles, ncol=7)
    fig.suptitle("Learning-rate sensitivity of the trials", fontsize="medium")
    empty = [display(arm) for ax, arm in zip(panels, arms) if ax not in drawn]
    caption(fig, _lr_caption(table_cells, by_steps, searched_warmup, bool(missing), spiked, empty))
    return fig


def _lr_panel(ax, mine: pd.DataFrame, arm: str, column: str, shades: dict, by_steps: bool) -> bool:
    """One arm's panel of the lr sensitivity figure: its trials' `column` against lr, a line per batch and warm-up,
    each point labelled with its warm-up where the arm searched it (returned), the spiked ones circled."""
    warmups = mine["warmup_epochs"].nunique(dropna=False) > 1  # the sweep searched it: each point says its own
    for batch, colour in shades.items():
        t = mine[mine["global_batch"] == batch].sort_values("lr")
        ok = t[t[column].notna()]
        for segment in warmup_segments(ok):  # a line joins only trials of one warm-up: lr is all that moves
            ax.plot(
                segment["lr"],
                segment[column],
                marker="o",
                color=colour,
                markersize=3,
                label=f"batch {batch_label(batch)}",
            )
        if warmups:
            for _, t_ in ok.iterrows():
                ax.annotate(
                    f"{t_['warmup_epochs']:.2g}",
                    (t_["lr"], t_[column]),
                    fontsize=4.5,
                    color=colour,
                    xytext=(2, 2),
                    textcoords="offset points",
                    gid="warmup-label",
                )
        spiked = ok[ok["unstable"]]
        if len(spiked):
            ax.plot(
                spiked["lr"],
                spiked[column],
                linestyle="",
                marker="o",
                markersize=7,
                markerfacecolor="none",
                markeredgecolor="red",
                label=SPIKED,
            )
    if not mine[column].notna().any():
        ax.text(
            0.5,
            0.5,
            f"{NO_TRIAL}\n({len(mine)} trial{'s' * (len(mine) != 1)}: "
            + ("none reached the target)" if by_steps else "all diverged)"),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=7,
            gid="no-successful-trial",
        )
        ax.set_yticks([])
    ax.set_xscale("log")
    plain_log_x(ax)
    ax.set_xlabel(f"peak lr ({display(arm)})")
    ax.set_title(display(arm), fontsize="medium")
    return warmups


def _lr_miss(by_steps: bool) -> str:
    return "target not reached (or diverged)" if by_steps else "diverged (no final accuracy)"


def _lr_caption(
    table_cells: pd.DataFrame, by_steps: bool, searched_warmup: bool, missing: bool, spiked: bool, empty
) -> str:
    """The lr sensitivity figure's caption: what a point is, its lines and marks, and the arms without a trial."""
    target = table_cells["target_top1"].iloc[0]
    return (
        f"Learning-rate sensitivity of the trials: {cells.describe(table_cells)}. Each point one trial: its "
        + (f"steps to {target:g}% val Top-1" if by_steps else "final Top-1 on the images it was selected on")
        + " against its peak lr, a panel per arm, a colour per batch; "
        + (
            "each point labelled with its warm-up in epochs (the sweep searched it), lines joining only trials of "
            "one warm-up."
            if searched_warmup
            else "lines join the trials of one batch (every trial had the same warm-up)."
        )
        + (
            f" x in the band {'above' if by_steps else 'below'}: {_lr_miss(by_steps)}, a row per batch."
            if missing
            else ""
        )
        + (f" Circled in red: the {SPIKED}." if spiked else "")
        + (f" {', '.join(empty)}: {NO_TRIAL}." if empty else "")
    )


def _fraction_ticks(ax, n: int) -> None:
    """The profile's y ticks: each possible fraction k/n of n batches, labelled k/n (up to 8 batches)."""
    if n <= 8:
        ax.set_yticks(
            [k / n for k in range(n + 1)], ["0" if k == 0 else "1" if n == 1 else f"{k}/{n}" for k in range(n + 1)]
        )


def plot_performance_profile(table_cells: pd.DataFrame, order: list[str]) -> plt.Figure:
    taus = np.linspace(1, 4, 301)
    profile = tuning.performance_profile(table_cells, taus)
    n = table_cells["global_batch"].nunique()
    fig, ax = plt.subplots(figsize=size(False, 3.0), layout="constrained")
    for i, arm in enumerate(order):
        arm_look = look(arm, order)
        values = profile[arm]
        steps = [0, *np.flatnonzero(np.diff(values)) + 1, len(taus) - 1]  # where the profile changes, and its ends
        ax.step(
            taus,
            values,
            where="post",
            color=arm_look["color"],
            label=display(arm),
            linewidth=2.6 - 1.6 * i / max(1, len(order) - 1),  # equal curves nest: the later arms thinner, inside
            markevery=sorted(set(steps)),
            marker=arm_look["marker"],
            markersize=4,
        )
    ax.set_xlabel("τ (steps to result ≤ τ × the best arm's at that batch)")
    ax.set_ylabel(f"fraction of the {n} batch sizes" if n > 1 else "within τ × the best (1) or not (0)")
    ax.set_ylim(-0.08, 1.08)
    _fraction_ticks(ax, n)
    batch = table_cells["global_batch"].iloc[0]
    ax.set_title(
        "Performance profile over batch sizes" if n > 1 else f"Performance profile at batch {batch_label(batch)}"
    )
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
    caption(
        fig,
        f"Performance profile over batch sizes: {cells.describe(table_cells)}. For each arm, the fraction of the {n} "
        "batch sizes at which its reruns' median steps to the target is within τ times the best arm's there (AlgoPerf's "
        "performance profile, over batches; a miss never counts). Equal curves lie one inside the other, the later "
        "arm thinner; markers where a curve steps. It ranks medians and draws none of the seeds' noise: a best arm "
        "here may be within noise of the next (which differences are resolved: bench table verdict)."
        + _secondary(table_cells),
    )
    ax.legend(loc="lower right", fontsize="small")
    return fig


def _secondary(table_cells: pd.DataFrame) -> str:
    """The caption's last sentence where the steps drawn are a secondary reading of a Top-1 sweep."""
    return f" {note}" if (note := cells.secondary_steps_note(table_cells)) else ""


def rerun_groups(table_cells: pd.DataFrame) -> pd.DataFrame:
    """Each cell's finished reruns as one group for plots.plot_curves, its arm in the `optimizer` column it colours
    by; cells without reruns are left out."""
    rows = [
        {
            "optimizer": c["arm"],
            "global_batch": c["global_batch"],
            "runs": list(c["reruns"]),
            "target_top1": c["target_top1"],
        }
        for _, c in table_cells.iterrows()
        if c["reruns"]
    ]
    return pd.DataFrame(rows, columns=["optimizer", "global_batch", "runs", "target_top1"])


def plot_all(study: Study, out: str | Path, paper: bool = False) -> list[Path]:
    """The sweep's figures, each with its caption; with `paper`, each also one column wide as PDF and SVG."""
    return draw(_figures, study, out, paper)


def _figures(study: Study, out: Path) -> list[Path]:
    table_cells = cells.cells(study)
    runs = cells.sweep_runs(study)
    order = cells.arms(runs)
    # a steps-to-result sweep's runs stop at the target: their final Top-1 and gap are the crossing evaluation's,
    # so it draws no Top-1 or gap figure (as its verdict tests none)
    by_steps = cells.selects_on_steps(table_cells)
    figures = {
        "steps_to_result": lambda: plot_steps_to_result(
            table_cells,
            order,
            scaling.ratio_words(study, table_cells) if len(set(table_cells["global_batch"])) > 1 else None,
        )
    }
    if not by_steps:
        figures["tuned_top1_vs_batch"] = lambda: plot_reruns_vs_batch(
            table_cells, order, "val_top1", "final val Top-1 (%), reruns", "Tuned Top-1"
        )
        figures["tuned_gap_vs_batch"] = lambda: plot_reruns_vs_batch(
            table_cells, order, "gap_top1", "train-eval − val Top-1 (pp), reruns", "Generalization gap"
        )
        if len(reruns := rerun_groups(table_cells)):
            figures["tuned_curves"] = lambda: plot_curves(
                study, reruns, order, cells.describe(table_cells), "of each arm's reruns at its selected point", False
            )  # the question is the final Top-1: the recipes' target is no line to read
    figures["lr_sensitivity"] = lambda: plot_lr_sensitivity(runs, table_cells, order)
    figures["performance_profile"] = lambda: plot_performance_profile(table_cells, order)
    return [path for stem, draw in figures.items() for path in save(draw(), out, stem)]
