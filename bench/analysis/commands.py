"""`bench report`, `bench table`, `bench plot`, and `regenerate()` for `bench suite`.

    bench report [PATH...] [--runs] [--format markdown|csv|latex|parquet|json] [--out FILE]
    bench table NAME [PATH...] [--format markdown|csv|latex] [--baseline OPTIMIZER] [--batch B]
    bench plot [PATH...] --out DIR
    bench export tensorboard [PATH...] --out DIR

PATH: run directories or results trees (any folder holding run directories).
"""

from __future__ import annotations

from pathlib import Path

from bench.analysis.render import FORMATS
from bench.engine.rundir import FINISHED, atomic_write, checkpoints, prune_checkpoints
from bench.errors import UserError

EXPORTS = ("parquet", "json")  # bench.analysis.export.FORMATS, without importing pandas for every command
TABLE_NAMES = ("vrgd-imagenet", "vrgd-gap", "vrgd-cifar10", "mlperf-epochs", "compare", "verdict", "tuning")
EXTENSIONS = {"markdown": "md", "csv": "csv"}


def cmd_report(args) -> int:
    from bench.analysis import export

    if args.columns:  # the definitions, without reading any run (or importing pandas)
        for column, meaning in export.COLUMNS.items():
            print(f"{column}: {meaning}")
        print(f"<column>_std: {export.STD}<column>")
        return 0
    from bench.analysis import report, results

    if args.out and not Path(args.out).resolve().parent.is_dir():
        raise UserError(f"--out {args.out}: the folder {Path(args.out).resolve().parent} does not exist")
    runs = results.load(args.paths, args.strict)
    if args.format in export.FORMATS:  # the raw table and its definitions, for notebooks
        frame, name = (runs, "runs") if args.runs else (results.aggregate(runs), "recipes")
        text = export.write(export.relative_runs(frame, args.paths), args.format, args.out, name)
    else:
        text = report.render(runs, args.format, per_run=args.runs)
        if args.out:
            atomic_write(Path(args.out), text)
    if text is not None and not args.out:
        print(text, end="")
    return 0


def cmd_table(args) -> int:
    from bench.analysis import results, tables
    from bench.analysis.render import render

    table = tables.build(args.name, results.load_study(args.paths, args.strict), args.baseline, args.batch)
    print(render(table, args.format), end="")
    return 0


def cmd_export(args) -> int:
    from bench.analysis import results
    from bench.engine import tensorboard

    for folder in tensorboard.export(results.load(args.paths, args.strict), Path(args.out)):
        print(folder)
    return 0


def cmd_clean(args) -> int:
    """Remove the checkpoints of finished runs (completed or diverged): the analysis reads none of them."""
    from bench.analysis.results import find_runs, read_recipe_and_meta

    freed, runs = 0, 0
    for run in find_runs(args.paths):
        _, meta = read_recipe_and_meta(run)
        if meta.get("status") in FINISHED and checkpoints(run)[:len(checkpoints(run)) - args.keep_final]:
            freed += prune_checkpoints(run, int(args.keep_final))
            runs += 1
    print(f"removed the checkpoints of {runs} finished run{'s' * (runs != 1)}{' but the final one' * args.keep_final}: "
          f"{freed / 2**20:,.1f} MiB freed (unfinished runs keep theirs, to resume)")
    return 0


def cmd_plot(args) -> int:
    from bench.analysis import plots, results

    for path in plots.plot_all(results.load_study(args.paths, args.strict), args.out):
        print(path)
    return 0


def regenerate(results_dir: str | Path, plots_dir: str | Path | None, baseline: str | None = None) -> list[Path]:
    """Rewrite the report and tables (markdown and csv, in `results_dir`) and the plots (PNG and SVG, in
    `plots_dir`; None: none) of one results tree; returns the files written. Paper tables are written only when
    some run is in their setting. `baseline`: the optimizer B of the compare table's speedups."""
    from bench.analysis import plots, report, results, tables

    results_dir = Path(results_dir)
    study = results.load_study([results_dir])
    outputs = {"report": report.table(study.runs), "compare": tables.build("compare", study, baseline)}
    for name, setting in tables.NEEDS.items():
        if (study.groups["paper"] == setting).any():
            outputs[name] = tables.build(name, study, baseline)
    return _write_tables(results_dir, outputs) + (plots.plot_all(study, plots_dir) if plots_dir is not None else [])


def regenerate_sweep(results_dir: str | Path, plots_dir: str | Path, baseline: str | None = None) -> list[Path]:
    """A sweep's results tree: the report, the tuning and verdict tables (markdown and csv) and the sweep figures."""
    from bench.analysis import report, results, tables, tuning_plots

    results_dir = Path(results_dir)
    study = results.load_study([results_dir])
    outputs = {"report": report.table(study.runs), **{name: tables.build(name, study, baseline)
                                                       for name in tables.SWEEP_TABLES}}
    return _write_tables(results_dir, outputs) + tuning_plots.plot_all(study, plots_dir)


def _write_tables(results_dir: Path, outputs: dict) -> list[Path]:
    from bench.analysis.render import render

    written = []
    for name, table in outputs.items():
        for fmt, ext in EXTENSIONS.items():
            path = results_dir / f"{name}.{ext}"
            atomic_write(path, render(table, fmt))
            written.append(path)
    return written


def add_parsers(sub, default_results: Path) -> None:
    where = dict(nargs="*", default=[str(default_results)], metavar="PATH",
                 help=f"run directories or results trees (default: {default_results})")
    fmt = dict(choices=FORMATS, default="markdown", help="output format (default: %(default)s)")
    strict = dict(action="store_true", help="a damaged run directory is an error (default: named in a warning and "
                  "left out)")

    s = sub.add_parser("report", help="one row per recipe (seeds aggregated), or per run")
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--runs", action="store_true", help="one row per run instead of per recipe")
    s.add_argument("--format", choices=FORMATS + EXPORTS, default="markdown", help="markdown, csv, latex: the "
                   "rendered report; parquet, json: every column's raw values and definition, for pandas "
                   "(default: %(default)s)")
    s.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output (parquet needs it)")
    s.add_argument("--columns", action="store_true", help="print every exported column's definition and exit")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("table", help="a paper's table side by side with measured runs, or `compare`",
                       description="Tables: " + ", ".join(TABLE_NAMES) + ".")
    s.add_argument("name", metavar="NAME", help=" | ".join(TABLE_NAMES))
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--format", **fmt)
    s.add_argument("--baseline", metavar="OPTIMIZER", help="compare: the optimizer B of the speedups "
                   "(default: lars, else sgd, else the first by name); any optimizer the runs use")
    s.add_argument("--batch", type=int, metavar="B", help="compare: only the recipes of global batch B (an adaptive "
                   "run's starting batch)")
    s.set_defaults(func=cmd_table)

    s = sub.add_parser("export", help="the runs' curves for another tool: TensorBoard event files")
    s.add_argument("what", choices=["tensorboard"], help="tensorboard: a folder per run (optimizer/batch/seed/run), "
                   "for `tensorboard --logdir DIR`")
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--out", required=True, metavar="DIR", help="output folder")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("clean", help="remove the checkpoints of finished runs (report, table and plot need none)")
    s.add_argument("paths", nargs="+", metavar="PATH", help="run directories or results trees")
    s.add_argument("--keep-final", action="store_true", help="keep each finished run's final checkpoint")
    s.set_defaults(func=cmd_clean)

    s = sub.add_parser("plot", help="figures (PNG and SVG) of the runs")
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--out", default="plots", metavar="DIR", help="output folder (default: %(default)s)")
    s.set_defaults(func=cmd_plot)
