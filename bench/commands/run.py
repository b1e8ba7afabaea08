"""`bench run` and `bench suite`: train one recipe (on N local workers through torchrun), or every recipe of a
folder, then report.

    bench run RECIPE [--set KEY.PATH=VALUE ...] [--out DIR] [--nproc N]
    bench run SWEEP.yaml   (the sweep as `bench sweep` runs it: bench/commands/sweep.py)
    bench suite DIR [--out RESULTS] [--plots PLOTS]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.analysis import commands as analysis_commands
from bench.commands import (
    DEFAULT_RESULTS,
    Failure,
    out_and_plots,
    output_may_close,
    report_arguments,
    set_argument,
    stop_code,
)
from bench.commands.sweep import run_and_report
from bench.data.check import check_data
from bench.engine import launch
from bench.engine.plan import recipe_plan
from bench.errors import UserError, count, out_folder
from bench.rundir import RunDir, status_since


def load_recipe(args, notes: list[str] | None = None):
    """The recipe of `bench run` and `bench submit`, with --set, --tensorboard and --threads; `notes` gets the run
    name a --set gave it (`bench run` says nothing: its run directory line names the run, and a refusal stays one
    line)."""
    from bench import recipe

    flags = (
        (["logging.tensorboard=true"] if args.tensorboard else [])
        + ([f"engine.threads={args.threads}"] if args.threads else [])
        + ([f"logging.wandb.project={args.wandb}"] if args.wandb else [])
    )
    return recipe.load(args.recipe, args.set + flags, notes=notes)


def worker_args(args) -> list[str]:
    """The `bench run` arguments each torchrun worker receives."""
    out = ["run", args.recipe, "--out", args.out, *(a for s in args.set for a in ("--set", s))]
    if args.tensorboard:
        out.append("--tensorboard")
    if args.threads:
        out += ["--threads", args.threads]
    if args.wandb:
        out += ["--wandb", args.wandb]
    if args.run_dir:
        out += ["--run-dir", args.run_dir]
    if args.restart:
        out.append("--restart")
    if args.no_progress:
        out.append("--no-progress")
    return out


def cmd_run(args) -> int:
    with output_may_close():
        return _run(args)


def _run(args) -> int:
    from bench import branch, sweep

    if Path(args.recipe).is_dir():  # recipes/mini: a folder of recipes is a suite's
        raise UserError(
            f"{args.recipe}: a folder, not a recipe file; `bench suite {args.recipe}` runs every recipe in it "
            "(skipping completed ones), then reports and plots"
        )
    if branch.is_branch_file(args.recipe):  # recipes/branch/example.yaml: a reference and its branches
        raise UserError(f"{args.recipe}: a branch file, not a recipe; `bench branch {args.recipe}` runs it")
    if sweep.is_sweep_file(args.recipe):  # recipes/demo.yaml: a comparison
        return _run_sweep(args)
    r = load_recipe(args)  # bad input stops here, before any worker starts
    check_data(args.recipe, r)
    if args.nproc > 1:
        try:
            recipe_plan(r, args.nproc)
        except UserError as e:
            raise UserError(f"{args.recipe} with --nproc {args.nproc}: {e}") from None
        started = time.time()
        try:
            return launch.run_local(args.nproc, worker_args(args), args.max_restarts)
        except launch.Stopped as e:
            return _after_stop(str(e), r.name, args, started)

    from bench.engine.train import train

    run = train(
        r,
        Path(args.out),
        progress=not args.no_progress,
        restart=args.restart,
        run_dir=Path(args.run_dir) if args.run_dir else None,
        inputs=(Path(args.recipe),),  # recorded by content: a user's recipe needs no commit into bench
    )
    if run:  # rank 0; the others never import pandas (half a second of every worker's start)
        from bench.analysis import report, results

        print()
        print(report.summary(results.load([run.path])))
        if run.meta.get("status") == "preempted" and "LOCAL_RANK" not in os.environ:  # torchrun's launcher answers
            return stop_code(run.meta.get("stopped_by"))
    return 0


def _run_sweep(args) -> int:
    """`bench run SWEEP.yaml` (the main job, recipes/demo.yaml): the sweep as `bench sweep` runs it (results in
    results/<name> unless --out says where, figures in plots/<its name>), from any tree as a one-recipe run is (each
    run records its commit; `bench sweep` keeps refusing uncommitted changes for a study), ending as it does: the
    verdict in words, its table's and the main figure's paths. A one-recipe run's options do not apply."""
    from bench import sweep

    options = {"--set": args.set, "--run-dir": args.run_dir, "--restart": args.restart, "--nproc": args.nproc > 1}
    options |= {"--tensorboard": args.tensorboard, "--threads": args.threads, "--wandb": args.wandb}
    if given := [flag for flag, on in options.items() if on]:
        raise UserError(
            f"{args.recipe}: a sweep file, which takes no {given[0]} (an option of one recipe's run); "
            f"`bench sweep {args.recipe} --help` lists a sweep's options"
        )
    name = sweep.load(args.recipe).name
    out, plots = out_and_plots(args.out if args.out != str(DEFAULT_RESULTS) else None, None, name)
    return run_and_report(
        argparse.Namespace(
            sweep=args.recipe,
            list=False,
            only=None,
            out=str(out),
            plots=str(plots),
            baseline=None,
            allow_dirty=True,
            allow_mixed_kernels=False,
            until=None,
            wait=False,
        )
    )


