"""One figure style for every figure of the suite (plots.py, tuning_plots.py, project.py): what an arm looks like,
the axes, the band of misses, the one-line title with its caption beside the figure, and the files written.

- Looks: each arm of a figure its catalog colour and marker (bench/catalog.py), unless an arm before it in the
  figure already has one of the same hue (DISTINCT_HUE) or the same marker: then the first palette colour or marker
  clear of those taken. So no two arms of one figure share a hue or a marker.
- Axes: a batch axis is log2 with a tick at each batch drawn, labelled with the plain number (64, 128, ..., 2048);
  other log axes (lr, steps) carry 3 to 6 ticks at 1, 3 (or 1, 2, 5) times the powers of ten, labelled as plain
  numbers (0.3, 1, 3, 10; 2e-5 below 0.001; ReadableLog). A figure of one batch draws the arms side by side
  (arm_axis), not an axis 'against batch size'. Legends sit under the axes, in as many columns as fit.
- Misses (a target never reached, every seed diverged) are marks in a shaded band inside the axes, above or below
  the measured values, one row per arm (or batch) so two never cover each other; the y range is widened to make
  room, and no tick label sits in the band.
- A title is one line (what the figure shows); what it is measured on, how, and what each mark means is its
  caption, written beside it as <stem>.caption.txt.
- save(): PNG and SVG for the screen; under for_paper() (`bench plot --paper`, `bench sweep --paper`) the same figure
  drawn again at one column's width, COLUMN inches, with fonts to match, as <stem>-paper.pdf and <stem>-paper.svg.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    Locator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

from bench import catalog  # noqa: E402
from bench.analysis.render import latex_escape  # noqa: E402
from bench.files import atomic_write  # noqa: E402

STYLE = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.4,
    "lines.markersize": 4,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "svg.fonttype": "none",
    "pdf.fonttype": 42,  # TrueType: the PDF's text stays text (searchable, editable)
    "legend.frameon": False,
}
# One column of a two-column paper: 7-8 pt text beside 9-10 pt body text, thinner lines, the page exactly COLUMN wide.
PAPER = {
    **STYLE,
    "font.size": 7,
    "axes.titlesize": 7.5,
    "axes.labelsize": 7,
    "legend.fontsize": 6,
    "xtick.labelsize": 6,
    "ytick.labelsize": 6,
    "lines.linewidth": 1.0,
    "lines.markersize": 3,
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "savefig.bbox": None,  # the page is the figure: COLUMN inches wide
    "savefig.pad_inches": 0.0,
}
WIDTH = 7.0  # inches: a two-column paper's text width (the screen figures)
COLUMN = 3.5  # inches: one column of it (the paper figures)
SPARE = ["#bcbd22", "#17becf", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a"]
# The markers an arm may get (catalog.Optimizer.marker is one of them), filled shapes that read apart at 3-4 pt.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "p", "h", "<", ">", "d", "*")
# Two arms of one figure whose colours lie closer than this in CIELAB's (a*, b*) plane read as one hue (the
# catalog's LARS and Lion blues: 31); lightness alone does not tell thin lines apart.
DISTINCT_HUE = 32.0
PALETTE = [*(matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors), *SPARE]
BAND_ROW = 0.065  # axes fraction: one row of the band of misses
BAND_PAD = 0.03  # axes fraction: the band's margin around its rows

_mode = {"paper": False}


# --- the two outputs: screen (PNG, SVG) and paper (PDF, SVG at one column) ------------------------------------


@contextlib.contextmanager
def for_paper():
    """Draw and save for a paper's column: figures COLUMN inches wide (size(), columns()), PAPER's fonts, and
    save() writes <stem>-paper.pdf, <stem>-paper.svg and the caption as LaTeX, <stem>-paper.caption.tex."""
    before = _mode["paper"]
    _mode["paper"] = True
    try:
        with plt.rc_context(PAPER):
            yield
    finally:
        _mode["paper"] = before


def draw(figures, study, out: Path, paper: bool) -> list[Path]:
    """`figures(study, out)` drawn in the suite's style; with `paper`, drawn again one column wide (PDF and SVG)."""
    with plt.rc_context(STYLE):
        written = figures(study, Path(out))
    if paper:
        with for_paper():
            written += figures(study, Path(out))
    return written


