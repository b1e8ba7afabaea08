"""Plots are written and non-empty, regenerate() writes a results tree's outputs, analysis imports no torch, and every
figure of two small studies (`bench plot`'s and `bench sweep`'s, on screen and --paper) keeps the suite's one style
(bench/analysis/style.py): legends only for what is drawn, markers inside the axes, arms apart in hue and marker,
one-line titles, plain tick labels on log axes, captions beside the figures, paper figures one column wide."""

import itertools
import json
import math
import re
import shutil
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest

from bench import catalog
from bench.analysis import commands, plots, results, style
from tests.helpers import IMAGENET, IMAGENET_SIZES, make_run, sweep_run

PNG = b"\x89PNG\r\n\x1a\n"


def small_study(root):
    """LARS and VRGD-LARS at two batches, two seeds; VRGD logs GSNR statistics, LARS trust ratios."""
    for batch in (100, 500):
        for seed in (0, 1):
            gsnr = [
                {"step": s, "lr": 0.1, "loss": 2.0, "gsnr_clip_frac": 0.2 + s / 100, "gsnr_r_mean": 1.5}
                for s in range(10_000 // batch)
            ]
            trust = [
                {"step": s, "lr": 0.1, "loss": 2.0, "trust_min": 1e-4, "trust_median": 1e-3, "trust_max": 0.02}
                for s in range(10_000 // batch)
            ]
            make_run(root, f"vrgd-{batch}", "vrgd_lars", batch, seed, [40, 62 + seed, 70], events=gsnr)
            make_run(root, f"lars-{batch}", "lars", batch, seed, [30, 50, 61 - 5 * seed], events=trust)
    make_run(root, "lars-diverged", "lars", 1000, 0, [20, 10], status="diverged")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """regenerate() on the small study, once for the tests below (drawing figures takes seconds)."""
    root = tmp_path_factory.mktemp("analysis")
    small_study(root / "mini")
    return root, commands.regenerate(root / "mini", root / "plots")


def test_plots_are_written_and_not_empty(regenerated):
    _, written = regenerated
    figures = [p for p in written if p.suffix in (".png", ".svg")]
    by_stem = {}
    for p in figures:
        by_stem.setdefault(p.stem, set()).add(p.suffix)
        assert p.stat().st_size > 2000, p
        assert p.read_bytes().startswith(PNG) if p.suffix == ".png" else b"<svg" in p.read_bytes()
    assert by_stem == {
        s: {".png", ".svg"}
        for s in ("curves", "top1_vs_batch", "gap_vs_batch", "steps_to_target", "gsnr", "diagnostics")
    }


def test_figures_drawn_again_from_the_same_runs_are_the_same_files(regenerated):
    """No date and no random element ids in a figure: a re-rendered figure shows in a diff only where it changed."""
    root, written = regenerated
    before = {p: p.read_bytes() for p in written if p.suffix in (".png", ".svg")}
    again = commands.regenerate(root / "mini", root / "plots")
    assert set(before) <= set(again) and all(p.read_bytes() == before[p] for p in before)
    assert b"<dc:date>" not in before[root / "plots" / "curves.svg"]


def test_regenerate_writes_report_and_tables(regenerated):
    root, written = regenerated
    names = {p.name for p in written}
    assert {"report.md", "report.csv", "compare.md", "compare.csv"} <= names
    assert not any(n.startswith("vrgd-imagenet") for n in names)  # no run is in the ImageNet setting
    assert "schedules.md" not in names  # no batch moves here
    compare = pd.read_csv(root / "mini" / "compare.csv", comment="#")
    assert set(compare["optimizer"]) == {"LARS", "VRGD-LARS"} and len(compare) == 5
    assert "speedup (a)" in (root / "mini" / "compare.md").read_text()
    # The outputs live beside the runs and do not disturb loading them again.
    assert len(results.load([root / "mini"])) == 9


def test_a_study_with_two_settings_gets_prefixed_figures(tmp_path):
    make_run(tmp_path, "toy", "lars", 100, 0, [50, 70])
    make_run(
        tmp_path, "in-lars", "lars", 4096, 0, [70, 76.2], target=75.9, data=IMAGENET, model="resnet50", **IMAGENET_SIZES
    )
    study = results.load_study([tmp_path])
    prefixes = plots.prefixes(study)
    assert sorted(prefixes.values()) == ["imagenet-", "setting-"]  # a paper's setting by its name
    assert plots.prefixes(results.load_study([tmp_path / "toy"])) == {study.runs["setting"].iloc[1]: ""}


def test_variant_names_are_the_keys_that_differ():
    deep = {"model": {"name": "resnet18", "kwargs": {"channels": [20, 40], "layers": [4, 4]}}, "target_top1": 55}
    wide = {"model": {"name": "resnet18", "kwargs": {"channels": [44, 88], "layers": [1, 1]}}, "target_top1": 55}
    assert results.variant_names({"a": deep, "b": wide}) == {
        "a": "channels=20,40 layers=4,4",
        "b": "channels=44,88 layers=1,1",
    }
    lars = {"optimizer": {"name": "lars", "lr": 2.0}, "schedule": {"warmup_epochs": 1}, "seed": 0}
    assert results.variant_names({"x": lars, "y": {**lars, "optimizer": {"name": "lars", "lr": 0.5}}}) == {
        "x": "lr=2",
        "y": "lr=0.5",
    }
    # two variants equal in every key: only their ids tell them apart
    assert results.variant_names({"x": lars, "y": lars}) == {"x": "[x]", "y": "[y]"}
    # two differing keys with the same last part are named by their whole path
    a, b = {"data": {"size": 1}, "model": {"size": 2}}, {"data": {"size": 3}, "model": {"size": 4}}
    assert results.variant_names({"a": a, "b": b})["a"] == "data.size=1 model.size=2"


def test_model_shapes_name_their_figures_by_the_keys_that_differ(tmp_path):
    for name, kwargs in (
        ("deep", {"channels": [20, 40, 80, 160], "layers": [4, 4, 4, 4]}),
        ("wide", {"channels": [44, 88, 176, 352], "layers": [1, 1, 1, 1]}),
    ):
        make_run(tmp_path, f"{name}-b128", "lars", 128, 0, [50, 70], model="resnet18", model_kwargs=kwargs)
    written = commands.regenerate(tmp_path, tmp_path / "plots")
    stems = {p.name for p in written}
    assert "channels=20,40,80,160_layers=4,4,4,4-curves.png" in stems
    assert "channels=44,88,176,352_layers=1,1,1,1-steps_to_target.svg" in stems
    assert not any(s.startswith("setting") for s in stems)  # no hash in a file name
    compare = (tmp_path / "compare.md").read_text()
    assert "| channels=20,40,80,160 layers=4,4,4,4 " in compare and "| S1 " not in compare


def _misses(ax):
    return [a for a in ax.lines if a.get_gid() == "miss-band"]


def test_misses_are_drawn_in_a_band_inside_the_axes_above_the_points(tmp_path):
    """Steps to target: a batch whose runs never reached it is an 'x' in a shaded band at the top of the axes (axes
    coordinates, inside them, above every measured point; no tick label in the band), not a point on the data scale,
    with the legend entry 'did not reach the target'."""
    make_run(tmp_path, "lars-100", "lars", 100, 0, [50, 70])
    make_run(tmp_path, "lars-400", "lars", 400, 0, [40, 55])  # never reaches 60
    make_run(tmp_path, "sgd-100", "sgd", 100, 0, [50, 70])
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_steps_to_target(groups, order, "t", "")
    ax = fig.axes[0]
    (band,) = _misses(ax)
    assert band.get_transform() is not ax.transData  # placed in axes coordinates
    [y] = band.get_ydata()
    assert 0.9 < y < 1  # inside the axes, at the top
    assert band.get_xdata()[0] == pytest.approx(400, rel=0.1)
    fig.canvas.draw()
    [area] = [p for p in ax.patches if p.get_gid() == "miss-band-area"]
    bottom = area.get_window_extent().y0
    points = [c.lines[0] for c in ax.containers]
    assert all((p.get_transform().transform(p.get_xydata())[:, 1] < bottom).all() for p in points)
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert ticks and all(ax.transData.transform((1, t))[1] <= bottom + 0.5 for t in ticks)  # none in the band
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert plots.MISSED in labels and "(measured)" not in " ".join(labels)
    # LARS and SGD reached the target at batch 100 in the same steps: their points are offset, not on top
    xs = [c.lines[0].get_xdata()[0] for c in ax.containers if len(c.lines[0].get_xdata())]
    assert (
        len(xs) == 2
        and xs[0] != xs[1]
        and xs[0] == pytest.approx(100, rel=0.1)
        and xs[1] == pytest.approx(100, rel=0.1)
    )
    plots.plt.close(fig)
    data = next(iter(plots.by_model(study).values()), None)
    assert data is None  # one model: no by-model figure


def test_diagnostics_panels_have_units_and_none_is_empty(tmp_path):
    events = [
        {
            "step": s,
            "lr": 0.1,
            "loss": 2.0,
            "gain": 1.0 + s / 10,
            "grad_var": 1e-2 * (1 + s),
            "grad_sqnorm": 1e-3,
            "batch": 100,
        }
        for s in range(10)
    ]
    ada_run = make_run(tmp_path, "ada", "adascale_sgd", 100, 0, [50, 70], events=events)
    meta = json.loads((ada_run / "meta.json").read_text())
    meta["plan"]["gsnr_groups"] = 4  # S = 4: AdaScale's base batch is 25 images
    (ada_run / "meta.json").write_text(json.dumps(meta))
    lars = [
        {"step": s, "lr": 0.1, "loss": 2.0, "trust_min": 1e-4, "trust_median": 1e-3, "trust_max": 0.02}
        for s in range(10)
    ]
    make_run(tmp_path, "lars", "lars", 100, 0, [50, 70], events=lars)
    study = results.load_study([tmp_path])
    setting = study.runs["setting"].iloc[0]
    groups, order = plots.series(study, setting)
    events_of = {g["group"]: plots.run_events(study, g) for _, g in groups.iterrows()}
    # AdaScale's epochs are those of its schedule: gain x base batch (100 / S) per step, over 1,000 images
    ada = events_of[groups.loc[groups["optimizer"] == "adascale_sgd", "group"].item()]
    assert ada["epoch"].iloc[-1] == pytest.approx(sum(25 * (1 + s / 10) for s in range(10)) / 1000)
    keys = ["grad_var", "trust_max", "trust_median", "trust_min", "unlogged_key"]
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_diagnostics(events_of, keys, groups, order, "t")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 2  # grad_var and trust; nothing for the key no run logged
    for ax in shown:
        assert ax.get_ylabel() and ax.lines
    assert shown[0].get_yscale() == "log"  # grad_var spans 10x
    plots.plt.close(fig)


NO_TORCH = """
import sys, json
from pathlib import Path
from bench.analysis import commands, paper, plots, render, report, results, tables
commands.regenerate(Path(sys.argv[1]), None)
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))))
"""


def test_analysis_imports_no_torch(tmp_path):
    make_run(
        tmp_path / "runs",
        "toy",
        "vrgd_lars",
        100,
        0,
        [50, 70],
        events=[{"step": 0, "lr": 0.1, "loss": 2.0, "gsnr_clip_frac": 0.3}],
    )
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path / "runs")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_every_registered_optimizer_has_a_display_name_and_a_colour():
    from bench import optim
    from bench.analysis.paper import DISPLAY
    from bench.analysis.plots import COLORS

    assert [name for name in optim.NAMES if name not in DISPLAY or name not in COLORS] == []
    assert len({COLORS[name] for name in optim.NAMES}) >= len(optim.NAMES) - 2  # nearly all tell apart


def _overlaps(fig, artist_a, artist_b) -> bool:
    renderer = fig.canvas.get_renderer()
    return artist_a.get_window_extent(renderer).overlaps(artist_b.get_window_extent(renderer))


def test_real_run_figures_read_clearly(tmp_path):
    """The legend never covers an x label; |G|² shows its zero line where the estimate dips below 0; every
    point against batch says its n, with error bars only where n > 1; a profile with no result says so."""
    dips = [
        {
            "step": s,
            "lr": 0.1,
            "loss": 2.0,
            "grad_var": 1e-2,
            "grad_sqnorm": 1e-3 * (s % 3 - 0.5),
            "noise_trace": 1.0,
            "gsnr_clip_frac": 0.3,
        }
        for s in range(30)
    ]
    make_run(tmp_path, "vrgd-64", "vrgd_lars", 64, 0, [70, 80.5], events=dips)
    make_run(tmp_path, "lars-64", "lars", 64, 0, [70, 79.9], events=dips)
    make_run(tmp_path, "lars-512", "lars", 512, 0, [70, 78.0], events=dips)
    make_run(tmp_path, "lars-512", "lars", 512, 1, [70, 77.0], events=dips)
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    events_of = {g["group"]: plots.run_events(study, g) for _, g in groups.iterrows()}
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_diagnostics(events_of, ["grad_sqnorm", "grad_var", "gsnr_clip_frac"], groups, order, "t")
        fig.canvas.draw()
        legend = fig.legends[0]
        shown = [ax for ax in fig.axes if ax.get_visible()]
        assert all(ax.get_xlabel() and not _overlaps(fig, legend, ax.xaxis.label) for ax in shown)
        sqnorm = next(ax for ax in shown if ax.get_title().startswith("|G|²"))
        assert "can be < 0" in sqnorm.get_title() and [line for line in sqnorm.lines if line.get_gid() == "zero-line"]
        assert not [line for ax in shown if ax is not sqnorm for line in ax.lines if line.get_gid() == "zero-line"]
        plots.plt.close(fig)
        fig = plots.plot_vs_batch(groups, order, "val_top1", "Top-1 (%)", "t")
        ax = fig.axes[0]
        labels = sorted(t.get_text() for t in ax.texts if t.get_gid() == "n-label")
        assert labels == ["n=1", "n=1", "n=2"]  # n varies: every point says its own
        bars = [c for c in ax.containers if c.has_yerr]
        import numpy as np

        drawn = [s for c in bars for seg in c.lines[2] for s in seg.get_segments() if len(s) and np.isfinite(s).all()]
        assert len(drawn) == 1  # LARS at 512 (2 seeds) has a bar; the single-seed points have none
        plots.plt.close(fig)
        one_seed = groups[groups["n"] == 1]
        fig = plots.plot_vs_batch(one_seed, order, "val_top1", "Top-1 (%)", "t")
        [said] = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "n-label"]
        assert said == "n = 1 seed a point: no spread to show"
        plots.plt.close(fig)


