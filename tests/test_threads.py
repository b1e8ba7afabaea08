"""engine.threads and OpenMP's waiting: CPU threads that survive a shared machine (bench/engine/threads.py)."""

import json
import os

from bench.cli import main
from bench.engine import threads
from tests.conftest import RECIPES


def test_auto_takes_the_cores_this_process_may_use_over_the_local_workers(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(threads, "_cgroup_cores", lambda: float("inf"))
    assert threads.resolve("auto") == 8 and threads.resolve("auto", local_workers=2) == 4
    assert threads.resolve("auto", local_workers=16) == 1 and threads.resolve(3) == 3
    monkeypatch.setattr(threads, "_cgroup_cores", lambda: 2.5)  # a quota of 2.5 cores: 2 threads, never more
    assert threads.resolve("auto") == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun's, or the user's: a cap
    assert threads.resolve("auto") == 1 and threads.resolve(4) == 4


def test_cgroup_quota_is_read_from_cpu_max(monkeypatch, tmp_path):
    cpu_max = tmp_path / "cpu.max"
    real = threads.Path
    monkeypatch.setattr(
        threads, "Path", lambda p: cpu_max if p == "/sys/fs/cgroup/cpu.max" else real(tmp_path / "none")
    )
    cpu_max.write_text("150000 100000\n")
    assert threads._cgroup_cores() == 1.5
    cpu_max.write_text("max 100000\n")
    assert threads._cgroup_cores() == float("inf")


def test_openmp_spins_briefly_unless_the_user_chose(monkeypatch):
    for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
        monkeypatch.delenv(key, raising=False)
    assert main(["validate", "--schema-only", str(RECIPES / "demo-sgd.yaml")]) == 0
    assert os.environ["GOMP_SPINCOUNT"] == "1000" and os.environ["KMP_BLOCKTIME"] == "1"
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    threads.quiet_openmp()
    assert os.environ["GOMP_SPINCOUNT"] == "5"
    for key in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    threads.quiet_openmp()
    assert "GOMP_SPINCOUNT" not in os.environ and "KMP_BLOCKTIME" not in os.environ


def test_a_slowdown_under_load_is_one_warning(capsys):
    load = [0.5]
    watch = threads.Slowdown(threads=2, cores=2, window_s=10, load=lambda: load[0])
    said = [
        watch.update(images, seconds) for images, seconds in [(0, 0), (1000, 10), (2000, 20), (2300, 30)]
    ]  # 100 img/s, then 30 img/s: but the machine is idle
    assert said == [None] * 4
    load[0] = 3.0
    said = [watch.update(images, seconds) for images, seconds in [(2600, 40), (2900, 50), (3200, 60)]]
    assert said[1:] == [None, None] and "slowed to 30 img/s from 100" in said[0]
    assert "load average (3.0) exceeds the 2 cores" in said[0] and "engine.threads" in said[0]
    assert watch.update(3210, 70) is None  # once


def test_threads_are_set_recorded_and_do_not_change_the_recipe(tmp_path, capsys):
    out = tmp_path / "out"
    args = [
        "run",
        str(RECIPES / "demo-sgd.yaml"),
        "--out",
        str(out),
        "--no-progress",
        "--set",
        "epochs=1",
        "--set",
        "data.synth.train_per_class=10",
        "--set",
        "data.synth.val_per_class=5",
    ]
    assert main(args + ["--threads", "1"]) == 0
    assert "1 CPU thread\n" in capsys.readouterr().out
    [run] = (out / "demo-sgd").iterdir()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["cpu_threads"] == 1 and meta["cpu_capability"] and meta["cpu_model"] and "torch_config" in meta
    from bench import recipe

    one = recipe.load(RECIPES / "demo-sgd.yaml", ["engine.threads=1"])
    assert one.same_as(
        recipe.load(RECIPES / "demo-sgd.yaml", ["engine.threads=auto"]).to_yaml()
    )  # a resume may change it
    assert main(["run", str(RECIPES / "demo-sgd.yaml"), "--threads", "0", "--out", str(out)]) == 2
    assert "key 'engine.threads': input should be greater than 0 or input should be 'auto'" in capsys.readouterr().err
