"""CPU threads that survive a shared machine: `engine.threads` and OpenMP's waiting.

Two things made a run on a 2-core machine beside one busy process many times slower than the
same run alone (`nice -n 10 bench run recipes/demo-sgd.yaml` beside a busy loop: 87 img/s with libgomp's default
spin, 203 with bench's, 364 alone):

- OpenMP threads *spin* at every barrier (libgomp: 300,000 spins before they sleep). When one
  of a step's threads waits for a core held by another process, the others burn their cores
  spinning for it. `quiet_openmp()` (called by the CLI before torch loads) sets GOMP_SPINCOUNT
  and KMP_BLOCKTIME (Intel's OpenMP) low unless the user set them or OMP_WAIT_POLICY: the
  same speed alone, more than twice the speed beside a busy process.
- More threads than cores: `auto` takes the cores this process may use (its affinity mask and
  a cgroup CPU quota, divided by torchrun's local workers), capped by OMP_NUM_THREADS when set,
  and never more.

The thread count changes float rounding (a reduction's order), so bitwise reproduction holds for
one thread count: the run's meta records it (`cpu_threads`), and `engine.threads: N` pins it.
`Slowdown` watches for the rest: one warning when img/s falls far under the run's own earlier
rate while the load average exceeds the cores.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

QUIET = {"GOMP_SPINCOUNT": "1000", "KMP_BLOCKTIME": "1"}


def quiet_openmp() -> None:
    """Short OpenMP spin-waits, unless the user chose a wait policy; effective only before torch is imported."""
    if "OMP_WAIT_POLICY" not in os.environ:
        for key, value in QUIET.items():
            os.environ.setdefault(key, value)


def _cgroup_cores() -> float:
    """The cgroup's CPU quota in cores (v2 cpu.max, v1 cfs_quota_us / cfs_period_us); inf when unlimited."""
    for quota_file, period_file in (
        ("/sys/fs/cgroup/cpu.max", None),
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    ):
        try:
            text = Path(quota_file).read_text().split()
            quota, period = (text[0], text[1]) if period_file is None else (text[0], Path(period_file).read_text())
            if quota not in ("max", "-1"):
                return int(quota) / int(period)
        except (OSError, ValueError, IndexError):
            continue
    return math.inf


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, and the cgroup's quota rounded down (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_cores()
    return max(1, min(cores, int(quota) if math.isfinite(quota) else cores))


def resolve(setting: int | str, local_workers: int = 1) -> int:
    """The thread count of `engine.threads`: N as given, or auto (see the module docstring)."""
    if setting != "auto":
        return int(setting)
    threads = max(1, usable_cores() // max(1, local_workers))
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads


def apply(setting: int | str) -> int:
    """Set torch's intra-op threads for `engine.threads` in this process (one of LOCAL_WORLD_SIZE workers)."""
    import torch

    threads = resolve(setting, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(threads)
    return threads


class Slowdown:
    """One warning when training img/s falls under `factor` x the run's best earlier rate while the 1-minute
    load average exceeds the cores: other processes are competing for them. Rates are taken over windows of at
    least `window_s` seconds of training time."""

    def __init__(
        self,
        threads: int,
        cores: int | None = None,
        factor: float = 0.5,
        window_s: float = 20.0,
        load=lambda: os.getloadavg()[0],
    ):
        self.threads, self.cores = threads, cores or usable_cores()
        self.factor, self.window_s, self.load = factor, window_s, load
        self.best, self.start, self.warned = 0.0, None, False

    def update(self, images: int, train_time: float) -> str | None:
        """The warning to give now (once), from the images seen and the training seconds so far."""
        if self.start is None:
            self.start = (images, train_time)
            return None
        images0, time0 = self.start
        if train_time - time0 < self.window_s:
            return None
        rate = (images - images0) / (train_time - time0)
        self.start = (images, train_time)
        if rate < self.factor * self.best and not self.warned and (load := self.load()) > self.cores:
            self.warned = True
            return (
                f"training slowed to {rate:,.0f} img/s from {self.best:,.0f} while the load average ({load:.1f}) "
                f"exceeds the {self.cores} cores this run may use: other processes compete for them; "
                f"set engine.threads (bench run --threads N) under the {self.threads} threads it uses, "
                "or free the cores"
            )
        self.best = max(self.best, rate)
        return None