def test_a_performance_profile_with_no_result_says_so():
    from bench.analysis import tuning_plots

    cells = pd.DataFrame(
        {
            "arm": ["lars", "vrgd_lars"] * 2,
            "global_batch": [64, 64, 512, 512],
            "steps_to_result": [float("inf")] * 4,
            "rerun_steps": [(float("inf"),) * 5] * 4,  # the profile reads the reruns
            "select_metric": ["steps_to_target"] * 4,
            "n_trials": [4] * 4,
            "n_reruns": [5] * 4,
            "problem_label": ["Fashion-MNIST"] * 4,
            "model_label": ["resnet10t"] * 4,
            "model_shape": ["resnet10t"] * 4,
            "planned_epochs": [2.0] * 4,
        }
    )
    with style.plt.rc_context(style.STYLE):
        fig = tuning_plots.plot_performance_profile(cells, ["lars", "vrgd_lars"])
    assert [t for t in fig.axes[0].texts if t.get_gid() == "no-result-note"]
    plots.plt.close(fig)


def test_arms_of_one_figure_never_share_a_hue():
    """The catalog gives LARS and Lion two blues and LAMB and Nesterov one green: in one figure the later arm gets a
    palette colour of another hue (up to six arms a figure; past the palette's hues the markers tell them apart);
    arms of distinct hues keep their catalog colours."""
    import itertools

    import numpy as np

    from bench import catalog
    from bench.analysis import plots

    for order in (["lars", "lion"], ["lamb", "nesterov", "lars", "vrgd_lars"], list(catalog.COLORS)[:6]):
        drawn = style.colors(tuple(order))
        for a, b in itertools.combinations(order, 2):
            assert np.linalg.norm(style._ab(drawn[a]) - style._ab(drawn[b])) >= style.DISTINCT_HUE, (a, b)
    assert plots.color("lars", ["lars", "lion"]) == catalog.COLORS["lars"]
    assert plots.color("lion", ["lars", "lion"]) != catalog.COLORS["lion"]
    assert plots.color("vrgd_lars", ["lars", "vrgd_lars"]) == catalog.COLORS["vrgd_lars"]


