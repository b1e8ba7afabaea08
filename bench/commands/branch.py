"""`bench branch`: the critical batch along training, by branching from one small-batch run (bench/branch.py
documents the branch file; bench/analysis/branching.py the criterion), then its table.

    bench branch FILE [--out RESULTS] [--list]
"""

from __future__ import annotations

from pathlib import Path

from bench.analysis import commands as analysis_commands
from bench.commands import out_and_plots, output_may_close, stop_code
from bench.errors import out_folder


def cmd_branch(args) -> int:
    with output_may_close():
        return _branch(args)


def _branch(args) -> int:
    """The runs left to do (or, --list, the runs), then `bench table branching` of the results."""
    from bench import branch

    spec = branch.load(args.file)
    results, plots = out_and_plots(args.out, args.plots, spec.name)
    if args.list:
        for ref, branches in branch.plan(Path(args.file), spec):
            print(f"{ref.name}: global_batch {ref.global_batch}, lr {ref.optimizer.lr:g}, {ref.epochs:.4g} epochs")
            for recipe, _ in branches:
                print(f"  {recipe.name}: global_batch {recipe.global_batch}, lr {recipe.optimizer.lr:g}")
        return 0
    try:
        outcomes = branch.run_branching(Path(args.file), results, args.allow_mixed_kernels)
    except branch.Preempted as e:
        print(f"preempted: {e}; run the same command to resume")
        return stop_code(e.signal_name)
    for name, outcome in outcomes:
        print(f"{name}: {outcome}")
    written = analysis_commands.regenerate_branching(results, plots)
    table = next(p for p in written if p.name == "branching.md")
    print()
    print(table.read_text(), end="")
    tables = [p for p in written if p.suffix in (".md", ".csv")]
    figures = [p for p in written if p.suffix == ".png"]
    print(f"\nwrote {len(tables) // 2} tables (markdown and csv) to {results} and {len(figures)} figure(s) to {plots}")
    return 0


def add_parsers(sub) -> None:
    s = sub.add_parser(
        "branch",
        help="the critical batch along training: a reference run at B0, branches at k x B0 from its checkpoints, "
        "then their table (docs/sweeps.md, Branching; recipes/branch/example.yaml)",
    )
    s.add_argument("file", metavar="FILE", help="the branch file (YAML: base recipe, b0, k, points)")
    s.add_argument("--out", type=out_folder, help="results directory (default: results/<name>)")
    s.add_argument("--plots", type=out_folder, help="plots directory (default: plots/<the results folder's name>)")
    s.add_argument("--list", action="store_true", help="print the reference and branch runs with their lr, and exit")
    s.add_argument(
        "--allow-mixed-kernels",
        action="store_true",
        help="add runs on another kernel platform than the finished runs' (refused by default)",
    )
    s.set_defaults(func=cmd_branch)
