"""`bench sweep`: tune optimizers at each batch with one budget, rerun the best over seeds, then write the verdict
(docs/sweeps.md documents the sweep file).

    bench sweep SWEEP [--list] [--only TEXT] [--until TIME] [--wait] [--out RESULTS]
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from bench.analysis import commands as analysis_commands
from bench.analysis.render import claims_of
from bench.commands import out_and_plots, output_may_close, report_arguments, stop_code
from bench.commands.results import sweep_cost
from bench.errors import UserError


def cmd_sweep(args) -> int:
    with output_may_close():
        return run_and_report(args)


def run_and_report(args) -> int:
    """`bench sweep` (and `bench run SWEEP.yaml`): the runs left to do, then the tables and figures, ending on the
    verdict in words; --list: the trials and their cost instead."""
    from bench import sweep

    spec = sweep.load(args.sweep)
    if args.list:
        trials = sweep.expand(args.sweep, spec)
        try:
            images = sweep.training_images(spec)
        except UserError:
            images = None  # the data is not here: no steps, and the cost says why
        print(sweep.trial_table(spec, trials, images), end="")
        for warning in sweep.search_warnings(spec):
            print(f"bench: warning: {args.sweep}: {warning}", file=sys.stderr)
        results, _ = out_and_plots(args.out, None, spec.name)
        finished = sweep.own_finished_runs(spec, results)  # read once: the speed and the counts
        print(
            "\n"
            + sweep_cost(spec, trials, args.throughput, sweep.measured_speed(finished), sweep.finished_counts(finished))
        )
        if finished:
            print(next_runs_line(sweep.next_runs(spec, trials, results)))
        return 0
    results, plots = out_and_plots(args.out, args.plots, spec.name)
    if args.only and args.wait:
        raise UserError(
            f"bench sweep {args.sweep}: --only runs no local stage and no reruns, so --wait has nothing to wait for; "
            "give one of them"
        )
    try:
        runs, waiting, held = sweep.run_sweep(
            args.sweep,
            results,
            args.only,
            args.allow_dirty,
            args.allow_mixed_kernels,
            until_time(args.until),
            args.wait,
        )
    except sweep.Preempted as e:
        print(f"preempted: {e}; run the same command to resume")
        return stop_code(e.signal_name)
    except sweep.Until as e:
        why = f"other processes hold {', '.join(e.held)}, past it" if e.held else "has passed: no run starts after it"
        print(f"--until {args.until}{':' * bool(e.held)} {why} ({e}); run the same command to go on")
        return 0
    if held:  # the process that finishes them writes the tables, with every run in
        print(f"nothing left to claim: other processes hold {len(held)} run(s) ({', '.join(held)}); they go on")
    elif waiting:
        print("not complete yet (run the same command again): " + "; ".join(waiting))
    if args.only or held:
        return 0

    written = analysis_commands.regenerate_sweep(results, plots, args.baseline, getattr(args, "paper", False))
    print("\n".join(_sweep_end(results, plots, written)))
    return 0


def until_time(text: str | None) -> float | None:
    """bench sweep --until: HH:MM (its next occurrence, local time) or an ISO date and time, as a POSIX time."""
    if text is None:
        return None
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}", text):
            now = datetime.now()
            hour, minute = map(int, text.split(":"))
            at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
            return (at + timedelta(days=at <= now)).timestamp()
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UserError(
            f"bench sweep --until {text!r}: expected HH:MM (its next occurrence, local time) or an ISO date and "
            "time such as 2026-11-29T09:00"
        ) from None


MAIN_FIGURES = ("tuned_top1_vs_batch.png", "steps_to_result.png")  # a sweep's main figure, the first it drew (a
# steps-to-result sweep draws no Top-1 figure)


def next_runs_line(runs: list) -> str:
    """--list's last line: what the sweep would start now (sweep.next_runs), or that it is complete, which the
    bound above does not say (a cell's local stage stops where its best point is no longer at its edge)."""
    from bench import sweep

    if not runs:
        return (
            "complete: every cell's trials, local stage and reruns have finished (a local stage stops once its best "
            "point lies inside it: the bound above is the most it could take); `bench sweep` writes the tables"
        )
    counts = Counter(sweep.ROLE_COUNTS[t.role][0] for t in runs)
    kinds = ", ".join(f"{counts[k]} {word}" for k, word in NEXT_WORDS.items() if counts[k])
    names = ", ".join(t.name for t in runs[:5]) + (", ..." if len(runs) > 5 else "")
    return f"next: {len(runs)} run{'s' * (len(runs) != 1)} can start now ({kinds}: {names}); more may follow as they finish"


NEXT_WORDS = {"trials": "trials", "local": "local points", "reruns": "reruns"}  # sweep.ROLE_COUNTS' count keys


def _sweep_end(results: Path, plots: Path, written: list[Path]) -> list[str]:
    """What `bench sweep` ends with: what it wrote in one line, the verdict's claims in words (render.claims_of),
    then the verdict table's path and the main figure's."""
    tables, figures = ({p.stem for p in written if p.suffix == suffix} for suffix in (".md", ".png"))
    verdict = results / "verdict.md"
    figure = next(p for name in MAIN_FIGURES for p in written if p.name == name)
    return [
        f"wrote {len(tables)} tables (markdown and csv) to {results} and {len(figures)} figures (PNG and SVG) to {plots}",
        *(f"- {c}" for c in claims_of(verdict.read_text())),
        f"verdict table: {verdict}",
        f"main figure: {figure}",
    ]


def add_parsers(sub) -> None:
    s = sub.add_parser(
        "sweep",
        help="tune optimizers at each batch with one budget, rerun the best over seeds, "
        "then report the verdict (docs/sweeps.md documents the sweep file)",
    )
    s.add_argument("sweep", metavar="SWEEP", help="the sweep file (YAML: base recipe, batches, arms, search, reruns)")
    s.add_argument(
        "--list",
        action="store_true",
        help="print the trials (a markdown table), the search's warnings, the runs and their GPU-hours, and exit",
    )
    s.add_argument(
        "--throughput",
        type=float,
        metavar="IMG_S",
        help="with --list: training images/s per GPU for the GPU-hours (default, ResNet-50 at 224 px only: "
        "NVIDIA's MLPerf H100 figure, not bench's; `bench perf train RECIPE --device cuda` measures bench's)",
    )
    s.add_argument("--only", metavar="TEXT", help="run only the trials whose names contain TEXT (no reruns, no report)")
    s.add_argument(
        "--until",
        metavar="TIME",
        help="start no run after TIME (HH:MM, its next occurrence in local time, or an ISO date and time): the run "
        "going then finishes and the sweep stops, to go on with the same command (an allocation's or a session's end)",
    )
    s.add_argument(
        "--wait",
        action="store_true",
        help="while other processes hold runs this one needs (a trial, a local point), check again every minute and go "
        "on when they finish, instead of ending: processes side by side on one machine (a job array's tasks should "
        "end, not hold their GPUs idle); it names the held runs when they change, and a check that finds nothing to "
        "do draws no progress bars",
    )
    report_arguments(s, "sweep name", "the arm the verdict compares the others with", "ARM")
    s.add_argument(
        "--paper",
        action="store_true",
        help="also write each figure one column wide (3.5 in) for a paper: <figure>-paper.pdf and <figure>-paper.svg",
    )
    s.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run from a tree with uncommitted changes to bench's checkout, each run recording its commit as +dirty "
        "(refused by default: a study's runs come from one clean commit)",
    )
    s.add_argument(
        "--allow-mixed-kernels",
        action="store_true",
        help="resume a study on another kernel platform "
        "(CPU capability and processor, GPU or torch build) than its finished runs' (refused by default)",
    )
    s.set_defaults(func=cmd_sweep)
