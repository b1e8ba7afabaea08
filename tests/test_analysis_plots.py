"""Plots are written and non-empty, regenerate() writes a results tree's outputs, and analysis imports no torch."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from bench.analysis import commands, plots, results
from tests.helpers import IMAGENET, IMAGENET_SIZES, make_run

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


def test_misses_are_drawn_in_a_band_outside_the_axis(tmp_path):
    """Steps to target: a batch whose runs never reached it is an 'x' above the axis (axes coordinates, y > 1),
    not a point on the data scale, with the legend entry 'did not reach the target'."""
    make_run(tmp_path, "lars-100", "lars", 100, 0, [50, 70])
    make_run(tmp_path, "lars-400", "lars", 400, 0, [40, 55])  # never reaches 60
    make_run(tmp_path, "sgd-100", "sgd", 100, 0, [50, 70])
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    with plots.plt.rc_context(plots.STYLE):
        fig = plots.plot_steps_to_target(groups, order, "t", "")
    ax = fig.axes[0]
    (band,) = _misses(ax)
    assert band.get_transform() is not ax.transData  # placed in axes coordinates
    assert list(band.get_ydata()) == [1.05]
    assert band.get_xdata()[0] == pytest.approx(400, rel=0.1)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
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
    with plots.plt.rc_context(plots.STYLE):
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
    with plots.plt.rc_context(plots.STYLE):
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
            "n_trials": [4] * 4,
            "n_reruns": [5] * 4,
            "problem_label": ["Fashion-MNIST"] * 4,
            "model_label": ["resnet10t"] * 4,
            "model_shape": ["resnet10t"] * 4,
            "planned_epochs": [2.0] * 4,
        }
    )
    with plots.plt.rc_context(plots.STYLE):
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
        drawn = plots.colors(tuple(order))
        for a, b in itertools.combinations(order, 2):
            assert np.linalg.norm(plots._ab(drawn[a]) - plots._ab(drawn[b])) >= plots.DISTINCT_HUE, (a, b)
    assert plots.color("lars", ["lars", "lion"]) == catalog.COLORS["lars"]
    assert plots.color("lion", ["lars", "lion"]) != catalog.COLORS["lion"]
    assert plots.color("vrgd_lars", ["lars", "vrgd_lars"]) == catalog.COLORS["vrgd_lars"]