def in_paper() -> bool:
    return _mode["paper"]


def size(full: bool, height: float, screen_width: float | None = None) -> tuple[float, float]:
    """A figure's size in inches: on screen WIDTH wide (full), half of it, or `screen_width` (a long legend); for
    a paper one COLUMN wide, a little lower (its fonts are smaller)."""
    if in_paper():
        return COLUMN, height * 0.85
    return screen_width or (WIDTH if full else WIDTH / 2), height


def columns(n: int, most: int) -> int:
    """Panels a row for n panels: at most `most` on screen, 2 in a paper's column."""
    return max(1, min(n, 2 if in_paper() else most))


def caption(fig, text: str) -> None:
    """The figure's caption (save() writes it beside the figure): what the one-line title leaves out."""
    fig.bench_caption = " ".join(text.split())


def save(fig, out: Path, stem: str) -> list[Path]:
    """PNG and SVG (under for_paper(): <stem>-paper.pdf and <stem>-paper.svg, COLUMN wide), each written whole
    (atomic_write: processes drawing the same figure, as a job array's tasks do, never see or rename each other's
    half-written file), with no date in them: the same runs give the same files, so a re-rendered figure shows in a
    diff only where it changed. The caption (caption()) goes to <stem>.caption.txt (a paper's: <stem>-paper.caption.tex);
    the figure files are returned.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    outputs = (("pdf", "-paper"), ("svg", "-paper")) if in_paper() else (("png", ""), ("svg", ""))
    for ext, suffix in outputs:
        image = io.BytesIO()
        metadata = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[ext]
        with plt.rc_context({"svg.hashsalt": "bench"}):  # fixed element ids, not random ones
            fig.savefig(image, format=ext, metadata=metadata)
        atomic_write(out / f"{stem}{suffix}.{ext}", image.getvalue())
        paths.append(out / f"{stem}{suffix}.{ext}")
    text = getattr(fig, "bench_caption", None)
    if text:  # beside the figure, not among the figures returned; a paper's as LaTeX's \caption, to \input
        name, text = (
            (f"{stem}-paper.caption.tex", f"\\caption{{{latex_escape(text)}}}")
            if in_paper()
            else (f"{stem}.caption.txt", text)
        )
        atomic_write(out / name, text + "\n")
    plt.close(fig)
    return paths


def kind_handle(order: list[str], label: str, **style) -> tuple:
    """A legend entry for a kind of mark every arm draws in its own shape (a rerun's open marker, a best trial's
    faint one): the shapes of the arms `order`, in black, side by side (legend_below draws a tuple so)."""
    from matplotlib.lines import Line2D

    shapes = dict.fromkeys(marker(arm, order) for arm in order)
    return tuple(Line2D([], [], color="k", marker=m, linestyle="", label=label, **style) for m in shapes)


def legend_below(fig, handles, ncol: int = 5):
    """The legend under the axes, outside them (it covers no point and no band), in as many columns as fit the
    figure's width, at most `ncol`; a tuple of handles (kind_handle) is one entry, its marks side by side."""
    from matplotlib.legend_handler import HandlerTuple

    labels = [(h[0] if isinstance(h, tuple) else h).get_label() for h in handles]
    for n in range(max(1, min(ncol, len(handles))), 0, -1):
        legend = fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=n,
            fontsize="small",
            handler_map={tuple: HandlerTuple(ndivide=None, pad=0.1)},
        )
        if n == 1 or legend.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width * 0.98:
            return legend
        legend.remove()


# --- looks: colour and marker per arm ---------------------------------------------------------------------------


