"""Crash injection for the reliability tests.

`BENCH_CRASH_AT=<point>:<n>` SIGKILLs this process when it reaches point
"step" (after optimizer step n), "eval" (halfway through the evaluation after
step n) or "checkpoint" (the checkpoint of step n written to its temporary
file, not yet renamed). `BENCH_CRASH_RANK=r` limits it to one rank, and
`BENCH_CRASH_ONCE=<file>` to the first time (the file marks that it happened),
so a restarted worker gets past it; `BENCH_CRASH_SIGNAL=TERM` sends SIGTERM instead (a
preemption at a known step). Unset in normal use: one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def crash_point(point: str, n: int) -> None:
    env = os.environ
    if env.get("BENCH_CRASH_AT") != f"{point}:{n}":
        return
    if env.get("BENCH_CRASH_RANK", env.get("RANK", "0")) != env.get("RANK", "0"):
        return
    once = env.get("BENCH_CRASH_ONCE")
    if once:
        if Path(once).exists():
            return
        Path(once).touch()
    os.kill(os.getpid(), getattr(signal, "SIG" + env.get("BENCH_CRASH_SIGNAL", "KILL")))
