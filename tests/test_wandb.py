"""Weights & Biases curves (logging.wandb), offline: the run's .wandb files read back record by record, the
config, tags and scalars equal to the logs, a killed and resumed run without a point twice, one sentence
without the package."""

import json
import os
import signal
import struct
import subprocess

import pandas as pd
import pytest

from bench.cli import main
from bench.engine.wandb_curves import run_id
from tests.conftest import bench_argv, cli, write_recipe
from tests.helpers import TENSORBOARD_RECIPE, only_run

pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402

from bench.rundir import event_lines

WANDB = "logging: {wandb: {project: bench-test}}\n"


@pytest.fixture(autouse=True)
def own_wandb_service():
    """A run started in this process leaves WANDB_SERVICE set, and a child would share that service, where a
    killed child's run id stays in use; each bench process starts its own, as from a shell."""
    os.environ.pop("WANDB_SERVICE", None)
    yield
    os.environ.pop("WANDB_SERVICE", None)


@pytest.fixture
def recipe(tmp_path, tiny_dataset):
    return write_recipe(tmp_path / "tb.yaml", TENSORBOARD_RECIPE.replace("DATA", str(tiny_dataset)) + WANDB)


def records(path):
    """The protobuf records of a .wandb file: a 7-byte header (':W&B', magic 0xBEE1, version 0), then
    LevelDB's log format: 32 KiB blocks of chunks (crc32c, length, type: 1 whole, 2 first, 3 middle, 4 last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0)
    pos, record = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        record += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            out = wandb_internal_pb2.Record()
            out.ParseFromString(record)
            yield out
            record = b""


def history(run):
    """Every history row the run's offline W&B segments hold, in order, and the run records."""
    rows, runs = [], []
    for segment in sorted((run / "wandb").glob("offline-run-*"), key=lambda p: p.stat().st_mtime_ns):
        for record in records(next(segment.glob("run-*.wandb"))):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
            elif kind == "run":
                runs.append(record.run)
    return rows, runs


def assert_wandb_matches_the_logs(run):
    """Every events.jsonl scalar once per step and every metrics.csv column once per evaluation."""
    rows, runs = history(run)
    events = [json.loads(line) for line in event_lines(run)]
    metrics = pd.read_csv(run / "metrics.csv")
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == [e["step"] + 1 for e in events]  # steps done, as eval/*'s
    for key in ("lr", "loss", "trust_median"):
        assert [r[f"train/{key}"] for r in train] == [pytest.approx(e[key], rel=1e-12) for e in events]
    evals = [r for r in rows if "eval/val_top1" in r]
    for column in ("step", "images_seen"):
        assert [r[column] for r in evals] == list(metrics[column])
    assert [r["eval/val_top1"] for r in evals] == [pytest.approx(v) for v in metrics["val_top1"]]
    assert {r.run_id for r in runs} == {run_id(run)}
    return rows, runs


def test_a_run_writes_offline_wandb_curves_config_and_tags(recipe, tmp_path):
    assert main(["run", str(recipe), "--out", str(tmp_path), "--no-progress"]) == 0
    run = only_run(tmp_path)
    rows, [start] = assert_wandb_matches_the_logs(run)
    assert len([r for r in rows if "train/loss" in r]) == 15
    assert start.project == "bench-test" and list(start.tags) == ["lars", "b32", "seed0"]
    assert start.run_group.startswith("lars-b32-") and start.job_type == "run"  # a recipe's seeds share the group
    config = {item.key: json.loads(item.value_json) for item in start.config.update}
    assert config["optimizer"]["name"] == "lars" and config["global_batch"] == 32


@pytest.mark.slow
def test_a_preempted_run_resumes_the_same_wandb_run_without_a_point_twice(recipe, tmp_path):
    """SIGTERM after step 7 (events 0..7): the run checkpoints at step 8 and ends preempted; the first W&B segment holds steps
    1..8 done and the evaluation after step 5, the resumed one the rest; together each point once."""
    preempted = subprocess.run(
        bench_argv("run", str(recipe), "--out", str(tmp_path), "--no-progress"),
        env=dict(os.environ, BENCH_CRASH_AT="step:7", BENCH_CRASH_SIGNAL="TERM"),
        capture_output=True,
        text=True,
    )
    assert preempted.returncode == 0, preempted.stderr
    run = only_run(tmp_path)
    first, _ = history(run)
    assert [r["step"] for r in first if "train/loss" in r] == list(range(1, 9))
    assert [r["step"] for r in first if "eval/val_top1" in r] == [5]
    resumed = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {run} at step 8" in resumed.stdout
    _, runs = assert_wandb_matches_the_logs(run)
    assert len(runs) == 2  # two segments of one W&B run: `wandb sync` joins them
    assert list(runs[0].tags) == ["lars", "b32", "seed0"] and list(runs[1].tags) == ["lars", "b32", "seed0", "resumed"]
    assert runs[0].run_group == runs[1].run_group


@pytest.mark.slow
def test_a_killed_run_never_sends_a_point_twice(recipe, tmp_path):
    """SIGKILL after step 7 (checkpoint 4 kept): W&B's service may not have written what it got before the
    kill (a gap, never a duplicate); the resumed run sends from the checkpoint on, each point once."""
    crashed = subprocess.run(
        bench_argv("run", str(recipe), "--out", str(tmp_path), "--no-progress"),
        env=dict(os.environ, BENCH_CRASH_AT="step:7"),
        capture_output=True,
    )
    assert crashed.returncode == -signal.SIGKILL
    assert cli("run", str(recipe), "--out", str(tmp_path), "--no-progress").returncode == 0
    rows, _ = history(only_run(tmp_path))
    events = {json.loads(line)["step"]: json.loads(line) for line in event_lines(only_run(tmp_path))}
    steps = [r["step"] - 1 for r in rows if "train/loss" in r]  # W&B's x is the steps done: events' step + 1
    assert len(steps) == len(set(steps)) and set(range(4, 15)) <= set(steps) <= set(events)
    assert all(
        r["train/loss"] == pytest.approx(events[r["step"] - 1]["loss"], rel=1e-12) for r in rows if "train/loss" in r
    )


def test_without_the_package_the_key_is_one_sentence(recipe, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert main(["run", str(recipe), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"bench: error: {recipe}: key 'logging.wandb' asks for the wandb package, which is not installed; "
        "pip install -e '.[wandb]' (./setup.sh installs it)\n"
    )
    assert not (tmp_path / "out").exists()


def test_the_wandb_flag_sets_the_project(tmp_path, tiny_dataset):
    from bench.cli import parser
    from bench.commands.run import load_recipe, worker_args

    path = write_recipe(tmp_path / "r.yaml", TENSORBOARD_RECIPE.replace("DATA", str(tiny_dataset)))
    args = parser().parse_args(["run", str(path), "--wandb", "my-project"])
    r = load_recipe(args)
    assert r.logging.wandb.project == "my-project" and r.logging.wandb.mode == "offline"
    assert worker_args(args)[-2:] == ["--wandb", "my-project"]  # torchrun's workers get it too