def _ab(colour: str) -> np.ndarray:
    """CIELAB (a*, b*) of an sRGB colour (D65)."""
    rgb = np.array(matplotlib.colors.to_rgb(colour))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    f = np.cbrt(np.maximum(xyz / np.array([0.95047, 1.0, 1.08883]), (6 / 29) ** 3))
    return np.array([500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def same_hue(a: str, b: str) -> bool:
    return bool(np.linalg.norm(_ab(a) - _ab(b)) < DISTINCT_HUE)


@functools.lru_cache(maxsize=64)
def colors(order: tuple[str, ...]) -> dict[str, str]:
    """Each arm's colour in one figure: its catalog colour, unless an arm before it already has one of the same hue
    (DISTINCT_HUE); then the first palette colour clear of every colour taken."""
    taken: dict[str, str] = {}
    for arm in order:
        options = ([catalog.COLORS[arm]] if arm in catalog.COLORS else []) + PALETTE
        clear = [c for c in options if not any(same_hue(c, t) for t in taken.values())]
        taken[arm] = (clear or options)[0]
    return taken


@functools.lru_cache(maxsize=64)
def markers(order: tuple[str, ...]) -> dict[str, str]:
    """Each arm's marker in one figure: its catalog marker, unless an arm before it has it; then the first of
    MARKERS not taken (past all of them, they repeat: the colours still differ)."""
    taken: dict[str, str] = {}
    for i, arm in enumerate(order):
        record = catalog.OPTIMIZERS.get(arm)
        own = [record.marker] if record is not None and getattr(record, "marker", "") else []
        clear = [m for m in [*own, *MARKERS] if m not in taken.values()]
        taken[arm] = clear[0] if clear else MARKERS[i % len(MARKERS)]
    return taken


def color(arm: str, order: list[str]) -> str:
    return colors(tuple(order) if arm in order else (*order, arm))[arm]


def marker(arm: str, order: list[str]) -> str:
    return markers(tuple(order) if arm in order else (*order, arm))[arm]


def look(arm: str, order: list[str]) -> dict:
    """color= and marker= of an arm's line in a figure of the arms `order`."""
    return {"color": color(arm, order), "marker": marker(arm, order)}


# --- axes -------------------------------------------------------------------------------------------------------


def batch_label(b: float) -> str:
    """A batch as a tick label: the plain number (2048, not 2k or 2×10³)."""
    return f"{int(round(b))}"


def shift(i: int, n: int) -> float:
    """A small multiplicative x offset for the i-th of n lines on a log2 batch axis, so equal values at one
    batch do not hide each other."""
    return 2 ** ((i - (n - 1) / 2) * 0.05)


def batch_limits(batches) -> tuple[float, float]:
    """The x range of a batch axis: the batches drawn and a margin that holds the arms' shifted markers."""
    lo, hi = min(batches), max(batches)
    margin = max(0.3, 0.06 * math.log2(hi / lo))  # octaves
    return lo * 2**-margin, hi * 2**margin


def log2_batch_axis(ax, batches, labelled=None) -> None:
    """A log2 x axis over batch_limits() of the batches, with a tick at each batch (or at each of `labelled`:
    where the batches are too many or too close for their labels), labelled with its plain number."""
    batches = sorted(set(float(b) for b in batches))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(float(b) for b in labelled)) if labelled else batches))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda b, _: batch_label(b)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(*batch_limits(batches))
    ax.set_xlabel("global batch size")


def arm_axis(ax, order: list[str], names: dict[str, str], batch: float | None = None) -> None:
    """The x axis of a figure of one batch: the arms side by side at 0, 1, ..., their names as the tick labels."""
    ax.set_xticks(range(len(order)), [names.get(a, a) for a in order])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.grid(False, axis="x")
    ax.set_xlabel("" if batch is None else f"global batch {batch_label(batch)}")


def x_axis(ax, batches, order: list[str], names: dict[str, str]) -> None:
    """A figure's x axis: the batches on a log2 axis, or for one batch the arms side by side (arm_axis)."""
    if len(batches) == 1:
        arm_axis(ax, order, names, batches[0])
    else:
        log2_batch_axis(ax, batches)


