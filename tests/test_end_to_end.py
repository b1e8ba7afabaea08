"""A tiny `bench run` through the command line, then `bench report` on it."""

import json

import pandas as pd
import pytest
import yaml

from bench.rundir import METRIC_COLUMNS, event_lines
from tests.conftest import cli, run_cli, write_recipe

pytestmark = pytest.mark.slow  # trains a run through the command line

TINY = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 32, crop_scale_min: 0.35, workers: 1, eval_batch: 64}
global_batch: 32
micro_batch: 16
optimizer: {name: sgd, lr: 0.2, momentum: 0.9}
schedule: {warmup_epochs: 1, decay: cosine}
epochs: 8
label_smoothing: 0.1
weight_decay: 5.0e-5
eval: {every_epochs: 2}
target_top1: 40
"""


def test_run_writes_the_run_directory_and_learns(tmp_path, tiny_dataset):
    recipe = write_recipe(tmp_path / "tiny.yaml", TINY.replace("DATA", str(tiny_dataset)))
    results = tmp_path / "results"
    done = run_cli("run", str(recipe), "--out", str(results), "--no-progress")  # in a process of its own, as a user
    assert done.returncode == 0, done.stderr
    [run] = list((results / "tiny").iterdir())

    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["world_size"] == 1
    assert meta["plan"] == {"batch": 32, "world_size": 1, "accum_steps": 2, "micro_batch": 16, "gsnr_groups": 2}
    assert meta["total_steps"] == 40 and meta["versions"]["torch"] and meta["end_time"]

    resolved = yaml.safe_load((run / "recipe.yaml").read_text())
    assert resolved["name"] == "tiny" and resolved["schedule"]["end_lr"] == 0.0

    metrics = pd.read_csv(run / "metrics.csv")
    assert tuple(metrics.columns) == METRIC_COLUMNS
    assert metrics["epoch"].tolist() == [2.0, 4.0, 6.0, 8.0] and metrics["step"].tolist() == [10, 20, 30, 40]
    assert metrics["images_seen"].iloc[-1] == 40 * 32
    assert metrics["val_top1"].iloc[-1] > 40  # chance is 25% with 4 classes
    assert (metrics["train_time_s"].diff().dropna() > 0).all()

    events = [json.loads(line) for line in event_lines(run)]
    assert len(events) == 40 and events[0]["step"] == 0 and events[-1]["lr"] == 0.0

    # The run's summary is printed at the end and by `bench report`.
    assert "val_top1" in done.stdout and "gap" in done.stdout
    report = cli("report", str(results))
    assert report.returncode == 0 and "tiny" in report.stdout and "completed" in report.stdout


def test_report_on_a_missing_directory_is_exit_2(tmp_path):
    done = cli("report", str(tmp_path / "nothing"))
    assert done.returncode == 2 and "no such run or results directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_finer_grid_near_the_target_a_cheap_curve_and_a_stop_at_the_target(tmp_path, tiny_dataset):
    """eval.near_target_every_epochs refines the grid while the run is just below the target; eval.curve_images
    measures the curve on a fixed subset (train-eval and holdout skipped) and every image once the subset reaches
    the target; eval.stop_at_target ends the run there, completed, and says so in meta.json."""
    text = TINY.replace("DATA", str(tiny_dataset)).replace(
        "eval: {every_epochs: 2}",
        "eval: {every_epochs: 2, near_target_every_epochs: 0.4, near_target_margin: 100, "
        "curve_images: 8, stop_at_target: true, stop_at_chance: 0}",
    )  # stop_at_chance off: on an 8-image subset, 1 of 8 right is "at chance" (it stopped the run on 1 thread)
    recipe = write_recipe(tmp_path / "tiny.yaml", text)
    results = tmp_path / "results"
    done = cli("run", str(recipe), "--out", str(results), "--no-progress")
    assert done.returncode == 0, done.stderr
    [run] = list((results / "tiny").iterdir())
    meta = json.loads((run / "meta.json").read_text())
    metrics = pd.read_csv(run / "metrics.csv")
    assert meta["status"] == "completed" and meta["stopped_at_target"] and "stopped at the target" in meta["reason"]
    assert metrics["step"].iloc[-1] < 40 and metrics["val_top1"].iloc[-1] >= 40  # stopped before the budget
    assert metrics["epoch"].iloc[0] == 2.0 and abs(metrics["epoch"].iloc[1] - 2.4) < 1e-9  # then the finer grid
    subset = metrics[metrics["val_images"] == 8]
    assert len(subset) and (subset["val_top1"] < 40).all() and subset["train_eval_top1"].isna().all()
    first_hit = metrics[metrics["val_top1"] >= 40].iloc[0]
    assert first_hit["val_images"] == 40 and first_hit["train_eval_top1"] == first_hit["train_eval_top1"]