def _after_stop(signal_name: str, recipe_name: str, args, since: float) -> int:
    """The launcher was stopped: when its workers ended the run "preempted" (they checkpointed), exit 0 for a
    scheduler's SIGTERM and 130 for a Ctrl-C (stop_code)."""
    for path in [Path(args.run_dir)] if args.run_dir else RunDir.runs_of(Path(args.out), recipe_name)[::-1]:
        if status_since(path, since) == "preempted":
            print(f"preempted by {signal_name}: checkpoint in {path}; run the same command to resume")
            return stop_code(signal_name)
    raise Failure(
        f"stopped by {signal_name} before the workers wrote a checkpoint; the same command resumes from the last one",
        stop_code(signal_name) or 1,
    )


def cmd_suite(args) -> int:
    with output_may_close():
        return _suite(args)


def _suite(args) -> int:
    from bench.suite import Preempted, run_suite

    folder = Path(args.folder)
    results, plots = out_and_plots(args.out, args.plots, folder.name)
    try:
        outcomes = run_suite(folder, results, args.set)
    except Preempted as e:
        print(f"preempted: {e}; run the same command to resume")
        return stop_code(e.signal_name)
    for name, outcome in outcomes:
        print(f"{name}: {outcome}")
    for path in analysis_commands.regenerate(results, plots, args.baseline):
        print(f"wrote {path}")
    return 0


def run_arguments(s) -> None:
    """The arguments of one recipe's run, `bench run`'s and `bench submit`'s."""
    s.add_argument(
        "recipe", metavar="RECIPE", help="a recipe file, or a sweep file (run as `bench sweep` runs it: the main job)"
    )
    set_argument(s)
    s.add_argument(
        "--out", type=out_folder, default=str(DEFAULT_RESULTS), help="results directory (default: %(default)s)"
    )
    s.add_argument("--restart", action="store_true", help="start a new run even if an unfinished one can be resumed")
    s.add_argument("--run-dir", help="resume this run directory")
    s.add_argument(
        "--tensorboard",
        action="store_true",
        help="live TensorBoard curves in <run>/tensorboard (recipe key logging.tensorboard)",
    )
    s.add_argument("--threads", metavar="N|auto", help="CPU threads per process (recipe key engine.threads)")
    s.add_argument(
        "--wandb",
        metavar="PROJECT",
        help="Weights & Biases curves to PROJECT, offline unless the "
        "recipe says online (recipe key logging.wandb.project; timm's --log-wandb)",
    )


def add_parsers(sub) -> None:
    s = sub.add_parser("run", help="train one recipe (resuming its unfinished run, if any)")
    run_arguments(s)
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--nproc", type=count(1), default=1, metavar="N", help="start N local workers through torchrun")
    s.add_argument("--max-restarts", type=count(0), default=0, help="torchrun restarts after a worker fails")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("suite", help="run every recipe of a folder (skipping completed runs), then report and plot")
    s.add_argument("folder", metavar="DIR", help="a folder of recipe files")
    report_arguments(s, "DIR name", "optimizer the compare table's speedups are relative to")
    set_argument(s, "override a key in every recipe")
    s.set_defaults(func=cmd_suite)
