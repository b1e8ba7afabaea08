"""The `bench` command line.

    bench validate RECIPE...
    bench run RECIPE [--set KEY.PATH=VALUE ...] [--out DIR]
    bench report PATH...
    bench data synth --out DIR [--classes N ...]   (bench/data/commands.py)
    bench perf optim [...]

Bad input (a `UserError`) prints one line and exits with code 2; tracebacks
are left for bugs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import UserError

DEFAULT_RESULTS = Path("results/runs")


def cmd_validate(args) -> int:
    from bench import recipe

    for path in args.recipes:
        r = recipe.load(path, args.set)
        print(f"{path}: ok ({r.name}: {r.model.name}, {r.optimizer.name}, global_batch {r.global_batch})")
    return 0


def cmd_run(args) -> int:
    from bench import recipe
    from bench.analysis import report, results
    from bench.engine.train import train

    r = recipe.load(args.recipe, args.set)
    run = train(r, Path(args.out), progress=not args.no_progress)
    print()
    print(report.render(results.load([run.path])))
    return 0


def cmd_report(args) -> int:
    from bench.analysis import report, results

    print(report.render(results.load(args.paths)))
    return 0


def perf_benchmarks() -> dict[str, str]:
    """Each module of bench.perf is a benchmark; its docstring's first line is the help."""
    import ast

    folder = Path(__file__).parent / "perf"
    found = {}
    for path in sorted(folder.glob("[!_]*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = doc.split("\n")[0]
    return found


def cmd_perf(args) -> int:
    import importlib

    return importlib.import_module(f"bench.perf.{args.benchmark}").main(args.rest)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench", description="Large-batch ImageNet training benchmarks.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("validate", help="load and check recipe files")
    s.add_argument("recipes", nargs="+", metavar="RECIPE")
    s.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a recipe key")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("run", help="train one recipe into a new run directory")
    s.add_argument("recipe", metavar="RECIPE")
    s.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help="override a recipe key")
    s.add_argument("--out", default=str(DEFAULT_RESULTS), help="results directory (default: %(default)s)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("report", help="summarise run directories")
    s.add_argument("paths", nargs="*", default=[str(DEFAULT_RESULTS)], metavar="PATH")
    s.set_defaults(func=cmd_report)

    from bench.data import commands as data_commands

    data_commands.add_parser(sub)

    perf = sub.add_parser("perf", help="micro-benchmarks").add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, help in perf_benchmarks().items():
        s = perf.add_parser(name, help=help, add_help=False)
        s.add_argument("rest", nargs=argparse.REMAINDER)
        s.set_defaults(func=cmd_perf)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
