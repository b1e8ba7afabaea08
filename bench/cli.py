"""The `bench` command line.

    bench validate RECIPE...
    bench run RECIPE [--set KEY.PATH=VALUE ...] [--out DIR]
    bench report PATH...
    bench data synth --out DIR [--classes N ...]
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


def cmd_data_synth(args) -> int:
    from pydantic import ValidationError

    from bench.data import synthetic
    from bench.recipe import describe_error

    try:
        spec = synthetic.SynthSpec(classes=args.classes, train_per_class=args.train_per_class,
                                   val_per_class=args.val_per_class, size=args.size, seed=args.seed)
    except ValidationError as e:
        raise UserError(f"bench data synth: {describe_error(e)}") from None
    out = Path(args.out)
    if out.exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    synthetic.write_dataset(out, spec)
    n = spec.classes * (spec.train_per_class + spec.val_per_class)
    print(f"wrote {n} images in {spec.classes} classes to {out}")
    return 0


def cmd_perf(args) -> int:
    from bench.perf import optim as perf_optim

    return perf_optim.main(args.rest)


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

    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    s = data.add_parser("synth", help="write the generated ImageNet-layout dataset")
    s.add_argument("--out", required=True)
    s.add_argument("--classes", type=int, default=10)
    s.add_argument("--train-per-class", type=int, default=100)
    s.add_argument("--val-per-class", type=int, default=30)
    s.add_argument("--size", type=int, default=72)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_data_synth)

    perf = sub.add_parser("perf", help="micro-benchmarks").add_subparsers(dest="perf_command", required=True, metavar="BENCHMARK")
    s = perf.add_parser("optim", help="optimizer step times on ResNet-50 shapes", add_help=False)
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
