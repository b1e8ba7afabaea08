"""Plots are written and non-empty, regenerate() writes a results tree's outputs, and analysis imports no torch."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from bench.analysis import commands, plots, results
from tests.test_analysis_helpers import IMAGENET, IMAGENET_SIZES, make_run

PNG = b"\x89PNG\r\n\x1a\n"


def small_study(root):
    """LARS and VRGD-LARS at two batches, two seeds; VRGD logs GSNR statistics, LARS trust ratios."""
    for batch in (100, 500):
        for seed in (0, 1):
            gsnr = [{"step": s, "lr": 0.1, "loss": 2.0, "gsnr_clip_frac": 0.2 + s / 100, "gsnr_r_mean": 1.5}
                    for s in range(10_000 // batch)]
            trust = [{"step": s, "lr": 0.1, "loss": 2.0, "trust_min": 1e-4, "trust_median": 1e-3, "trust_max": 0.02}
                     for s in range(10_000 // batch)]
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
    assert by_stem == {s: {".png", ".svg"} for s in
                       ("curves", "top1_vs_batch", "gap_vs_batch", "steps_to_target", "gsnr", "diagnostics")}


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
    make_run(tmp_path, "in-lars", "lars", 4096, 0, [70, 76.2], target=75.9, data=IMAGENET, model="resnet50",
             **IMAGENET_SIZES)
    study = results.load_study([tmp_path])
    prefixes = plots.prefixes(study)
    assert sorted(p.split("-")[0] for p in prefixes.values()) == ["imagenet", "setting"]
    assert plots.prefixes(results.load_study([tmp_path / "toy"])) == {study.runs["setting"].iloc[1]: ""}


NO_TORCH = """
import sys, json
from pathlib import Path
from bench.analysis import commands, paper, plots, render, report, results, tables
commands.regenerate(Path(sys.argv[1]), None)
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))))
"""


def test_analysis_imports_no_torch(tmp_path):
    make_run(tmp_path / "runs", "toy", "vrgd_lars", 100, 0, [50, 70],
             events=[{"step": 0, "lr": 0.1, "loss": 2.0, "gsnr_clip_frac": 0.3}])
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path / "runs")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
