"""Live TensorBoard curves (logging.tensorboard, bench run --tensorboard) and bench export tensorboard: the event
files read back with TensorBoard's own EventAccumulator, the tags and step counts, a resumed run without duplicate
points, one sentence without the package."""

import json
import signal

import pandas as pd
import pytest

from bench.analysis import results
from bench.cli import main
from tests.conftest import cli, killed_at, write_recipe
from tests.helpers import TENSORBOARD_RECIPE, only_run

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from bench.rundir import event_lines


@pytest.fixture
def recipe(tmp_path, tiny_dataset):
    return write_recipe(tmp_path / "tb.yaml", TENSORBOARD_RECIPE.replace("DATA", str(tiny_dataset)))


def scalars(folder) -> dict:
    """tag -> [(step, value)] as TensorBoard shows them."""
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def raw_points(folder) -> list[tuple[str, int]]:
    """(tag, step) of every scalar in the event files as written, for any reader that does not purge."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    points = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            points += [(v.tag, event.step) for v in event.summary.value if v.HasField("tensor") or v.simple_value]
    return points


def assert_curves_match_the_logs(run):
    """Every events.jsonl scalar once per step and every metrics.csv column once per evaluation, equal to the
    logs (TensorBoard stores float32)."""
    events = [json.loads(line) for line in event_lines(run)]
    metrics = pd.read_csv(run / "metrics.csv")
    folder = run / "tensorboard"
    assert not [p for p in folder.iterdir() if p.is_dir()]  # one TensorBoard run per run: the split is in the tags
    curves = scalars(folder)
    assert {"train/lr", "train/loss", "train/batch", "train/trust_median"} <= set(curves)
    for key in ("lr", "loss", "trust_median"):
        assert curves[f"train/{key}"] == [(e["step"] + 1, pytest.approx(e[key], rel=1e-6)) for e in events]
    for split, axis in (("eval", "step"), ("eval_by_images", "images_seen")):
        assert {f"{split}/{k}" for k in ("val_top1", "train_eval_top1", "val_loss", "epoch", "lr")} <= set(curves)
        assert curves[f"{split}/val_top1"] == [
            (int(a), pytest.approx(v, rel=1e-6)) for a, v in zip(metrics[axis], metrics["val_top1"])
        ]
    raw = raw_points(folder)
    assert len(raw) == len(set(raw))  # each point once in the files themselves, not only after a purge


def test_train_and_eval_curves_share_one_step_axis(tmp_path):
    """The steps done: the training loss of the 5th step (events.jsonl step 4) and the evaluation after it (metrics.csv
    step 5) are both at x = 5, as a reader lining up the two panels expects."""
    from bench.engine.tensorboard import Curves

    curves = Curves(tmp_path / "tb", "name: x\n")
    for step in range(5):
        curves.event({"step": step, "loss": 2.0 - step / 10})
    curves.metrics({"step": 5, "images_seen": 160, "val_top1": 40.0})
    curves.close()
    points = scalars(tmp_path / "tb")
    assert [s for s, _ in points["train/loss"]] == [1, 2, 3, 4, 5]
    assert points["train/loss"][-1] == (5, pytest.approx(1.6)) and points["eval/val_top1"] == [(5, 40.0)]


def test_a_run_writes_live_curves_with_every_logged_scalar(recipe, tmp_path):
    assert main(["run", str(recipe), "--out", str(tmp_path), "--no-progress", "--tensorboard"]) == 0
    run = only_run(tmp_path)
    assert_curves_match_the_logs(run)
    assert len(scalars(run / "tensorboard")["train/loss"]) == 15
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert "recipe/text_summary" in acc.Tags()["tensors"]


@pytest.mark.slow
def test_a_killed_run_resumes_its_curves_without_duplicate_points(recipe, tmp_path):
    """Killed after step 7 (checkpoint 4, evaluation 5 kept): the resumed curves hold each step once, equal
    to the logs the resumed run left."""
    assert killed_at("step:7", "run", str(recipe), "--out", str(tmp_path), "--no-progress", "--tensorboard") == -9
    resumed = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress", "--tensorboard")
    assert resumed.returncode == 0, resumed.stderr
    run = only_run(tmp_path)
    assert f"resuming {run} at step 4" in resumed.stdout
    assert_curves_match_the_logs(run)


@pytest.mark.slow
def test_logging_changes_no_number_seeds_and_resume_ignore_it(recipe, tmp_path):
    assert killed_at("step:5", "run", str(recipe), "--out", str(tmp_path), "--no-progress") == -signal.SIGKILL
    resumed = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress", "--tensorboard")
    assert resumed.returncode == 0 and "resuming" in resumed.stdout  # the same run, now with curves
    other = write_recipe(tmp_path / "tb-s1.yaml", recipe.read_text() + "seed: 1\nname: tb-s1\n")
    assert main(["run", str(other), "--out", str(tmp_path / "more"), "--no-progress"]) == 0
    [group] = results.aggregate(results.load([tmp_path])).to_dict("records")
    assert group["n"] == 2


def test_export_writes_a_folder_per_run_named_by_arm_batch_role_and_seed(recipe, tmp_path, capsys):
    assert main(["run", str(recipe), "--out", str(tmp_path / "res"), "--no-progress"]) == 0
    run = only_run(tmp_path / "res")
    assert not (run / "tensorboard").exists()
    capsys.readouterr()
    for _ in range(2):  # exporting twice into one folder rewrites it: no point twice
        assert main(["export", "tensorboard", str(tmp_path / "res"), "--out", str(tmp_path / "tb")]) == 0
    folder = tmp_path / "tb" / "lars" / "b32" / "run" / "seed0" / f"tb-{run.name}"
    assert capsys.readouterr().out.split() == [str(folder)] * 2
    copy = tmp_path / "copy"  # the same layout as a live run's folder, for the shared check
    copy.mkdir()
    folder.rename(copy / "tensorboard")
    for name in ("events.jsonl.gz", "metrics.csv"):  # a finished run's events are packed
        (copy / name).write_bytes((run / name).read_bytes())
    assert_curves_match_the_logs(copy)


def test_a_sweep_writes_hparams_and_exports_by_arm_role_and_trial(tmp_path, tiny_dataset):
    from tests.helpers import BASE, SWEEP

    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)) + "logging: {tensorboard: true}\n")
    sweep = write_recipe(tmp_path / "tiny.yaml", SWEEP)
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "res"), "--only", "sgd-b32-t01", "--allow-dirty"]) == 0
    [run] = [p for p in (tmp_path / "res" / "tiny-sgd-b32-t01").iterdir() if p.is_dir()]
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert "_hparams_/session_start_info" in acc.summary_metadata and "hparams/val_top1" in acc.Tags()["scalars"]
    from tensorboard.plugins.hparams import plugin_data_pb2

    data = plugin_data_pb2.HParamsPluginData.FromString(
        acc.summary_metadata["_hparams_/session_start_info"].plugin_data.content
    )
    params = dict(data.session_start_info.hparams)
    assert params["tags.arm"].string_value == "sgd" and params["global_batch"].number_value == 32
    assert params["tags.role"].string_value == "trial" and params["optimizer.lr"].number_value > 0
    assert main(["export", "tensorboard", str(tmp_path / "res"), "--out", str(tmp_path / "tb")]) == 0
    assert [p.relative_to(tmp_path / "tb").parts[:4] for p in (tmp_path / "tb").glob("*/*/*/*/*")] == [
        ("sgd", "b32", "trial-t01", "seed0")
    ]


def test_without_the_package_the_key_is_one_sentence(recipe, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    for args in (  # --tensorboard is the key set on the command line, and the error says so as for --set
        ["validate", str(recipe), "--set", "logging.tensorboard=true"],
        ["run", str(recipe), "--out", str(tmp_path / "out"), "--tensorboard"],
    ):
        assert main(args) == 2
        assert capsys.readouterr().err == (
            f"bench: error: {recipe} with --set logging.tensorboard=true: key 'logging.tensorboard' asks for the tensorboard package, which is not "
            "installed; pip install -e '.[tensorboard]' (./setup.sh installs it)\n"
        )
    assert not (tmp_path / "out").exists()
