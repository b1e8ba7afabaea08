"""The figure of `bench branch`'s tree: the critical batch along training (bench/analysis/branching.py), a panel
against images seen and one against the reference's Top-1 there, a line per arm and Δ with each seed's range."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from bench.analysis import branching, style
from bench.analysis.results import Study


def plot_all(study: Study, out: str | Path, paper: bool = False) -> list[Path]:
    return style.draw(_figures, study, out, paper)


def _figures(study: Study, out: Path) -> list[Path]:
    found = [w for w in branching.windows(study) if not w.waiting and w.readable]
    if not found:
        return []
    return style.save(plot_critical_along_training(found), out, "critical_batch_along_training")


def plot_critical_along_training(found: list[branching.Window]):
    """Critical batch (log 2) against images seen and against the reference's Top-1; ∞ (no k passed 1.2) drawn as
    an open triangle at the largest branch batch, pointing up."""
    arms = list(dict.fromkeys(w.arm for w in found))
    deltas = sorted({w.delta for w in found})
    fig, axes = plt.subplots(1, 2, figsize=style.size(True, 3.6), sharey=True)
    largest = max(w.b0 * max(w.ks) for w in found)
    styles = ["-", "--", ":", "-."]
    for arm in arms:
        for j, delta in enumerate(deltas):
            ws = sorted((w for w in found if w.arm == arm and w.delta == delta), key=lambda w: w.point)
            if not ws:
                continue
            look = style.look(arm, arms)
            crits = [w.critical() for w in ws]
            nudge = j - (len(deltas) - 1) / 2  # the Δs' ranges side by side, not on top of each other
            for ax, xs in zip(axes, ([w.point for w in ws], [w.reference_top1 for w in ws])):
                known = [x for x in xs if math.isfinite(x)]  # no Top-1 before the reference's first evaluation
                width = (max(known) - min(known)) if known else 0.0
                xs = [x + nudge * 0.01 * (width or 1.0) for x in xs]
                finite = [(x, c, w) for x, c, w in zip(xs, crits, ws) if math.isfinite(c) and math.isfinite(x)]
                ax.plot(
                    [x for x, _, _ in finite],
                    [c for _, c, _ in finite],
                    linestyle=styles[j % len(styles)],
                    color=look["color"],
                    marker=look["marker"],
                    label=f"{arm}, Δ = {delta:,}",
                )
                for x, c, w in finite:
                    if (span := w.seed_range()) and all(map(math.isfinite, span)):
                        ax.vlines(x, span[0], span[1], color=look["color"], alpha=0.5)
                above = [x for x, c in zip(xs, crits) if math.isinf(c) and math.isfinite(x)]
                ax.scatter(above, [largest] * len(above), marker="^", facecolors="none", edgecolors=look["color"])
    for ax, label in zip(axes, ("images seen (reference)", "reference's Top-1 there (%)")):
        ax.set_xlabel(label)
        style.plain_log_y(ax)
    axes[0].xaxis.set_major_locator(MaxNLocator(5))
    axes[0].xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    axes[0].set_ylabel("critical batch (images / linear 1.2)")
    axes[0].legend(fontsize="small")
    fig.suptitle("The critical batch along training, by branching")
    style.caption(
        fig,
        f"Each point: where a branch at k x B0 first needs 1.2 x the images of linear scaling over a window of Δ "
        f"images from that point of the reference's training (the seeds' median; a vertical line: the range of "
        f"each seed's own crossing). An open triangle at {largest:,}: no branch batch passed 1.2 (the critical "
        "batch lies above the largest branched). Windows the reference's curve could not read are left out."
        + (
            " A point before the reference's first evaluation has no Top-1 yet: it shows in the left panel only."
            if any(not math.isfinite(w.reference_top1) for w in found)
            else ""
        ),
    )
    fig.tight_layout()
    return fig