def plain(v: float, _=None) -> str:
    """A log axis's tick label as a plain number: 20, 500, 1,000, 0.5, 0.002; 2e-5 below 0.001."""
    if v == 0 or not math.isfinite(v):
        return ""
    if abs(v) >= 1:
        return f"{v:,.0f}" if abs(v - round(v)) < 1e-9 * abs(v) else f"{v:g}"
    if abs(v) >= 1e-3:
        return f"{v:.6f}".rstrip("0").rstrip(".")
    mantissa, exponent = f"{v:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


class ReadableLog(Locator):
    """Ticks of a log axis at 1, 3, 2 and 5 (or 1-9) times the powers of ten: the coarsest set with at least four in
    view, or, where that gives more than `most`, the finest with at most `most` (evenly spaced where a span is too
    narrow for two): readable labels on an lr or steps axis however narrow its span."""

    SUBS = ((1.0,), (1.0, 3.0), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), tuple(float(s) for s in range(1, 10)))

    def __init__(self, most: int = 6):
        self.most = most

    def __call__(self):
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        if hi <= 0:
            return []
        lo = lo if lo > 0 else hi / 1e3
        decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
        fewest = []
        for subs in self.SUBS:
            ticks = [s * 10.0**e for e in decades for s in subs if lo * (1 - 1e-9) <= s * 10.0**e <= hi * (1 + 1e-9)]
            if len(ticks) > self.most:
                break
            fewest = ticks
            if len(ticks) >= 4:
                break
        if len(fewest) < 3:  # a span narrower than a factor of 3 or so: evenly spaced plain numbers
            fewest = [t for t in MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi) if lo <= t <= hi]
        return fewest


def plain_log(axis, most: int = 6) -> None:
    """A log axis (ax.xaxis or ax.yaxis, its scale already log) with ReadableLog's ticks (at most `most`) and plain
    labels, unlabelled minor ticks."""
    axis.set_major_locator(ReadableLog(most))
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def binomial_floor(ax, values, sizes, k: float = 2.0) -> bool:
    """Widen a Top-1 axis (percent) to at least k binomial standard errors either side of every value (`sizes`: the
    images each was scored on), so that a difference of a few images never fills the plot; returns whether it
    widened. A value or size that is missing widens nothing."""
    pairs = [(v, n) for v, n in zip(values, sizes) if v == v and n == n and n > 0]
    if not pairs:
        return False
    se = [100 * math.sqrt(max(v / 100 * (1 - v / 100), 0.25 / n) / n) for v, n in pairs]  # 0.25/n: p = 0 or 1
    lo = min(v - k * e for (v, _), e in zip(pairs, se))
    hi = max(v + k * e for (v, _), e in zip(pairs, se))
    cur_lo, cur_hi = ax.get_ylim()
    if lo >= cur_lo and hi <= cur_hi:
        return False
    ax.set_ylim(min(lo, cur_lo), max(hi, cur_hi))
    return True


def readable_top(ax, values) -> None:
    """Extend a log y axis to the first 1-2-5 number at or above its largest value and at or below its smallest, so
    that no point lies past the last labelled tick (a point at 118 above a top tick at 100)."""
    finite = [v for v in values if v == v and 0 < v < math.inf]
    if not finite:
        return
    steps = [m * 10.0**e for e in range(-3, 10) for m in (1, 2, 5)]
    top = min(t for t in steps if t >= max(finite))
    bottom = max(t for t in steps if t <= min(finite))
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, bottom), max(hi, top))


def plain_log_y(ax) -> None:
    """Log y axis labelled with plain numbers (20, 50, 100) rather than powers of ten."""
    ax.set_yscale("log")
    plain_log(ax.yaxis)


def plain_log_x(ax, most: int = 4) -> None:
    """Log x axis with plain labels, at most `most` of them (a narrow panel's lr axis)."""
    ax.set_xscale("log")
    plain_log(ax.xaxis, most)


# --- the band of misses -----------------------------------------------------------------------------------------


