"""Crashes, preemption, locks, divergence: runs resume exactly and results stay intact."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from tests.conftest import run_cli, write_recipe

RECIPE = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 24, crop_scale_min: 0.35, workers: 0, eval_batch: 64}
global_batch: 32
micro_batch: 16
optimizer: {name: sgd, lr: 0.2, momentum: 0.9}
schedule: {warmup_epochs: 1}
epochs: 6
eval: {every_epochs: 2}
checkpoint: {every_steps: 4}
target_top1: 40
"""  # 30 steps, evaluations after steps 10, 20, 30, checkpoints every 4 steps and at 30


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, tiny_dataset):
    return write_recipe(tmp_path_factory.mktemp("rel") / "rel.yaml", RECIPE.replace("DATA", str(tiny_dataset)))


def only_run(results):
    [run] = list((results / "rel").iterdir())
    return run


def outcome(run):
    """What must match bit for bit: every metric but wall-clock time, and the final parameters."""
    metrics = pd.read_csv(run / "metrics.csv").drop(columns=["train_time_s"])
    final = torch.load(sorted(run.glob("ckpt-*.pt"))[-1], weights_only=False)
    return metrics, final["model"], json.loads((run / "meta.json").read_text())


@pytest.fixture(scope="module")
def reference(recipe, tmp_path_factory):
    results = tmp_path_factory.mktemp("ref")
    done = run_cli("run", str(recipe), "--out", str(results), "--no-progress")
    assert done.returncode == 0, done.stderr
    return outcome(only_run(results))


def assert_same(got, want):
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1].keys() == want[1].keys()
    for name, tensor in want[1].items():
        assert torch.equal(got[1][name], tensor), name
    assert got[2]["status"] == "completed"


@pytest.mark.parametrize("point", ["step:7", "eval:20", "checkpoint:8", "step:29"])
def test_sigkill_then_resume_gives_bitwise_the_same_run(recipe, reference, tmp_path, point):
    crashed = subprocess.run([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path),
                              "--no-progress"], env=dict(os.environ, BENCH_CRASH_AT=point), capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    run = only_run(tmp_path)
    assert json.loads((run / "meta.json").read_text())["status"] == "running"  # killed: no chance to say more
    if (run / "metrics.csv").exists():  # never half-written: every row complete (no holdout: those cells empty)
        metrics = pd.read_csv(run / "metrics.csv")
        assert metrics[["holdout_top1", "holdout_loss"]].isna().all().all()
        assert not metrics.drop(columns=["holdout_top1", "holdout_loss"]).isna().any().any()
    resumed = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {run}" in resumed.stdout
    assert only_run(tmp_path) == run  # the same run directory, continued
    assert_same(outcome(run), reference)
    assert not list(run.glob(".ckpt-*.tmp")) and len(list(run.glob("ckpt-*.pt"))) == 2  # keep: 2


def test_sigterm_checkpoints_marks_preempted_and_resumes(recipe, reference, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path),
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = None
    for _ in range(600):
        runs = list((tmp_path / "rel").glob("*/events.jsonl"))
        if runs and len(runs[0].read_text().splitlines()) >= 5:
            events = runs[0]
            break
        time.sleep(0.1)
    assert events is not None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run = only_run(tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "preempted" and "resume" in meta["reason"] and "resumed" not in meta
    step = int(sorted(run.glob("ckpt-*.pt"))[-1].stem.split("-")[1])
    assert 5 <= step < 30
    resumed = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0 and f"at step {step}" in resumed.stdout
    assert_same(outcome(run), reference)
    assert json.loads((run / "meta.json").read_text())["resumed"][0]["step"] == step


def test_restart_starts_a_new_run_and_a_running_run_is_locked(recipe, tmp_path):
    crashed = subprocess.run([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path),
                              "--no-progress"], env=dict(os.environ, BENCH_CRASH_AT="step:5"), capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    run = only_run(tmp_path)
    with open(run / ".lock", "w") as held:  # as if another process were running it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        locked = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert locked.returncode == 2 and "in progress in another process" in locked.stderr
    assert "Traceback" not in locked.stderr
    fresh = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress", "--restart",
                    "--set", "epochs=1")
    assert fresh.returncode == 0, fresh.stderr
    assert len(list((tmp_path / "rel").iterdir())) == 2


def test_corrupt_checkpoint_is_a_clear_error_and_nothing_is_lost(recipe, tmp_path):
    crashed = subprocess.run([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path),
                              "--no-progress"], env=dict(os.environ, BENCH_CRASH_AT="step:9"), capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    run = only_run(tmp_path)
    newest = sorted(run.glob("ckpt-*.pt"))[-1]
    newest.write_bytes(b"not a checkpoint")
    done = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert done.returncode == 2 and "unreadable checkpoint" in done.stderr and str(newest) in done.stderr
    assert "Traceback" not in done.stderr
    assert newest.read_bytes() == b"not a checkpoint" and len(list(run.glob("ckpt-*.pt"))) == 2