# --- one figure style for the suite (bench/analysis/style.py), checked on every figure of two small studies ---------

BATCH_TICK = re.compile(r"^\d+$")
PLAIN_NUMBER = re.compile(r"^-?(\d{1,3}(,\d{3})*|\d+)?(\.\d+)?(e-?\d+)?$")
NO_MARKER = (None, "None", "", " ")


def style_sweep(root):
    """A tuned sweep at batches 64-512 (target 60): LARS and VRGD-LARS reach it in every cell but 512, where both
    arms' reruns miss it (two misses at one batch); Lion (the catalog's second blue, beside LARS) tried two lrs at
    every batch and diverged every time: no successful trial, no reruns."""
    for batch in (64, 128, 256, 512):
        for arm in ("lars", "vrgd_lars"):
            reached = [50, 61, 63] if batch < 512 else [50, 55, 57]
            for trial, lr in enumerate((0.5, 2.0)):
                sweep_run(root, arm, batch, "trial", 0, [50, 61 + trial, 64], trial=trial, lr=lr)
            for seed in (1, 2, 3):
                sweep_run(root, arm, batch, "rerun", seed, [v + seed / 10 for v in reached], lr=0.5)
        for trial, lr in enumerate((0.01, 0.1)):
            sweep_run(root, "lion", batch, "trial", 0, [10], trial=trial, lr=lr, status="diverged")