class Within(Locator):
    """Another locator's ticks inside [lo, hi] only: none in the band of misses."""

    def __init__(self, inner: Locator, lo: float, hi: float):
        self.inner, self.lo, self.hi = inner, lo, hi

    def set_axis(self, axis):
        super().set_axis(axis)
        self.inner.set_axis(axis)

    def __call__(self):
        vmin, vmax = sorted(self.axis.get_view_interval())
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin, vmax):  # the inner locator's ticks for the data's part of the range
        lo, hi = max(vmin, self.lo), min(vmax, self.hi)
        return [t for t in self.inner.tick_values(lo, hi) if self.lo <= t <= self.hi]


def band_fraction(rows: int) -> float:
    return BAND_PAD + BAND_ROW * rows if rows else 0.0


def y_range(axes) -> tuple[float, float]:
    """The y range the data of `axes` (one or several panels that must share it) spans, as autoscaling draws it."""
    lows, highs = [], []
    for ax in axes:
        ax.relim()
        ax.autoscale_view(scalex=False)
        lo, hi = ax.get_ylim()
        lows.append(lo)
        highs.append(hi)
    return min(lows), max(highs)


def miss_band(
    ax, rows: list[tuple], top: bool, keep_places: bool = False, limits=None, markersize: float = 5.5
) -> None:
    """Marks for points with no value (target never reached, every seed diverged) in a shaded band inside the axes,
    above (top) the measured values or below them: rows of (xs, colour), one row each, so two arms' marks at one x
    never cover each other (keep_places: a row for each of `rows`, empty or not, so that panels side by side put one
    batch's marks at one height; else a row for each row with marks). The y range grows by the band's height
    (`limits`: the range the data spans, the same for panels side by side) and no tick sits in the band; the marks
    are in axes coordinates, inside the axes. Call it after the data and the y scale are set."""
    rows = [(list(xs), c) for xs, c in rows]
    if not keep_places:
        rows = [r for r in rows if r[0]]
    n_rows = len(rows)
    if not n_rows:
        return
    lo, hi = limits if limits is not None else y_range([ax])
    frac = band_fraction(n_rows)
    log = ax.get_yscale() == "log"
    f, inv = (np.log10, lambda v: 10.0**v) if log else ((lambda v: v), (lambda v: v))
    span = (f(hi) - f(lo)) or 1.0
    if top:
        edge, far = hi, inv(f(lo) + span / (1 - frac))
        ax.set_ylim(lo, far)
    else:
        edge, far = lo, inv(f(hi) - span / (1 - frac))
        ax.set_ylim(far, hi)
    ax.set_autoscaley_on(False)
    # opaque, over the grid and any shaded span, under the lines and marks
    ax.axhspan(min(edge, far), max(edge, far), color="0.93", linewidth=0, zorder=1.6, gid="miss-band-area")
    for axis_locator, setter in (
        (ax.yaxis.get_major_locator(), ax.yaxis.set_major_locator),
        (ax.yaxis.get_minor_locator(), ax.yaxis.set_minor_locator),
    ):
        inner = axis_locator.inner if isinstance(axis_locator, Within) else axis_locator
        setter(Within(inner, lo if top else edge, edge if top else hi))
    for i, (xs, c) in enumerate(rows):
        if not xs:
            continue
        y = 1 - BAND_PAD / 2 - BAND_ROW * (i + 0.5) if top else BAND_PAD / 2 + BAND_ROW * (i + 0.5)
        ax.plot(
            xs,
            [y] * len(xs),
            linestyle="",
            marker="x",
            color=c,
            markersize=markersize,
            markeredgewidth=1.3,
            transform=ax.get_xaxis_transform(),
            gid="miss-band",
            zorder=5,
        )


def room_below(ax, fraction: float) -> None:
    """Widen the y range so the lowest `fraction` of the axes holds no data (room for a note there)."""
    lo, hi = y_range([ax])
    log = ax.get_yscale() == "log"
    f, inv = (np.log10, lambda v: 10.0**v) if log else ((lambda v: v), (lambda v: v))
    span = (f(hi) - f(lo)) or 1.0
    ax.set_ylim(inv(f(hi) - span / (1 - fraction)), hi)
    ax.set_autoscaley_on(False)
