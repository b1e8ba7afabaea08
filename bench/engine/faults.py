"""Crash injection for the reliability tests: `BENCH_CRASH_AT=<point>:<n>` SIGKILLs
this process when it reaches the n-th occurrence of point "step" (after the
optimizer step n), "eval" (halfway through an evaluation after step n) or
"checkpoint" (the checkpoint of step n written to its temporary file, not yet
renamed). Unset in normal use: one dictionary lookup per call.
"""

from __future__ import annotations

import os
import signal


def crash_point(point: str, n: int) -> None:
    if os.environ.get("BENCH_CRASH_AT") == f"{point}:{n}":
        os.kill(os.getpid(), signal.SIGKILL)
