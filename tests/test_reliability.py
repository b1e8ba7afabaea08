"""Crashes, preemption, locks, divergence: runs resume exactly and results stay intact."""

import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
import torch

from bench.errors import UserError
from bench.rundir import RunDir, event_lines, read_events
from tests.conftest import bench_argv, cli, killed_at, write_recipe
from tests.helpers import RELIABILITY_RECIPE

pytestmark = pytest.mark.slow  # killed, signalled and resumed runs, each against a reference run


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, tiny_dataset):
    return write_recipe(
        tmp_path_factory.mktemp("rel") / "rel.yaml", RELIABILITY_RECIPE.replace("DATA", str(tiny_dataset))
    )


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
    done = cli("run", str(recipe), "--out", str(results), "--no-progress")
    assert done.returncode == 0, done.stderr
    return outcome(only_run(results))


def crash_at(point: str, *args: str) -> None:
    assert killed_at(point, *args) == -signal.SIGKILL


def assert_same(got, want):
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1].keys() == want[1].keys()
    for name, tensor in want[1].items():
        assert torch.equal(got[1][name], tensor), name
    assert got[2]["status"] == "completed"


@pytest.mark.parametrize("point", ["step:7", "eval:20", "checkpoint:8", "step:29"])
def test_sigkill_then_resume_gives_bitwise_the_same_run(recipe, reference, tmp_path, point):
    crash_at(point, "run", str(recipe), "--out", str(tmp_path), "--no-progress")
    run = only_run(tmp_path)
    assert json.loads((run / "meta.json").read_text())["status"] == "running"  # killed: no chance to say more
    if (run / "metrics.csv").exists():  # never half-written: every row complete (no holdout: those cells empty)
        metrics = pd.read_csv(run / "metrics.csv")
        assert metrics[["holdout_top1", "holdout_loss"]].isna().all().all()
        assert not metrics.drop(columns=["holdout_top1", "holdout_loss"]).isna().any().any()
    resumed = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {run}" in resumed.stdout
    assert only_run(tmp_path) == run  # the same run directory, continued
    assert_same(outcome(run), reference)
    assert not list(run.glob(".ckpt-*.tmp")) and len(list(run.glob("ckpt-*.pt"))) == 1  # finished: the final one