def style_study(root):
    """`bench plot`'s figures: LARS and Lion at batches 64-512, two seeds; Lion misses the target at 512 and LARS
    diverges there (a band above and one below); LARS logs trust ratios, Lion GSNR statistics."""
    trust = [
        {"step": s, "lr": 0.1, "loss": 2.0, "trust_min": 1e-4, "trust_median": 1e-3, "trust_max": 0.02}
        for s in range(8)
    ]
    gsnr = [{"step": s, "lr": 0.1, "loss": 2.0, "gsnr_clip_frac": 0.2 + s / 100} for s in range(8)]
    for batch in (64, 128, 256, 512):
        for seed in (0, 1):
            lion = [40, 55, 58] if batch == 512 else [40, 62 + seed, 70]
            make_run(root, f"lion-{batch}", "lion", batch, seed, lion, events=gsnr)
            if batch < 512:
                make_run(root, f"lars-{batch}", "lars", batch, seed, [45, 63, 71 - seed], events=trust)
            else:
                make_run(root, f"lars-{batch}", "lars", batch, seed, [20, 10], status="diverged", events=trust)


def _points(artist) -> np.ndarray:
    """An artist's finite data points in display coordinates."""
    xy = np.asarray(artist.get_xydata(), float).reshape(-1, 2)
    xy = xy[np.isfinite(xy).all(axis=1)]
    return artist.get_transform().transform(xy) if len(xy) else xy


def _inside(ax, points, tol=1.0) -> np.ndarray:
    box = ax.bbox
    return (
        (points[:, 0] >= box.x0 - tol)
        & (points[:, 0] <= box.x1 + tol)
        & (points[:, 1] >= box.y0 - tol)
        & (points[:, 1] <= box.y1 + tol)
    )


def _shows(ax, artist) -> bool:
    """Whether an artist drawn in ax shows something inside the axes."""
    if isinstance(artist, matplotlib.container.Container):
        parts = [a for a in artist.get_children() if a is not None]
        return any(_shows(ax, a) for a in parts)
    if not artist.get_visible() or (artist.get_alpha() is not None and artist.get_alpha() == 0):
        return False
    if isinstance(artist, matplotlib.lines.Line2D):
        points = _points(artist)
        return bool(len(points) and _inside(ax, points).any())
    extent = artist.get_window_extent()
    overlap = matplotlib.transforms.Bbox.intersection(extent, ax.bbox)
    return overlap is not None and overlap.width > 0 and overlap.height > 0


def _same_look(handle, artist) -> bool:
    """Whether a drawn artist looks like a legend entry's handle: its marker and line style, and its colour unless the
    entry is black (an entry for a kind of mark, drawn in every arm's colour)."""
    if isinstance(artist, matplotlib.container.Container):
        return any(_same_look(handle, a) for a in artist.get_children() if a is not None)
    rgb = lambda c: matplotlib.colors.to_rgb(c)  # noqa: E731
    if isinstance(handle, matplotlib.lines.Line2D):
        if not isinstance(artist, matplotlib.lines.Line2D):
            return False
        marker = lambda a: None if a.get_marker() in NO_MARKER else a.get_marker()  # noqa: E731
        style = lambda a: None if a.get_linestyle() in ("None", "", " ") else a.get_linestyle()  # noqa: E731
        black = rgb(handle.get_color()) == (0, 0, 0)
        return (
            (marker(handle) is None or marker(handle) == marker(artist))
            and (style(handle) is None or style(handle) == style(artist))
            and (black or rgb(handle.get_color()) == rgb(artist.get_color()))
        )
    return isinstance(artist, (matplotlib.patches.Patch, matplotlib.collections.Collection)) and (
        rgb(handle.get_facecolor()) == (0, 0, 0)
    )


def _legends(fig):
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]


