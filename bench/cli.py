"""The `bench` command line: main(), the error handling and the exit codes. The commands are bench/commands/, a
module per family, each adding its own parsers (`bench report | table | plot`: bench/analysis/commands.py).

    bench validate RECIPE...   |   bench recipe keys      (bench/commands/recipe.py)
    bench run RECIPE [--set KEY.PATH=VALUE ...] [--out DIR] [--nproc N]   |   bench suite DIR   (run.py)
    bench sweep SWEEP [--list] [--only TEXT] [--out RESULTS]   (sweep.py)
    bench branch FILE [--out RESULTS] [--list]   (branch.py)
    bench submit RECIPE --nodes N --gpus-per-node G [--partition P] [--dry-run]   (submit.py)
    bench report | table | plot PATH...   (bench/analysis/commands.py)
    bench export | clean | project PATH...   (results.py)
    bench data synth --out DIR [--classes N ...]   (data.py)
    bench perf optim [...]   (perf.py)

Bad input (a `UserError`) prints one line and exits with code 2; tracebacks
are left for bugs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from bench.analysis import commands as analysis_commands
from bench.commands import (
    DEFAULT_RESULTS,
    INTERRUPTED,
    Failure,
    branch,
    data,
    perf,
    recipe,
    results,
    run,
    submit,
    sweep,
)
from bench.engine.threads import quiet_openmp
from bench.errors import ArgumentParser, OutOfSpace, UserError, one_line_warnings
from bench.rundir import versions

MAX_MESSAGE = 1000  # characters of an error message: a value echoed back is never a page


class _Version(argparse.Action):
    """`bench --version`: bench, python, torch, torchvision, timm, DALI... one per line (a bug report's first lines)."""

    def __call__(self, parser, namespace, values, option_string=None):
        found = versions()
        print(f"bench {found.pop('bench')}")
        for name, version in found.items():
            print(f"{name} {version or 'not installed'}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="bench", description="Large-batch ImageNet training benchmarks.")
    p.add_argument("--version", action=_Version, nargs=0, help="print the versions of bench and what it runs on")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in (recipe, run, sweep, branch, submit):
        family.add_parsers(sub)
    analysis_commands.add_parsers(sub, DEFAULT_RESULTS)
    for family in (results, data, perf):
        family.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    code = _main(argv)
    if code == INTERRUPTED:
        _end_by_sigint()
    return code


def _end_by_sigint() -> None:
    """End by SIGINT itself, not exit(130): a shell stops its loop or script only when its child died of the
    SIGINT (it then shows $? = 130); a child that exits 130 is taken to have handled the Ctrl-C."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.raise_signal(signal.SIGINT)


def _main(argv: list[str] | None) -> int:
    quiet_openmp()  # before torch loads OpenMP
    one_line_warnings()
    p = parser()
    try:
        args, rest = p.parse_known_args(argv)
        if "rest" in vars(args):  # bench perf: the benchmark's own options, for its main()
            args.rest = rest
        elif rest:
            p.error(f"unrecognized arguments: {' '.join(rest)}")
        return args.func(args)
    except UserError as e:
        return fail(str(e), 2)
    except Failure as e:
        return fail(str(e), e.code)
    except OutOfSpace as e:
        return fail(
            f"{e}; the last checkpoint is intact: free space, then run the same command to resume", OutOfSpace.exit_code
        )
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # `bench report ... | head`: the reader stopped; stop as quietly as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def fail(message: str, code: int) -> int:
    """Say what went wrong in one line. A torchrun worker writes it to its reply file instead, so the
    launcher reports it once for all ranks (torchrun prints it as the failure's root cause)."""
    message = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + " ... (cut)"
    reply = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if reply:
        # the exit code too: torchrun may SIGTERM a worker after it replied (its exitcode is then -15)
        Path(reply).write_text(json.dumps({"message": message, "timestamp": int(time.time()), "exit_code": code}))
    else:
        print(f"bench: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