def test_sigterm_checkpoints_marks_preempted_and_resumes(recipe, reference, tmp_path):
    proc = subprocess.Popen(
        bench_argv("run", str(recipe), "--out", str(tmp_path), "--no-progress"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
    assert f"(checkpoint at step {step})" in meta["reason"] and f"checkpoint at step {step} in" in out  # one count
    assert meta["stopped_by"] == "SIGTERM"
    resumed = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0 and f"at step {step}" in resumed.stdout
    assert_same(outcome(run), reference)
    assert json.loads((run / "meta.json").read_text())["resumed"][0]["step"] == step
    assert json.loads((run / "meta.json").read_text())["stopped_by"] is None  # a resumed run forgets the stop


@pytest.mark.parametrize("to", ["the main thread", "a thread started before the run"])
def test_a_signal_the_run_did_not_answer_goes_to_the_caller_after_the_run(to):
    """A SIGTERM after the loop's last look at the flag (during the final evaluation, say) finds the run finishing:
    it reaches the handler from before the run when the run returns, so a sweep stops instead of starting its next
    trial (it used to be dropped). One the run answered is dropped: it stopped the run already."""
    from bench.engine.train import PreemptionFlag

    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    idle = threading.Event()
    sleeper = threading.Thread(target=idle.wait, daemon=True)  # its signal mask is from before the run
    sleeper.start()

    def send():
        if to == "the main thread":
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)  # pending: the run blocks it
        else:
            signal.pthread_kill(sleeper.ident, signal.SIGTERM)
            for _ in range(1000):  # the main thread runs the Python-level handler soon after
                time.sleep(0.001)

    try:
        with PreemptionFlag() as flag:
            send()
            assert flag.is_set and flag.signal == signal.SIGTERM  # the loop looked: it stops the run
            send()  # a second one, as a launcher passing signals on may send
        assert seen == []
        with PreemptionFlag():
            send()  # after the last look
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        idle.set()
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_the_process_was_started_ignoring_stays_ignored_during_a_run():
    """`bench sweep ... &` in a script (or under nohup) starts with SIGINT ignored: between its runs the sweep ignores
    a SIGINT, so a run must too (it used to catch it: the run stopped "preempted" and the sweep went on to the
    next); SIGTERM still stops it, and the ignored disposition is left as it was."""
    from bench.engine.train import PreemptionFlag

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    main = threading.main_thread().ident
    try:
        with PreemptionFlag() as flag:
            signal.pthread_kill(main, signal.SIGINT)
            assert not flag.is_set
            signal.pthread_kill(main, signal.SIGTERM)
            assert flag.is_set and flag.signal == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_checkpoints_and_stops_the_shell_loop_that_started_the_run(recipe, tmp_path):
    """`for s in 1 2; do bench run ... --set seed=$s; done` and Ctrl-C (SIGINT to the terminal's process group):
    seed 1 checkpoints and ends by SIGINT itself (the shell's $? = 130), so the shell stops its loop and seed 2
    never starts."""
    bench = f"{shlex.quote(sys.executable)} -m bench run {shlex.quote(str(recipe))} --out {shlex.quote(str(tmp_path))}"
    # A terminal's shell starts with SIGINT deliverable and at its default action; a child inherits its parent's
    # signal mask and an ignored SIGINT (an xdist worker may hold one: CI failed so twice, bash then ran both seeds),
    # so the mask is unblocked here and the disposition reset in the child before it runs bash.
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    try:
        loop = subprocess.Popen(
            ["bash", "-c", f"for s in 1 2; do {bench} --no-progress --set seed=$s; done; echo looped"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _wait_for_events(tmp_path, 5, loop)
    os.killpg(loop.pid, signal.SIGINT)
    out, err = loop.communicate(timeout=120)
    assert loop.returncode == -signal.SIGINT, err[-3000:]  # the shell itself stopped: its loop ended
    assert "looped" not in out and "Traceback" not in err
    run = only_run(tmp_path)  # no run of seed 2
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "preempted" and meta["stopped_by"] == "SIGINT"
    assert "preempted by SIGINT: checkpoint at step" in out and list(run.glob("ckpt-*.pt"))


def test_restart_starts_a_new_run_and_a_running_run_is_locked(recipe, tmp_path):
    crash_at("step:5", "run", str(recipe), "--out", str(tmp_path), "--no-progress")
    run = only_run(tmp_path)
    with open(run / ".lock", "w") as held:  # as if another process were running it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        locked = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert locked.returncode == 2 and "in progress in another process" in locked.stderr
    assert "Traceback" not in locked.stderr
    fresh = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress", "--restart", "--set", "epochs=1")
    assert fresh.returncode == 0, fresh.stderr
    assert len(list((tmp_path / "rel").iterdir())) == 2


def test_a_finished_run_lets_go_of_its_lock_in_the_process_that_ran_it(recipe, tmp_path, one_thread):
    """A run trained in this process (a sweep runs its trials so) releases its directory when it has written its
    last record: a later resume may take it at once, and no open lock file is left to the garbage collector."""
    from bench import recipe as recipe_mod
    from bench.engine.train import train
    from bench.rundir import held_by_a_process

    run = train(recipe_mod.load(recipe, ["epochs=1"]), tmp_path, progress=False)
    assert run is not None and (run.path / ".lock").exists()
    assert not held_by_a_process(run.path)  # the returned record is alive: its lock was closed, not collected


def test_corrupt_checkpoint_is_a_clear_error_and_nothing_is_lost(recipe, tmp_path):
    crash_at("step:9", "run", str(recipe), "--out", str(tmp_path), "--no-progress")
    run = only_run(tmp_path)
    newest = sorted(run.glob("ckpt-*.pt"))[-1]
    newest.write_bytes(b"not a checkpoint")
    done = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert done.returncode == 2 and "unreadable checkpoint" in done.stderr and str(newest) in done.stderr
    assert "Traceback" not in done.stderr
    assert newest.read_bytes() == b"not a checkpoint" and len(list(run.glob("ckpt-*.pt"))) == 2


def test_divergence_is_a_result(recipe, tmp_path):
    done = cli(
        "run",
        str(recipe),
        "--out",
        str(tmp_path),
        "--no-progress",
        "--set",
        "optimizer.lr=1.0e+12",
        "--set",
        "schedule.warmup_epochs=0",
    )
    assert done.returncode == 0, done.stderr
    meta = json.loads((only_run(tmp_path) / "meta.json").read_text())
    assert meta["status"] == "diverged" and ("non-finite" in meta["reason"] or "chance" in meta["reason"])
    report = cli("report", str(tmp_path))
    assert report.returncode == 0 and "diverged" in report.stdout


def test_unwritable_results_directory_fails_before_training(recipe, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = cli("run", str(recipe), "--out", str(blocker / "results"), "--no-progress")
    assert done.returncode == 2 and f"{blocker} is a file (a folder to write into is expected)" in done.stderr
    assert "Traceback" not in done.stderr


def test_torchrun_restarts_a_lost_worker_and_the_run_resumes(recipe, tmp_path):
    """Rank 1 of 2 is killed once after step 7; torchrun restarts both workers, which
    resume from the step-4 checkpoint and finish all 30 steps."""
    env = dict(
        os.environ,
        BENCH_CRASH_AT="step:7",
        BENCH_CRASH_RANK="1",
        BENCH_CRASH_ONCE=str(tmp_path / "crashed"),
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
    )
    done = subprocess.run(
        bench_argv(
            "run",
            str(recipe),
            "--out",
            str(tmp_path / "results"),
            "--no-progress",
            "--nproc",
            "2",
            "--max-restarts",
            "1",
            "--set",
            "eval.stop_at_chance=0",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "crashed").exists()  # the worker really was killed
    run = only_run(tmp_path / "results")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["world_size"] == 2
    assert [r["step"] for r in meta["resumed"]] == [4]
    metrics = pd.read_csv(run / "metrics.csv")
    assert metrics["step"].tolist() == [10, 20, 30]
    steps = [json.loads(line)["step"] for line in event_lines(run)]
    assert steps == list(range(30))


@pytest.mark.parametrize(
    "args,words",
    [
        (["run", "RELIABILITY_RECIPE", "--nproc", "0"], ["--nproc", "expected an integer >= 1"]),
        (
            ["submit", "RELIABILITY_RECIPE", "--nodes", "two", "--gpus-per-node", "8"],
            ["--nodes", "expected an integer >= 1"],
        ),
        (["run"], ["the following arguments are required: RECIPE"]),
        (["frobnicate"], ["unknown command 'frobnicate'; one of validate, "]),
        (["rnu"], ["bench: error: unknown command 'rnu' (did you mean 'run'?)"]),
        (["run", "RELIABILITY_RECIPE", "--run-dir", "NOWHERE"], ["not a run directory"]),
        (["table", "no-such-table", "."], ["no-such-table"]),
    ],
)
def test_bad_command_line_is_exit_2_without_traceback(recipe, tmp_path, args, words):
    args = [
        str(recipe) if a == "RELIABILITY_RECIPE" else str(tmp_path / "nowhere") if a == "NOWHERE" else a for a in args
    ]
    done = cli(*args)
    assert done.returncode == 2 and all(w in done.stderr for w in words), done.stderr
    assert "Traceback" not in done.stderr


def test_run_dir_of_another_recipe_or_a_foreign_checkpoint_is_refused(recipe, tmp_path):
    crash_at("step:5", "run", str(recipe), "--out", str(tmp_path), "--no-progress")
    run = only_run(tmp_path)
    other = cli("run", str(recipe), "--set", "epochs=2", "--run-dir", str(run))
    assert other.returncode == 2 and "different recipe" in other.stderr
    torch.save({"weights": torch.zeros(1)}, sorted(run.glob("ckpt-*.pt"))[-1])
    foreign = cli("run", str(recipe), "--run-dir", str(run))
    assert foreign.returncode == 2 and "not a bench checkpoint" in foreign.stderr
    assert "Traceback" not in other.stderr + foreign.stderr


def test_a_torn_events_line_is_cut_back_on_resume(recipe, reference, tmp_path):
    """Power lost while appending to events.jsonl: the resume cuts the log back to its last whole line and the
    checkpoint's step, and the finished run is the uninterrupted one, with one event per step."""
    crash_at("step:7", "run", str(recipe), "--out", str(tmp_path), "--no-progress")
    run = only_run(tmp_path)
    with open(run / "events.jsonl", "a") as f:
        f.write('{"step": 7, "lr": 0.1, "lo')
    resumed = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "a cut-off line after 6 whole ones" in resumed.stderr  # steps 0-5 logged before the kill
    assert_same(outcome(run), reference)
    steps = [json.loads(line)["step"] for line in event_lines(run)]
    assert steps == list(range(30))


def test_a_run_killed_before_its_first_checkpoint_is_started_again_in_place(recipe, reference, tmp_path):
    """No orphan: the same command continues the killed run's directory from step 0."""
    crash_at("step:2", "run", str(recipe), "--out", str(tmp_path), "--no-progress")
    run = only_run(tmp_path)
    assert not list(run.glob("ckpt-*.pt")) and (run / "events.jsonl").is_file()
    again = cli("run", str(recipe), "--out", str(tmp_path), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert f"starting {run} again from step 0" in again.stdout
    assert only_run(tmp_path) == run
    assert_same(outcome(run), reference)
    steps = [json.loads(line)["step"] for line in event_lines(run)]
    assert steps == list(range(30))


def test_files_of_a_run_follow_the_umask(recipe, tmp_path):
    """Results are readable by a lab group: the atomic writes give the mode open() gives, not mkstemp's 0600."""
    done = subprocess.run(  # a process of its own: bench reads the umask once, when it starts
        bench_argv("run", str(recipe), "--out", str(tmp_path), "--no-progress", "--set", "epochs=1"),
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.umask(0o027),
    )
    assert done.returncode == 0, done.stderr
    files = [p for p in only_run(tmp_path).iterdir() if p.name != ".lock"]
    assert {p.name for p in files} >= {"recipe.yaml", "meta.json", "metrics.csv", "events.jsonl.gz"}
    assert any(p.suffix == ".pt" for p in files)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in files} == {p.name: "0o640" for p in files}


def _in_a_small_disk(script: str, tmp_path) -> subprocess.CompletedProcess:
    """Run `script` (sh) with DISK a fresh tmpfs, in a mount namespace of its own (nothing of the machine is
    touched); what it copies to OUT stays."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no unprivileged mount namespace (unshare -rm) for a small tmpfs on this machine")
    env = dict(
        os.environ, PYTHONWARNINGS="ignore", PY=sys.executable, DISK=str(tmp_path / "disk"), OUT=str(tmp_path / "out")
    )
    (tmp_path / "disk").mkdir()
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=600)


def test_a_full_disk_is_one_sentence_a_failed_run_and_the_same_command_resumes(recipe, reference, tmp_path):
    """A 1 MB tmpfs holds the first checkpoint (0.6 MB) but not the second beside it: exit 3, one sentence
    naming the file, status failed with the reason; grown to 20 MB, the same command resumes bit for bit."""
    done = _in_a_small_disk(
        f"""
        mount -t tmpfs -o size=1m tmpfs "$DISK" || exit 90
        "$PY" -m bench run {recipe} --out "$DISK/results" --no-progress 2>"$DISK/err1"; echo $? >"$DISK/rc1"
        cp -r "$DISK" "$OUT.full"
        mount -o remount,size=20m "$DISK"
        "$PY" -m bench run {recipe} --out "$DISK/results" --no-progress; echo $? >"$DISK/rc2"
        cp -r "$DISK" "$OUT"
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    full, out = tmp_path / "out.full", tmp_path / "out"
    err = (full / "err1").read_text()
    assert (full / "rc1").read_text().strip() == "3", err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "no space left on device while writing it" in err and "run the same command to resume" in err
    run = only_run(full / "results")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "failed" and "no space left" in meta["reason"]
    assert [p.name for p in run.glob("ckpt-*.pt")] == ["ckpt-000000004.pt"]
    assert (out / "rc2").read_text().strip() == "0", done.stdout
    assert_same(outcome(only_run(out / "results")), reference)


def test_a_disk_too_full_for_the_first_file_leaves_no_run_directory(recipe, tmp_path):
    done = _in_a_small_disk(
        f"""
        mount -t tmpfs -o size=64k tmpfs "$DISK" || exit 90
        mkdir "$DISK/results"; dd if=/dev/zero of="$DISK/fill" bs=4k 2>/dev/null
        "$PY" -m bench run {recipe} --out "$DISK/results" --no-progress 2>"$OUT.err"; echo $? >"$OUT.rc"
        cp -r "$DISK" "$OUT"
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    err = (tmp_path / "out.err").read_text()
    assert (tmp_path / "out.rc").read_text().strip() == "3" and "recipe.yaml: no space left" in err, err
    assert not list((out / "results").rglob("*/*"))  # no run directory (the recipe's folder may stay, empty)


TWO_WORKERS = ["--no-progress", "--nproc", "2", "--set", "epochs=2", "--set", "eval.stop_at_chance=0"]  # 10 steps


def _workers_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def _wait_for_events(results, count: int, proc) -> None:
    for _ in range(1200):
        logs = list(results.glob("*/*/events.jsonl"))
        if logs and len(logs[0].read_text().splitlines()) >= count:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the run logged no steps in 120 s")


@pytest.fixture(scope="module")
def two_worker_reference(recipe, tmp_path_factory):
    results = tmp_path_factory.mktemp("ref2")
    done = subprocess.run(
        bench_argv("run", str(recipe), "--out", str(results), *TWO_WORKERS),
        env=_workers_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return outcome(only_run(results))


@pytest.mark.parametrize("how", ["SIGTERM to the launcher", "Ctrl-C to the process group"])
def test_a_signal_to_the_launcher_of_two_workers_ends_preempted_and_resumes(
    recipe, two_worker_reference, tmp_path, how
):
    command = bench_argv("run", str(recipe), "--out", str(tmp_path), *TWO_WORKERS)
    proc = subprocess.Popen(  # SIGINT at its default action, as under a terminal (an xdist worker may ignore it)
        command,
        env=_workers_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for_events(tmp_path, 3, proc)
    if how.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)  # as SLURM or a scheduler sends it
    else:
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: launcher and workers at once
    out, err = proc.communicate(timeout=300)
    # a scheduler's SIGTERM is a normal end; a Ctrl-C ends the launcher by SIGINT (a shell's $? is 130)
    assert proc.returncode == (0 if how.startswith("SIGTERM") else -signal.SIGINT), err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err
    run = only_run(tmp_path)
    assert f"checkpoint in {run}; run the same command to resume" in out
    assert json.loads((run / "meta.json").read_text())["status"] == "preempted"
    resumed = subprocess.run(command, env=_workers_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0 and "resuming" in resumed.stdout, resumed.stderr[-3000:]
    assert_same(outcome(run), two_worker_reference)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "RELIABILITY_RECIPE", "--nproc", "3"],
        ["submit", "RELIABILITY_RECIPE", "--nodes", "3", "--gpus-per-node", "1", "--dry-run"],
        ["submit", "RELIABILITY_RECIPE", "--nodes", "1", "--gpus-per-node", "3"],
    ],
)
def test_a_plan_impossible_for_the_world_size_is_refused_before_launch(recipe, tmp_path, monkeypatch, args):
    """global_batch 32 over 3 ranks: one sentence and exit 2, before any worker starts or any script is written."""
    monkeypatch.chdir(tmp_path)
    done = cli(*[str(recipe) if a == "RELIABILITY_RECIPE" else a for a in args], "--out", str(tmp_path / "results"))
    assert done.returncode == 2 and done.stdout == ""
    said = done.stderr.strip()  # the recipe and the world it was asked for, then why not
    assert said.startswith(f"bench: error: {recipe} ") and said.count("\n") == 0
    assert said.endswith(": global_batch 32 cannot be split evenly over 3 ranks")
    assert list(tmp_path.iterdir()) == []


def test_an_error_inside_the_workers_is_reported_once(recipe, tmp_path):
    done = subprocess.run(
        bench_argv("run", str(recipe), "--out", str(tmp_path), *TWO_WORKERS, "--set", "data.holdout=2000"),
        env=_workers_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("bench: error:")]
    assert len(errors) == 1 and errors[0].endswith("(ranks 0, 1)") and "holdout" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_sbatch_script_checkpoints_on_sigusr1_and_requeues_the_job(recipe, reference, tmp_path):
    """The script `bench submit` writes, under stand-ins for srun (runs the command), scancel (logs, and sends
    the signal to the step as SLURM does) and scontrol (logs): SLURM's early SIGUSR1 reaches, as SIGTERM, the worker
    through torchrun, the run ends preempted with a checkpoint, the job asks to be requeued, and the requeued job
    resumes to the uninterrupted run's result (tests/test_slurm.py does it under a real SLURM)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\necho $$ > "$STEP"\nshift  # --cpus-per-task\nexec "$@"\n')
    (fake / "scancel").write_text('#!/bin/sh\necho "$@" >> "$LOG.scancel"\nkill -TERM "$(cat "$STEP")"\n')
    (fake / "scontrol").write_text('#!/bin/sh\n[ "$1" = show ] && echo localhost && exit 0\necho "$@" >> "$LOG"\n')
    for tool in fake.iterdir():
        tool.chmod(0o755)
    results = tmp_path / "results"
    script = cli("submit", str(recipe), "--nodes", "1", "--gpus-per-node", "1", "--dry-run", "--out", str(results))
    assert script.returncode == 0, script.stderr
    assert "#SBATCH --signal=B:USR1@120" in script.stdout and "#SBATCH --requeue" in script.stdout
    job_id = str(10000 + os.getpid() % 10000)  # not a fixed port: parallel runs of this test (xdist, others) collide
    env = dict(
        os.environ,
        PATH=f"{fake}:{os.environ['PATH']}",
        SLURM_JOB_ID=job_id,  # the rendezvous port is 10000 + id mod 20000: one of this test's own
        SLURM_JOB_NODELIST="localhost",
        SLURM_CPUS_PER_TASK="8",  # sbatch sets it from the script's --cpus-per-task
        LOG=str(tmp_path / "scontrol.log"),
        STEP=str(tmp_path / "step.pid"),
    )
    job = subprocess.Popen(
        ["bash", "-c", script.stdout], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _wait_for_events(results, 5, job)
    job.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@120 does before the time limit
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    assert (tmp_path / "scontrol.log").read_text() == f"requeue {job_id}\n"
    assert (tmp_path / "scontrol.log.scancel").read_text() == f"--signal=TERM {job_id}\n"
    run = only_run(results)
    assert json.loads((run / "meta.json").read_text())["status"] == "preempted"
    requeued = subprocess.run(["bash", "-c", script.stdout], env=env, capture_output=True, text=True, timeout=600)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert (tmp_path / "scontrol.log").read_text() == f"requeue {job_id}\n"  # finished: not requeued again
    assert_same(outcome(run), reference)


@pytest.mark.parametrize("world,eval_batch", [(1, 64), (1, 3), (2, 3)])
def test_every_readable_validation_image_is_counted_once(recipe, tiny_dataset, tmp_path, world, eval_batch):
    """Two of the 40 validation images are damaged: every evaluation counts the other 38, once each, at every
    world size and eval batch, says so in meta.json and in the summary `bench run` prints; each evaluation
    prints one line under --no-progress, from rank 0 only."""
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    damaged = sorted((data / "val").rglob("*.*"))[::20]
    for path in damaged:
        path.write_bytes(path.read_bytes()[:60])
    args = ["run", str(recipe), "--out", str(tmp_path / "results"), "--no-progress", "--nproc", str(world)]
    args += ["--set", f"data.path={data}", "--set", "epochs=2", "--set", f"data.eval_batch={eval_batch}"]
    if world == 1:
        done = cli(*args)
    else:
        done = subprocess.run(bench_argv(*args), env=_workers_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = only_run(tmp_path / "results")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["val_size"] == 40 and meta["evaluated_images"] == {"val": 38, "train_eval": meta["train_eval_size"]}
    assert sorted(meta["unreadable_images"]) == sorted(map(str, damaged))
    top1 = pd.read_csv(run / "metrics.csv")["val_top1"]
    assert ((top1 * 38 / 100).round(6) % 1 == 0).all()  # a whole number of hits out of 38
    lines = [line for line in done.stderr.splitlines() if line.startswith("epoch ")]  # rank 0's, one per evaluation
    assert len(lines) == len(top1) and f"val top1 {top1.iloc[-1]:.2f}" in lines[-1] and lines[-1].endswith(" left")
    if world == 1:
        assert "val_images" in done.stdout and re.search(r"\|\s+38 \|", done.stdout), done.stdout
        report = cli("report", str(tmp_path / "results"))
        assert f"{run}: val Top-1 over 38 of the 40 validation images" in report.stdout


@pytest.mark.parametrize("change", ["one image fewer", "one image moved to another class"])
def test_resuming_onto_a_changed_training_set_is_refused(recipe, tiny_dataset, tmp_path, change):
    """A run stopped with a checkpoint, then the training folder changes (the image count, or only the file
    list): the same command refuses in one sentence (exit 2) naming --restart, and the run is left as it was."""
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    command = ["run", str(recipe), "--out", str(tmp_path / "results"), "--no-progress", "--set", f"data.path={data}"]
    crash_at("step:7", *command)
    run = only_run(tmp_path / "results")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["train_size"] == 160 and len(meta["train_digest"]) == 16
    classes = sorted((data / "train").iterdir())
    image = sorted(classes[0].iterdir())[0]
    if change == "one image fewer":
        image.unlink()
    else:
        image.rename(classes[1] / image.name)
    resumed = cli(*command)
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr, resumed.stderr
    said = "160 images then, 159 now" if change == "one image fewer" else "the same 160 images count, another file list"
    errors = [line for line in resumed.stderr.splitlines() if line.startswith("bench: error:")]
    assert errors == [  # one sentence
        f"bench: error: {run / 'ckpt-000000004.pt'}: the training set in {data} changed "
        f"since this checkpoint ({said}); resume on the same images, or start a new run "
        "with --restart"
    ]
    assert json.loads((run / "meta.json").read_text()) == meta and only_run(tmp_path / "results") == run


def test_strict_data_finds_an_unreadable_training_image_before_the_first_step(recipe, tiny_dataset, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    damaged = sorted((data / "train").rglob("*.*"))[-1]  # read late in an epoch, if ever
    damaged.write_bytes(damaged.read_bytes()[:60])
    done = cli(
        "run",
        str(recipe),
        "--out",
        str(tmp_path / "results"),
        "--no-progress",
        "--set",
        f"data.path={data}",
        "--set",
        "data.strict=true",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"bench: error: {damaged}: unreadable image (not an image, truncated or corrupt); "
        "remove it, or set data.strict: false to skip such files with a warning"
    )
    assert not (tmp_path / "results").exists()  # refused before any run directory


def test_a_finished_runs_events_are_packed_and_read_as_before(tmp_path):
    """RunDir.pack_events (a run's end): events.jsonl.gz alone, the same bytes for the same events (no time in the
    header), read_events and event_lines unchanged; a resume unpacks it, cut back to the checkpoint; a damaged
    packed log is one sentence, never fewer rows."""
    events = [{"step": i, "lr": 0.1 * (i + 1), "loss": 2.0 - i / 7} for i in range(5)]
    runs = []
    for name in ("a", "b"):
        run = RunDir.create(tmp_path, name, "name: x\n")
        run.meta = {"status": "running"}
        run.write_meta()
        for event in events:
            run.log_event(event)
        before = read_events(run.path)
        run.pack_events()
        assert sorted(p.name for p in run.path.iterdir() if p.name != ".lock") == [
            "events.jsonl.gz",
            "meta.json",
            "recipe.yaml",
        ]
        pd.testing.assert_frame_equal(read_events(run.path), before)
        assert [json.loads(line) for line in event_lines(run.path)] == events
        run._lock.close()
        runs.append(run.path)
    assert (runs[0] / "events.jsonl.gz").read_bytes() == (runs[1] / "events.jsonl.gz").read_bytes()
    resumed = RunDir.reopen(runs[0], step=3)
    assert not (runs[0] / "events.jsonl.gz").exists()
    assert [json.loads(line)["step"] for line in event_lines(runs[0])] == [0, 1, 2]
    resumed._lock.close()
    packed = runs[1] / "events.jsonl.gz"
    whole = packed.read_bytes()
    for damage in (lambda: packed.write_bytes(whole[:-9]), lambda: packed.write_bytes(b""), packed.mkdir):
        packed.unlink(missing_ok=True)  # a copy cut short, an empty file, a folder in its place
        damage()
        with pytest.raises(UserError, match=r"events.jsonl.gz: damaged \(.*\); restore it from where the results"):
            read_events(runs[1])