def _findings(fig) -> dict[str, list]:
    """Every departure of a drawn figure from the suite's style, by kind."""
    fig.canvas.draw()
    found = {kind: [] for kind in ("legend", "outside", "arms", "title", "batch ticks", "log ticks", "cut off")}
    axes = [ax for ax in fig.axes if ax.get_visible()]
    drawn = [(ax, a) for ax in axes for a in (*ax.lines, *ax.collections, *ax.patches, *ax.containers)]
    for legend in _legends(fig):
        box = legend.get_window_extent()
        if box.x0 < -1 or box.x1 > fig.bbox.width + 1 or box.y0 < -1 or box.y1 > fig.bbox.height + 1:
            found["cut off"].append([t.get_text() for t in legend.get_texts()])
        arms = []
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            label = text.get_text()
            ok = [
                a
                for ax, a in drawn
                if (a.get_label() == label or _same_look(handle, a))
                and getattr(a, "get_gid", lambda: None)() != "miss-band-area"
                and _shows(ax, a)
            ]
            if not ok:
                found["legend"].append(label)
            name = label.removesuffix(" (measured)")
            if name in catalog.DISPLAY.values():
                arms.append((name, handle.get_color(), handle.get_marker()))
        for (a, ca, ma), (b, cb, mb) in itertools.combinations(arms, 2):
            if style.same_hue(ca, cb) or (ma not in NO_MARKER and ma == mb):
                found["arms"].append((a, b))
    for ax in axes:
        for line in ax.lines:
            if line.get_visible() and line.get_marker() not in NO_MARKER:
                points = _points(line)
                if len(points) and not _inside(ax, points).all():
                    found["outside"].append((ax.get_title(), line.get_gid() or line.get_label()))
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            labels = [t.get_text() for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            if scale == "log" and "batch" in axis.get_label_text():
                if not all(BATCH_TICK.match(t) for t in labels) or not labels:
                    found["batch ticks"].append(labels)
            elif scale == "log" and (len(labels) < 2 or not all(PLAIN_NUMBER.match(t) for t in labels)):
                found["log ticks"].append((axis.get_label_text(), labels))
    titles = [t for ax in axes for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
    titles += [fig._suptitle] if fig._suptitle is not None else []
    for t in titles:
        if "\n" in t.get_text() or t.get_window_extent().width > fig.bbox.width:
            found["title"].append(t.get_text())
    return found


@pytest.fixture(scope="module")
def styled(tmp_path_factory):
    """Every figure of both small studies (`bench plot` and `bench sweep`), on screen and for a paper, with what
    _findings said of each as it was saved: {(stem, paper): findings}; and the output folders."""
    from bench.analysis import tuning_plots

    root = tmp_path_factory.mktemp("style")
    style_study(root / "study")
    style_sweep(root / "sweep")
    checked = {}

    def checking(original):
        def save(fig, out, stem):
            checked[(stem, style.in_paper())] = _findings(fig)
            return original(fig, out, stem)

        return save

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save", checking(plots.save))
        mp.setattr(tuning_plots, "save", checking(tuning_plots.save))
        plots.plot_all(results.load_study([root / "study"]), root / "plots", paper=True)
        tuning_plots.plot_all(results.load_study([root / "sweep"]), root / "sweep-plots", paper=True)
    return checked, root


def test_every_figure_is_checked_on_screen_and_for_a_paper(styled):
    checked, _ = styled
    stems = {stem for stem, _ in checked}
    assert stems == {
        "curves", "top1_vs_batch", "gap_vs_batch", "steps_to_target", "gsnr", "diagnostics",
        "steps_to_result", "tuned_top1_vs_batch", "tuned_gap_vs_batch", "tuned_curves", "lr_sensitivity",
        "performance_profile",
    }  # fmt: skip
    assert {paper for _, paper in checked} == {False, True}


@pytest.mark.parametrize("kind", ["legend", "outside", "arms", "title", "batch ticks", "log ticks", "cut off"])
def test_every_figure_keeps_the_style(styled, kind):
    """legend: every legend entry has a drawn artist with its label or look and data inside the axes (no entry for
    a band or a line not drawn); outside: no marker outside the axes (the misses in a band inside them); arms: no two
    arms of a legend share a hue or a marker (LARS and Lion's blues); title: one line, no wider than the figure; batch
    ticks: a log batch axis labelled 64, 128, 256, 512; log ticks: every other log axis at least two plain numbers
    (0.5, 2, 100, 1e-5), no 6×10¹; cut off: a legend inside the figure (a paper's is exactly one column wide)."""
    checked, _ = styled
    assert {f"{stem}{' (paper)' * paper}": f[kind] for (stem, paper), f in checked.items() if f[kind]} == {}


def test_each_figure_has_its_caption_and_a_one_line_title(styled):
    from bench.analysis import cells

    _, root = styled
    for folder in (root / "plots", root / "sweep-plots"):
        for png in folder.glob("*.png"):
            text = (folder / f"{png.stem}.caption.txt").read_text()
            assert len(text) > 80, png.name
    sweep = root / "sweep-plots"
    # the details the title left out: what the sweep ran on, its trials and seeds
    assert "6,400" not in (sweep / "steps_to_result.caption.txt").read_text()  # (not this study's numbers)
    assert "trials per cell" in (sweep / "steps_to_result.caption.txt").read_text()
    note = cells.secondary_steps_note(cells.cells(results.load_study([root / "sweep"])))
    assert note.startswith("This sweep selected each cell's point on the final Top-1")  # its steps: secondary
    for stem in ("steps_to_result", "performance_profile"):
        assert note in (sweep / f"{stem}.caption.txt").read_text()
    assert "synthetic data" in (root / "plots" / "steps_to_target.caption.txt").read_text()


def test_the_tuned_curves_draw_each_cells_reruns(styled):
    """tuned_curves: each cell's finished reruns (rerun_groups) as one mean curve with its band, val and
    train-eval; the caption says which runs they are."""
    from bench.analysis import cells, tuning_plots

    _, root = styled
    table_cells = cells.cells(results.load_study([root / "sweep"]))
    groups = tuning_plots.rerun_groups(table_cells)
    with_reruns = table_cells[table_cells["reruns"].map(len) > 0]
    assert len(groups) == len(with_reruns) > 0
    assert sorted(map(len, groups["runs"])) == sorted(map(len, with_reruns["reruns"]))
    text = (root / "sweep-plots" / "tuned_curves.caption.txt").read_text()
    assert "of each arm's reruns at its selected point" in text and "train-eval Top-1 (dashed)" in text


def test_train_eval_measured_only_at_the_end_is_a_dot_not_an_invisible_line(tmp_path):
    """Runs that evaluate the train split only at their last evaluation (as the ladder-quality study's) give one
    train-eval point per curve: a dashed line and band through one point draw nothing, so it is a dot with its
    ± 1 std bar, and the legend and caption say so; runs measuring it at every evaluation keep a dashed line."""
    for seed in (1, 2):
        make_run(tmp_path / "end", "a", "lars", 64, seed, [50, 60, 70 + seed], [np.nan, np.nan, 75 + 2 * seed])
        make_run(tmp_path / "every", "a", "lars", 64, seed, [50, 60, 70 + seed])
    drawn = {}
    for tree in ("end", "every"):
        study = results.load_study([tmp_path / tree])
        runs = list(study.runs["run"])
        groups = pd.DataFrame([{"optimizer": "lars", "global_batch": 64, "runs": runs, "target_top1": 60}])
        with style.plt.rc_context(style.STYLE):
            fig = plots.plot_curves(study, groups, ["lars"], "t")
        ax = fig.axes[0]
        dots = [line for line in ax.lines if line.get_marker() == "o"]
        bars = [seg for coll in ax.collections if hasattr(coll, "get_segments") for seg in coll.get_segments()]
        [key] = [h for h in fig.legends[0].legend_handles if h.get_label() == "train-eval"]
        drawn[tree] = dots, bars, [line for line in ax.lines if line.get_linestyle() == "--"], key, fig.bench_caption
        plots.plt.close(fig)
    dots, bars, dashed, key, caption = drawn["end"]
    [dot] = dots
    assert list(dot.get_xydata()[0]) == pytest.approx([3.0, 78.0]) and not dashed  # the mean of 77 and 79
    assert any(seg[:, 1].tolist() == pytest.approx([78 - math.sqrt(2), 78 + math.sqrt(2)]) for seg in bars)
    assert key.get_marker() == "o" and "a dot with a ± 1 std bar: train-eval measured at the last" in caption
    dots, _, dashed, key, caption = drawn["every"]
    assert not dots and len(dashed) == 1 and len(dashed[0].get_xdata()) == 3 and key.get_marker() in (None, "None", "")
    assert "a dot" not in caption


def _page_width(path) -> float:
    if path.suffix == ".pdf":
        box = re.search(rb"/MediaBox\s*\[\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*\]", path.read_bytes())
        return float(box[3]) - float(box[1])
    return float(re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', path.read_text())[1])


def test_paper_figures_are_one_column_wide(styled):
    """--paper: every figure also as <stem>-paper.pdf and <stem>-paper.svg, each page 3.5 in (252 pt) wide."""
    _, root = styled
    for folder in (root / "plots", root / "sweep-plots"):
        stems = {p.stem for p in folder.glob("*.png")}
        for stem in stems:
            for ext in ("pdf", "svg"):
                path = folder / f"{stem}-paper.{ext}"
                assert _page_width(path) == pytest.approx(style.COLUMN * 72, abs=0.5), path.name
        assert (folder / "steps_to_result-paper.pdf").exists() or (folder / "steps_to_target-paper.pdf").exists()
    assert _page_width(root / "plots" / "curves.svg") > style.COLUMN * 72  # the screen figure: wider


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex here (apt-get install texlive-latex-base)")
def test_a_paper_figure_and_its_caption_go_into_a_latex_document_untouched(styled, tmp_path):
    """Each paper figure's PDF and its <stem>-paper.caption.tex (a \\caption with the %, _, ∝ and μ of the screen
    caption spelt for LaTeX) in a two-column article, at its column's width as papers place them (3.5 in is IEEE's
    column; article's is 3.2): plain pdflatex (graphicx only) compiles it."""
    _, root = styled
    figures = sorted((root / "sweep-plots").glob("*-paper.pdf")) + sorted((root / "plots").glob("*-paper.pdf"))
    assert figures
    body = "".join(
        f"\\begin{{figure}}\\includegraphics[width=\\columnwidth]{{{pdf}}}\\input{{{pdf.with_suffix('')}.caption.tex}}\\end{{figure}}\n"
        for pdf in figures
    )
    (tmp_path / "paper.tex").write_text(
        f"\\documentclass[twocolumn]{{article}}\\usepackage{{graphicx}}\\begin{{document}}\n{body}\\end{{document}}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path, capture_output=True
    )
    assert done.returncode == 0, done.stdout.decode(errors="replace")[-2000:]
    assert b"Overfull \\hbox" not in done.stdout  # nothing in a caption too long to break


def test_the_paper_option_is_on_bench_plot_and_bench_sweep(tmp_path):
    from bench import cli

    make_run(tmp_path / "runs", "lars-64", "lars", 64, 0, [50, 70])
    assert cli.main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "plots"), "--paper"]) == 0
    assert _page_width(tmp_path / "plots" / "top1_vs_batch-paper.pdf") == pytest.approx(252, abs=0.5)
    args = cli.parser().parse_args(["sweep", "s.yaml", "--paper"])
    assert args.paper is True


