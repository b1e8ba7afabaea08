"""bench's commands, one module a family, each owning its parsers (`add_parsers(sub)`); bench/cli.py builds the
command line from them and keeps main(), the error handling and the exit codes.

    recipe.py    bench validate, bench recipe keys
    run.py       bench run, bench suite
    sweep.py     bench sweep
    branch.py    bench branch
    submit.py    bench submit (SLURM)
    results.py   bench export, bench clean, bench project: over results, with the runner's side
    data.py      bench data
    perf.py      bench perf
    bench report, bench table, bench plot: bench/analysis/commands.py (torch-free, as all of the analysis)

This module: what more than one family uses.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from bench.analysis.commands import plots_beside
from bench.errors import assignment, out_folder

DEFAULT_RESULTS = Path("results/runs")
INTERRUPTED = 130  # a person's Ctrl-C: the shell's 128 + SIGINT; a scheduler's SIGTERM/SIGUSR1 preemption is 0


def stop_code(signal_name: str | None) -> int:
    """The exit code of a run stopped by `signal_name` after its checkpoint: a Ctrl-C must stop the shell
    loop or script that started it, a scheduler's preemption is a normal end (SLURM requeues the job)."""
    return INTERRUPTED if signal_name == "SIGINT" else 0


class Failure(Exception):
    """A command's end in one sentence with an exit code of its own (bad input is a UserError: exit 2); bench/cli.py
    says it as it says every error."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class _Unbroken:
    """A text stream whose reader may leave (`bench run ... | head`): what a run prints is a by-product of it, so
    a closed pipe sends the rest to /dev/null instead of failing the run with BrokenPipeError."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        """From now on the descriptor is /dev/null: later writes, and the interpreter's flush at exit, succeed."""
        with contextlib.suppress(OSError, ValueError):  # a stream with no descriptor (a test's capture)
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def output_may_close():
    """stdout and stderr as _Unbroken streams while a run, suite or sweep trains."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Unbroken(sys.stdout), _Unbroken(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def set_argument(s, help: str = "override a recipe key (VALUE in YAML; a mapping replaces the whole section)") -> None:
    s.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", type=assignment, help=help)


def out_and_plots(out: str | None, plots: str | None, name: str) -> tuple[Path, Path]:
    """The results and plots folders of a command that runs many recipes and reports: results/<name> unless --out,
    and the plots beside it by the results folder's name (--out results/mine draws into plots/mine, not over the
    committed study's figures) unless --plots."""
    results = Path(out or Path("results") / name)
    return results, Path(plots or plots_beside(results))


def report_arguments(s, named: str, baseline: str, baseline_metavar: str | None = None) -> None:
    """--out, --plots and --baseline of the commands that run many recipes and then report (suite, sweep)."""
    s.add_argument("--out", type=out_folder, help=f"results directory (default: results/<{named}>)")
    s.add_argument("--plots", type=out_folder, help="plots directory (default: plots/<the results folder's name>)")
    s.add_argument("--baseline", metavar=baseline_metavar, help=baseline)
