"""A tiny `bench run` through the command line, then `bench report` on it."""

import json

import pandas as pd
import yaml

from bench.engine.rundir import METRIC_COLUMNS
from tests.conftest import run_cli, write_recipe

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
    done = run_cli("run", str(recipe), "--out", str(results), "--no-progress")
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

    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert len(events) == 40 and events[0]["step"] == 0 and events[-1]["lr"] == 0.0

    # The run's summary is printed at the end and by `bench report`.
    assert "val_top1" in done.stdout and "gap" in done.stdout
    report = run_cli("report", str(results))
    assert report.returncode == 0 and "tiny" in report.stdout and "completed" in report.stdout


def test_report_on_a_missing_directory_is_exit_2(tmp_path):
    done = run_cli("report", str(tmp_path / "nothing"))
    assert done.returncode == 2 and "no such run or results directory" in done.stderr
    assert "Traceback" not in done.stderr