def test_lion_beside_lars_gets_another_hue_and_its_own_marker():
    """The catalog's markers keep two arms of one hue apart; in a figure an arm whose marker an arm before it took
    gets the first one free, and no two arms of one figure share a marker."""
    order = ["lars", "lion", "lamb", "nesterov", "vrgd_lars", "adamw", "sgd"]
    looks = {arm: style.look(arm, order) for arm in order}
    assert looks["lars"] == {"color": catalog.COLORS["lars"], "marker": catalog.OPTIMIZERS["lars"].marker}
    assert not style.same_hue(looks["lars"]["color"], looks["lion"]["color"])
    assert len({v["marker"] for v in looks.values()}) == len(order)
    assert looks["lamb"]["marker"] != looks["nesterov"]["marker"]


def test_two_arms_missing_at_one_batch_get_a_row_each(styled, tmp_path):
    """LARS and VRGD-LARS both miss at 512: their marks sit one above the other in the band, never on each other."""
    from bench.analysis import cells, tuning_plots

    style_sweep(tmp_path)
    table_cells = cells.cells(results.load_study([tmp_path]))
    with style.plt.rc_context(style.STYLE):
        fig = tuning_plots.plot_steps_to_result(table_cells, ["lars", "vrgd_lars", "lion"])
    ax = fig.axes[0]
    fig.canvas.draw()
    rows = {matplotlib.colors.to_hex(line.get_color()): _points(line) for line in _misses(ax)}
    assert len(rows) == 3  # LARS and VRGD-LARS at 512; Lion (every trial diverged) at every batch
    lars, vrgd = (rows[style.color(arm, ["lars", "vrgd_lars", "lion"])] for arm in ("lars", "vrgd_lars"))
    assert len(lars) == len(vrgd) == 1
    assert np.hypot(*(lars[0] - vrgd[0])) >= 10  # pixels apart at 200 dpi: two marks, not one
    assert len(rows[style.color("lion", ["lars", "vrgd_lars", "lion"])]) == 4
    plots.plt.close(fig)