def test_divergence_is_a_result(recipe, tmp_path):
    done = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress", "--set", "optimizer.lr=1.0e+12",
                   "--set", "schedule.warmup_epochs=0")
    assert done.returncode == 0, done.stderr
    meta = json.loads((only_run(tmp_path) / "meta.json").read_text())
    assert meta["status"] == "diverged" and ("non-finite" in meta["reason"] or "chance" in meta["reason"])
    report = run_cli("report", str(tmp_path))
    assert report.returncode == 0 and "diverged" in report.stdout


def test_unwritable_results_directory_fails_before_training(recipe, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = run_cli("run", str(recipe), "--out", str(blocker / "results"), "--no-progress")
    assert done.returncode == 2 and "cannot create the results directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_torchrun_restarts_a_lost_worker_and_the_run_resumes(recipe, tmp_path):
    """Rank 1 of 2 is killed once after step 7; torchrun restarts both workers, which
    resume from the step-4 checkpoint and finish all 30 steps."""
    env = dict(os.environ, BENCH_CRASH_AT="step:7", BENCH_CRASH_RANK="1", BENCH_CRASH_ONCE=str(tmp_path / "crashed"),
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path / "results"),
                           "--no-progress", "--nproc", "2", "--max-restarts", "1", "--set", "eval.stop_at_chance=0"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "crashed").exists()  # the worker really was killed
    run = only_run(tmp_path / "results")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["world_size"] == 2
    assert [r["step"] for r in meta["resumed"]] == [4]
    metrics = pd.read_csv(run / "metrics.csv")
    assert metrics["step"].tolist() == [10, 20, 30]
    steps = [json.loads(line)["step"] for line in (run / "events.jsonl").read_text().splitlines()]
    assert steps == list(range(30))


@pytest.mark.parametrize("args,words", [
    (["run", "RECIPE", "--nproc", "0"], ["--nproc", "expected an integer >= 1"]),
    (["submit", "RECIPE", "--nodes", "two", "--gpus-per-node", "8"], ["--nodes", "expected an integer >= 1"]),
    (["run"], ["RECIPE"]),
    (["frobnicate"], ["invalid choice"]),
    (["run", "RECIPE", "--run-dir", "NOWHERE"], ["not a run directory"]),
    (["table", "no-such-table", "."], ["no-such-table"]),
])
def test_bad_command_line_is_exit_2_without_traceback(recipe, tmp_path, args, words):
    args = [str(recipe) if a == "RECIPE" else str(tmp_path / "nowhere") if a == "NOWHERE" else a for a in args]
    done = run_cli(*args)
    assert done.returncode == 2 and all(w in done.stderr for w in words), done.stderr
    assert "Traceback" not in done.stderr


def test_run_dir_of_another_recipe_or_a_foreign_checkpoint_is_refused(recipe, tmp_path):
    crashed = subprocess.run([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path),
                              "--no-progress"], env=dict(os.environ, BENCH_CRASH_AT="step:5"), capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    run = only_run(tmp_path)
    other = run_cli("run", str(recipe), "--set", "epochs=2", "--run-dir", str(run))
    assert other.returncode == 2 and "different recipe" in other.stderr
    torch.save({"weights": torch.zeros(1)}, sorted(run.glob("ckpt-*.pt"))[-1])
    foreign = run_cli("run", str(recipe), "--run-dir", str(run))
    assert foreign.returncode == 2 and "not a bench checkpoint" in foreign.stderr
    assert "Traceback" not in other.stderr + foreign.stderr


def test_a_torn_events_line_is_cut_back_on_resume(recipe, reference, tmp_path):
    """Power lost while appending to events.jsonl: the resume cuts the log back to its last whole line and the
    checkpoint's step, and the finished run is the uninterrupted one, with one event per step."""
    crashed = subprocess.run([sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path),
                              "--no-progress"], env=dict(os.environ, BENCH_CRASH_AT="step:7"), capture_output=True)
    assert crashed.returncode == -signal.SIGKILL
    run = only_run(tmp_path)
    with open(run / "events.jsonl", "a") as f:
        f.write('{"step": 7, "lr": 0.1, "lo')
    resumed = run_cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "a cut-off line after 6 whole ones" in resumed.stderr  # steps 0-5 logged before the kill
    assert_same(outcome(run), reference)
    steps = [json.loads(line)["step"] for line in (run / "events.jsonl").read_text().splitlines()]
    assert steps == list(range(30))
