"""`bench submit` under a real SLURM: a one-node cluster on this machine (tests/slurm/cluster.sh: munged,
slurmctld and slurmd), real sbatch jobs of a tiny recipe. Skipped, with the reason, where slurm-wlm and munge
are not installed or the tests do not run as root (the daemons run as root)."""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis import results
from bench.rundir import event_lines
from tests.conftest import bench_argv, cli, write_recipe
from tests.helpers import (
    BASE,
    RELIABILITY_RECIPE,  # the tiny dataset: 5 steps an epoch
    SWEEP,
)

CLUSTER = Path(__file__).with_name("slurm") / "cluster.sh"
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")
missing = [name for name in DAEMONS if shutil.which(name) is None]
pytestmark = [
    pytest.mark.slow,  # real sbatch jobs; a cluster per xdist worker, each on its own ports (tests/slurm/cluster.sh)
    pytest.mark.skipif(
        bool(missing),
        reason=f"SLURM is not installed ({', '.join(missing)} missing): apt-get "
        "install slurmctld slurmd slurm-client munge",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the test cluster's daemons run as root"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(["bash", str(CLUSTER), "start", str(folder)], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr + "".join(p.read_text() for p in folder.glob("*.log"))
    yield {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    subprocess.run(["bash", str(CLUSTER), "stop", str(folder)], timeout=60)


def recipe(folder: Path, data: Path, epochs: int, name: str) -> Path:
    """The reliability tests' tiny recipe, evaluated every epoch, with no periodic checkpoint: a run's only
    checkpoints are a signal's and the final one, so a worker killed instead of stopped (what srun does with a
    SIGTERM of its own) would start again from step 0."""
    text = RELIABILITY_RECIPE.replace("DATA", str(data)).replace("epochs: 6", f"epochs: {epochs}")
    assert "checkpoint: {every_steps: 4}" in text  # the line replaced below: fail here if RELIABILITY_RECIPE changes it
    text = text.replace("checkpoint: {every_steps: 4}", "checkpoint: {every_steps: 1000}")
    return write_recipe(folder / f"{name}.yaml", text.replace("every_epochs: 2", "every_epochs: 1"))


def submit(env, folder: Path, recipe_path: Path, *extra: str) -> str:
    """`bench submit` for real (sbatch), from `folder`, in this process; returns the job id."""
    args = ["submit", str(recipe_path), "--nodes", "1", "--gpus-per-node", "0", "--cpus-per-worker", "1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("SLURM_CONF", env["SLURM_CONF"])
        done = cli(*args, "--out", str(folder / "results"), *extra)
    assert done.returncode == 0, done.stderr
    scripts = list((folder / "slurm").glob("*.sbatch"))  # srun gets the job's CPUs (Slurm >= 22.05 needs it said)
    assert scripts and all('srun --cpus-per-task="$SLURM_CPUS_PER_TASK" ' in p.read_text() for p in scripts)
    return re.search(r"Submitted batch job (\d+)", done.stdout).group(1)


def job(env, job_id: str) -> dict:
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True, text=True)
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


def wait(env, job_id: str, until, timeout: float = 400) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = job(env, job_id)
        if until(info):
            return info
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not get there in {timeout} s: {job(env, job_id)}")


def ended(info) -> bool:
    return info.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def start_the_requeued_job_now(env, job_id: str) -> None:
    """SLURM holds a requeued job back (its BeginTime) for a while; the tests need not wait it out, but a start
    in the same second as the requeue is refused: slurmd revoked the job's credential then, to the second ("Job
    credential revoked", the job FAILED; seen once the tests' runs took 3 s instead of 10)."""
    wait(env, job_id, lambda info: info.get("JobState") == "PENDING" and int(info.get("Restarts", 0)) >= 1)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True)


def the_run(folder: Path, name: str) -> Path:
    [run] = list((folder / "results" / name).iterdir())
    return run


def steps_logged(run: Path) -> int:
    return len(event_lines(run))


def test_a_submitted_recipe_runs_as_bench_run_runs_it(cluster, tiny_dataset, tmp_path):
    path = recipe(tmp_path, tiny_dataset, 2, "tiny")
    info = wait(cluster, submit(cluster, tmp_path, path), ended)
    assert info["JobState"] == "COMPLETED", (info, list(tmp_path.glob("slurm-*.out"))[0].read_text()[-3000:])
    run = the_run(tmp_path, "tiny")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["world_size"] == 1
    # a fresh process, as srun's, with the one CPU the job asked for (--cpus-per-worker 1: the script exports
    # OMP_NUM_THREADS=1, and engine.threads auto takes it; the thread count changes float rounding)
    done = subprocess.run(
        bench_argv("run", str(path), "--out", str(tmp_path / "local"), "--no-progress"),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    [local] = list((tmp_path / "local" / "tiny").iterdir())
    assert json.loads((local / "meta.json").read_text())["cpu_threads"] == meta["cpu_threads"] == 1
    ours, theirs = (pd.read_csv(r / "metrics.csv").drop(columns=["train_time_s"]) for r in (run, local))
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)


def test_two_torchrun_workers_through_srun(cluster, tiny_dataset, tmp_path):
    path = recipe(tmp_path, tiny_dataset, 1, "two")
    info = wait(cluster, submit(cluster, tmp_path, path, "--workers-per-node", "2"), ended)
    assert info["JobState"] == "COMPLETED", list(tmp_path.glob("slurm-*.out"))[0].read_text()[-3000:]
    meta = json.loads((the_run(tmp_path, "two") / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["world_size"] == 2


def test_sigusr1_before_the_time_limit_checkpoints_requeues_and_resumes(cluster, tiny_dataset, tmp_path):
    """What SLURM does at --signal=B:USR1@120: SIGUSR1 to the batch script, whose trap passes it to the
    workers (they checkpoint, the run ends preempted) and requeues the job, which resumes the run."""
    path = recipe(tmp_path, tiny_dataset, 8, "requeue")  # only the signal's checkpoint (recipe())
    job_id = submit(cluster, tmp_path, path)
    wait(
        cluster,
        job_id,
        lambda info: (tmp_path / "results" / "requeue").is_dir() and steps_logged(the_run(tmp_path, "requeue")) >= 5,
    )
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=cluster, check=True)
    start_the_requeued_job_now(cluster, job_id)
    info = wait(cluster, job_id, lambda info: ended(info) and int(info.get("Restarts", 0)) >= 1)
    assert info["JobState"] == "COMPLETED"
    out = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert "the workers checkpoint, then the job is requeued" in out and "preempted by SIGTERM: checkpoint" in out
    meta = json.loads((the_run(tmp_path, "requeue") / "meta.json").read_text())
    assert meta["status"] == "completed" and len(meta["resumed"]) == 1 and meta["resumed"][0]["step"] >= 5


def test_scancel_ends_the_run_preempted_with_a_checkpoint_and_a_requeue_resumes_it(cluster, tiny_dataset, tmp_path):
    """scancel sends SIGTERM to every process of the job: the workers checkpoint, the run ends preempted and
    the job stays cancelled; `scontrol requeue` (or submitting again) resumes the run."""
    path = recipe(tmp_path, tiny_dataset, 8, "cancel")  # only the signal's checkpoint (recipe())
    job_id = submit(cluster, tmp_path, path)
    wait(
        cluster,
        job_id,
        lambda info: (tmp_path / "results" / "cancel").is_dir() and steps_logged(the_run(tmp_path, "cancel")) >= 5,
    )
    subprocess.run(["scancel", job_id], env=cluster, check=True)
    wait(cluster, job_id, ended)
    time.sleep(3)  # a requeue by the batch script (the bug this guards against) would show by now
    info = job(cluster, job_id)
    assert info["JobState"] == "CANCELLED" and info.get("Restarts", "0") == "0", info
    run = the_run(tmp_path, "cancel")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "preempted" and list(run.glob("ckpt-*.pt"))
    subprocess.run(["scontrol", "requeue", job_id], env=cluster, check=True)
    start_the_requeued_job_now(cluster, job_id)
    info = wait(cluster, job_id, lambda info: ended(info) and info.get("Restarts", "0") != "0")
    assert info["JobState"] == "COMPLETED"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and len(meta["resumed"]) == 1


def test_a_sweep_as_a_job_array_shares_its_trials_between_the_array_tasks(cluster, tiny_dataset, tmp_path):
    """`bench submit SWEEP`: two array tasks claim the trials through the run directories' locks; between
    them every trial and rerun trains once and the verdict is written."""
    base = BASE.replace("DATA", str(tiny_dataset)).replace("{name: resnet10t}", "{name: resnet8_cifar}")
    write_recipe(tmp_path / "base.yaml", base)  # bench's own model: the array tasks import no timm
    sweep_file = write_recipe(tmp_path / "tiny.yaml", SWEEP.replace("seeds: [1, 2]", "seeds: [1]"))
    job_id = submit(cluster, tmp_path, sweep_file, "--array", "2", "--allow-dirty")  # a contributor's tree too
    tasks = [wait(cluster, f"{job_id}_{task}", ended) for task in (0, 1)]
    logs = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert all(info["JobState"] == "COMPLETED" for info in tasks), logs[-3000:]
    runs = results.load([tmp_path / "results"])
    assert sorted(runs["recipe"]) == sorted(
        [f"tiny-{a}-b32-t0{i}" for a in ("sgd", "lars") for i in (0, 1)]
        + [f"tiny-{a}-b32-best-seed1" for a in ("sgd", "lars")]
    )
    assert runs["finished"].all() and (runs.loc[runs["role"] == "rerun", "status"] == "completed").all()
    assert (tmp_path / "results" / "verdict.md").is_file()  # (a trial at lr 5 may blow up: bench's divergence rule)
    for task in (0, 1):  # both tasks trained
        assert "run directory:" in (tmp_path / f"slurm-{job_id}_{task}.out").read_text()