def test_lr_sensitivity_labels_warmups_only_where_searched_and_says_when_an_arm_never_succeeded(styled, tmp_path):
    from bench.analysis import cells, tuning_plots

    style_sweep(tmp_path / "a")
    study = results.load_study([tmp_path / "a"])
    table_cells, runs = cells.cells(study), cells.sweep_runs(study)
    with style.plt.rc_context(style.STYLE):
        fig = tuning_plots.plot_lr_sensitivity(runs, table_cells, cells.arms(runs))
    texts = [t for ax in fig.axes for t in ax.texts]
    assert not [t for t in texts if t.get_gid() == "warmup-label"]  # one warm-up for every trial: nothing to say
    [lion] = [ax for ax in fig.axes if ax.get_title() == "Lion"]
    [note] = [t for t in lion.texts if t.get_gid() == "no-successful-trial"]
    assert note.get_text().startswith("no successful trial")
    assert "Lion: no successful trial" in fig.bench_caption
    plots.plt.close(fig)
    for trial, warmup in enumerate((0.5, 2.0)):  # a sweep that searched the warm-up: each point says its own
        make_run(
            tmp_path / "b",
            f"s-lars-b64-t{trial:02d}",
            "lars",
            64,
            0,
            [50, 61],
            tags={"sweep": "s", "arm": "lars", "trial": trial, "study": 0, "role": "trial"},
            schedule={"warmup_epochs": warmup},
        )
    study = results.load_study([tmp_path / "b"])
    table_cells, runs = cells.cells(study), cells.sweep_runs(study)
    with style.plt.rc_context(style.STYLE):
        fig = tuning_plots.plot_lr_sensitivity(runs, table_cells, ["lars"])
    labels = sorted(t.get_text() for t in fig.axes[0].texts if t.get_gid() == "warmup-label")
    assert labels == ["0.5", "2"]
    plots.plt.close(fig)


def test_a_sweep_of_one_batch_draws_its_arms_side_by_side(tmp_path):
    """The demo's figure: one batch is no axis 'against batch size': the arms stand at 0, 1 with their names as the
    x tick labels, each rerun an open marker beside its arm's mean."""
    from bench.analysis import cells, tuning_plots

    for arm in ("lars", "vrgd_lars"):
        sweep_run(tmp_path, arm, 100, "trial", 0, [50, 61, 62])
        for seed in (1, 2, 3):
            sweep_run(tmp_path, arm, 100, "rerun", seed, [50, 61, 62 + seed])
    study = results.load_study([tmp_path])
    table_cells, order = cells.cells(study), cells.arms(cells.sweep_runs(study))
    with style.plt.rc_context(style.STYLE):
        for fig in (
            tuning_plots.plot_reruns_vs_batch(table_cells, order, "val_top1", "Top-1 (%)", "Tuned Top-1"),
            tuning_plots.plot_steps_to_result(table_cells, order),
        ):
            ax = fig.axes[0]
            fig.canvas.draw()
            assert ax.get_xscale() == "linear" and "against" not in ax.get_title()
            assert [t.get_text() for t in ax.get_xticklabels()] == ["LARS", "VRGD-LARS"]
            assert ax.get_xlabel() == "global batch 100"
            assert not any(f for f in _findings(fig).values())
            plots.plt.close(fig)
        fig = tuning_plots.plot_reruns_vs_batch(table_cells, order, "val_top1", "Top-1 (%)", "Tuned Top-1")
        reruns = [line for line in fig.axes[0].lines if line.get_gid() == "rerun-points"]
        assert [len(line.get_xdata()) for line in reruns] == [3, 3]
        # the legend's "one rerun" shows the open shapes the reruns are drawn in: each arm's, not a circle for all
        fig.canvas.draw()
        shown = {
            m.get_marker() for m in fig.legends[0].findobj(matplotlib.lines.Line2D) if m.get_markerfacecolor() == "none"
        }
        assert shown == {line.get_marker() for line in reruns} and len(shown) == 2
        plots.plt.close(fig)


def test_a_profile_of_two_batches_says_its_fractions_and_draws_every_arm_solid(tmp_path):
    from bench.analysis import cells, tuning_plots

    style_sweep(tmp_path)
    table_cells = cells.cells(results.load_study([tmp_path]))
    two = table_cells[table_cells["global_batch"].isin([64, 128])]
    with style.plt.rc_context(style.STYLE):
        fig = tuning_plots.plot_performance_profile(two, ["lars", "vrgd_lars", "lion"])
    ax = fig.axes[0]
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1/2", "2/2"]
    assert all(line.get_linestyle() == "-" and line.get_marker() not in NO_MARKER for line in ax.lines)
    assert min(line.get_linewidth() for line in ax.lines) >= 1.0  # no faint line
    assert "draws none of the seeds' noise" in fig.bench_caption  # a best arm here is not a resolved one
    plots.plt.close(fig)


def test_diagnostics_leave_out_the_warmup_flag_and_name_adascale_only_where_it_ran(tmp_path):
    make_run(
        tmp_path,
        "lars",
        "lars",
        100,
        0,
        [50, 70],
        events=[{"step": s, "lr": 0.1, "loss": 2.0, "trust_median": 1e-3, "similarity": 0.5} for s in range(10)],
        schedule={"warmup_epochs": 0.5},
    )
    written = plots.plot_all(results.load_study([tmp_path]), tmp_path / "plots")
    names = {p.name for p in written}
    assert {"diagnostics.png", "batch_scaling.png"} <= names
    captions = {p.name: p.read_text() for p in (tmp_path / "plots").glob("*.caption.txt")}
    assert "after_warmup" not in " ".join(captions.values())
    assert "AdaScale" not in captions["batch_scaling.caption.txt"] + captions["diagnostics.caption.txt"]
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    events = {g["group"]: plots.run_events(study, g) for _, g in groups.iterrows()}
    keys = [k for k in next(iter(events.values())).columns if k not in plots.NOT_DIAGNOSTICS]
    assert "after_warmup" not in keys and "trust_median" in keys


def test_the_perfect_scaling_line_says_whose_point_it_starts_from(tmp_path):
    make_run(tmp_path, "lars-100", "lars", 100, 0, [50, 70])
    make_run(tmp_path, "lars-400", "lars", 400, 0, [61, 70])
    make_run(tmp_path, "sgd-100", "sgd", 100, 0, [61, 70])  # the fewest steps at 100: SGD's
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_steps_to_target(groups, order, "t", "")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "perfect scaling (∝ 1/batch) from SGD at 100" in labels
    plots.plt.close(fig)


def test_the_projection_figure_keeps_the_style(tmp_path, monkeypatch):
    """bench project --plot: every batch's point inside the axes (its first point, below the labelled powers of
    two, was cut off), a one-line title, the inputs in the caption file, not under the axes."""
    from bench.cli import main

    found, original = {}, style.save
    monkeypatch.setattr(style, "save", lambda fig, out, stem: found.update(_findings(fig)) or original(fig, out, stem))
    assert main(["project", "--reference", "--cluster", "dgx-h100", "--plot", str(tmp_path)]) == 0
    assert found and {kind: f for kind, f in found.items() if f} == {}
    assert "MLPerf's reference convergence points" in (tmp_path / "time-to-train.caption.txt").read_text()


def test_a_one_run_figure_says_so_and_its_top1_axis_is_never_narrower_than_the_binomial_error(tmp_path):
    """Issue 82, item 3: one run a point draws no bars and its caption says so (not 'mean ± 1 sample std' with
    n = 1); a Top-1 axis whose points differ by an image or two still spans 2 binomial standard errors either
    side of each point (one image of 10,000 filled the own-data figure), and the caption says why."""
    make_run(tmp_path, "lars-100", "lars", 100, 0, [50, 98.98], val_size=10_000)
    make_run(tmp_path, "sgd-100", "sgd", 100, 0, [50, 98.99], val_size=10_000)
    make_run(tmp_path, "lars-400", "lars", 400, 0, [50, 98.985], val_size=10_000)
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    assert set(groups["val_images"]) == {10_000}
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_vs_batch(groups, order, "val_top1", "final val Top-1 (%)", "t")
    lo, hi = fig.axes[0].get_ylim()
    se = lambda top1: 100 * math.sqrt(top1 / 100 * (1 - top1 / 100) / 10_000)  # noqa: E731 (about 0.1 pp)
    assert lo <= 98.98 - 2 * se(98.98) + 1e-9 and hi >= 98.99 + 2 * se(98.99) - 1e-9
    assert "One run a point (no bars" in fig.bench_caption and "± 1 sample std" not in fig.bench_caption
    assert "2 binomial standard errors" in fig.bench_caption
    plots.plt.close(fig)
    # points far apart need no floor: the axis is the data's, and the caption does not claim one
    ax = style.plt.figure().add_subplot()
    ax.plot([0, 1], [60, 90])
    before = ax.get_ylim()
    assert not style.binomial_floor(ax, [60, 90], [10_000, 10_000]) and ax.get_ylim() == before
    assert plots.spread_text(pd.Series([1, 3])).endswith("n beside each point)")
    assert plots.spread_text(pd.Series([3, 3])) == "The mean over seeds ± 1 sample std"


def test_no_point_of_a_log_steps_axis_lies_past_its_last_labelled_tick():
    """Issue 82, item 3: the own-data steps figure put LARS's 118 above its top tick (100)."""
    fig, ax = style.plt.subplots()
    ax.plot([1, 2], [30, 118], "o")
    style.plain_log_y(ax)
    style.readable_top(ax, [30, 118])
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
    assert max(ticks) >= 118 and min(ticks) <= 30
    style.plt.close(fig)


def test_each_arms_critical_band_has_its_own_swatch_in_its_colour():
    """Issue 82, item 3: two arms' critical-batch bands were near-identical pale shades with one grey legend swatch;
    each now has a swatch in its arm's colour, named."""
    from matplotlib.colors import to_rgb

    from bench.analysis import tuning_plots

    order = ["lars", "nadamw"]
    handles = tuning_plots._critical_handles({"band", "band-lars", "band-nadamw"}, pd.DataFrame(), order)
    swatches = {h.get_label(): h.get_facecolor()[:3] for h in handles}
    assert set(swatches) == {f"{tuning_plots.CRITICAL_BAND}: LARS", f"{tuning_plots.CRITICAL_BAND}: NAdamW"}
    for arm, shown in (("lars", "LARS"), ("nadamw", "NAdamW")):
        assert swatches[f"{tuning_plots.CRITICAL_BAND}: {shown}"] == pytest.approx(to_rgb(style.color(arm, order)))
    assert to_rgb(style.color("lars", order)) != to_rgb(style.color("nadamw", order))  # two swatches, two colours


def test_a_tree_whose_batch_moves_gets_the_schedules_table(tmp_path):
    by_images = {"min_batch": 100, "max_batch": 200, "by_images": {500: 200}}
    for seed in (1, 2):
        make_run(tmp_path, "schedule", "lars", 100, seed, [50, 61], adaptive_batch=by_images)
        make_run(tmp_path, "constant", "lars", 200, seed, [50, 55, 61])
    written = commands.regenerate(tmp_path, None)
    assert tmp_path / "schedules.md" in written and tmp_path / "schedules.csv" in written
    assert "constant against schedule" in (tmp_path / "schedules.md").read_text()
