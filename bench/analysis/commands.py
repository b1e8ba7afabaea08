"""`bench report`, `bench table`, `bench plot`, and `regenerate()` for `bench suite`.

    bench report [PATH...] [--runs] [--format markdown|csv|latex|parquet|json] [--out FILE]
    bench table TABLE [PATH...] [--format markdown|csv|latex] [--baseline OPTIMIZER|ARM] [--batch B] [--cells TREE]
    bench plot [PATH...] [--out DIR] [--paper]

PATH: run directories or results trees (any folder holding run directories). Torch-free, as all of the analysis:
`bench project`, `bench export` and `bench clean`, which need the runner's side too, are bench/commands/results.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import catalog
from bench.analysis import export
from bench.analysis.render import FORMATS, render, side_notes
from bench.errors import UserError, out_file, out_folder
from bench.files import atomic_write

EXPORTS = ("parquet", "json")  # bench.analysis.export.FORMATS, without importing pandas for every command
TABLE_NAMES = tuple(catalog.TABLES)
EXTENSIONS = {"markdown": "md", "csv": "csv"}
FORMAT_OPTION = {"choices": FORMATS, "default": "markdown", "help": "output format (default: %(default)s)"}
STRICT_OPTION = {
    "action": "store_true",
    "help": "a damaged run directory is an error (default: named in a warning and left out)",
}
PAPER_OPTION = {
    "action": "store_true",
    "help": "also write each figure one column wide (3.5 in) for a paper: <figure>-paper.pdf and <figure>-paper.svg",
}


def cmd_report(args) -> int:
    if args.columns:  # the definitions, without reading any run (or importing pandas)
        for column, meaning in export.COLUMNS.items():
            print(f"{column}: {meaning}")
        print(f"<column>_std: {export.STD}<column>")
        return 0
    from bench.analysis import report, results

    runs = results.load(args.paths, args.strict)
    if args.format in export.FORMATS:  # the raw table and its definitions, for notebooks
        frame, name = (runs, "runs") if args.runs else (results.aggregate(runs), "recipes")
        text = export.write(export.relative_runs(frame, args.paths), args.format, args.out, name)
    else:
        table = report.build(runs, per_run=args.runs)
        text = render(table, args.format)
        sys.stderr.write(side_notes([table], args.format))
        if args.out:
            atomic_write(Path(args.out), text)
    if text is not None and not args.out:
        print(text, end="")
    return 0


def cmd_table(args) -> int:
    """The table on stdout; as csv, a plain table for read_csv, its title and notes on stderr."""
    from bench.analysis import results, tables

    record = catalog.TABLES.get(args.name)
    reads_runs = record.runs if record else True
    if record and record.needs and args.paths == args.default_paths and not Path(args.paths[0]).exists():
        reads_runs = False  # a paper's table where the default results folder does not exist: published alone
    study = results.load_study(args.paths, args.strict) if reads_runs else None
    swapped_in = None
    if getattr(args, "cells", None):  # scaling's only
        try:
            swapped_in = results.load_study([args.cells], args.strict)
        except UserError as e:
            raise UserError(f"--cells: {e}") from None
    table = tables.build(args.name, study, args.baseline, args.batch, swapped_in)
    print(render(table, args.format), end="")
    sys.stderr.write(side_notes([table], args.format))
    return 0


def plots_beside(results: str | Path) -> Path:
    """Where the figures of a results folder go unless told: plots/<its name> (results/mini: plots/mini), as
    bench plot, suite, sweep and branch draw them; not loose in plots/, nor over another study's."""
    return Path("plots") / Path(results).resolve().name


def cmd_plot(args) -> int:
    from bench.analysis import plots, results

    if args.out is None and len(args.paths) > 1:
        raise UserError(f"bench plot {' '.join(args.paths)}: the figures of several folders go where --out names")
    out = args.out or plots_beside(args.paths[0])
    for path in plots.plot_all(results.load_study(args.paths, args.strict), out, args.paper):
        print(path)
    return 0


def regenerate(results_dir: str | Path, plots_dir: str | Path | None, baseline: str | None = None) -> list[Path]:
    """Rewrite the report and tables (markdown and csv, in `results_dir`) and the plots (PNG and SVG, in
    `plots_dir`; None: none) of one results tree; returns the files written. Paper tables are written only when
    some run is in their setting, the schedules table when a recipe whose batch moves (adaptive_batch) has seeds.
    `baseline`: the optimizer B of the compare table's speedups."""
    from bench.analysis import plots, report, results, tables

    results_dir = Path(results_dir)
    study = results.load_study([results_dir])
    outputs = {"report": report.table(study.runs), "compare": tables.build("compare", study, baseline)}
    for name, setting in tables.NEEDS.items():
        if (study.groups["paper"] == setting).any():
            outputs[name] = tables.build(name, study, tables.baseline_for(name, baseline))
    moving = study.runs[study.runs["adaptive_batch"].astype(bool)]
    if (moving.groupby("recipe").size() > 1).any():  # a moving batch's seeds: its recipe against the others
        outputs["schedules"] = tables.build("schedules", study)
    return _write_tables(results_dir, outputs) + (plots.plot_all(study, plots_dir) if plots_dir is not None else [])


def regenerate_sweep(
    results_dir: str | Path, plots_dir: str | Path, baseline: str | None = None, paper: bool = False
) -> list[Path]:
    """A sweep's results tree: the report, the tuning and verdict tables (markdown and csv) and the sweep figures
    (`paper`: each also one column wide, PDF and SVG)."""
    from bench.analysis import report, results, tables, tuning_plots

    results_dir = Path(results_dir)
    study = results.load_study([results_dir])
    outputs = {
        "report": report.table(study.runs),
        **{name: tables.build(name, study, tables.baseline_for(name, baseline)) for name in tables.SWEEP_TABLES},
    }
    return _write_tables(results_dir, outputs) + tuning_plots.plot_all(study, plots_dir, paper)


def regenerate_branching(results_dir: str | Path, plots_dir: str | Path | None = None) -> list[Path]:
    """A `bench branch` results tree: the report and the branching table (markdown and csv), and its figure (PNG
    and SVG, in `plots_dir`; None: none)."""
    from bench.analysis import branch_plots, report, results, tables

    results_dir = Path(results_dir)
    study = results.load_study([results_dir])
    outputs = {"report": report.table(study.runs), "branching": tables.build("branching", study)}
    figures = branch_plots.plot_all(study, plots_dir) if plots_dir is not None else []
    return _write_tables(results_dir, outputs) + figures


def _write_tables(results_dir: Path, outputs: dict) -> list[Path]:
    """Each table as <name>.md (with its title and notes) and <name>.csv (the plain table, read_csv's)."""
    written = []
    for name, table in outputs.items():
        for fmt, ext in EXTENSIONS.items():
            path = results_dir / f"{name}.{ext}"
            atomic_write(path, render(table, fmt))
            written.append(path)
    return written


SUPPRESS = argparse.SUPPRESS  # an option a table does not take (tables.build refuses it): not in its help


def paths_option(default_results: Path) -> dict:
    """The PATH... argument of a command over results (add_argument's keywords)."""
    return {
        "nargs": "*",
        "default": [str(default_results)],
        "metavar": "PATH",
        "help": f"run directories or results trees (default: {default_results})",
    }


def add_parsers(sub, default_results: Path) -> None:
    where, fmt, strict = paths_option(default_results), FORMAT_OPTION, STRICT_OPTION

    s = sub.add_parser("report", help="one row per recipe (seeds aggregated), or per run")
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--runs", action="store_true", help="one row per run instead of per recipe")
    s.add_argument(
        "--format",
        choices=FORMATS + EXPORTS,
        default="markdown",
        help="markdown, csv, latex: the "
        "rendered report; parquet, json: every column's raw values and definition, for pandas "
        "(default: %(default)s)",
    )
    s.add_argument(
        "--out", type=out_file, metavar="FILE", help="write to FILE instead of standard output (parquet needs it)"
    )
    s.add_argument("--columns", action="store_true", help="print every exported column's definition and exit")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser(
        "table",
        help="a paper's table side by side with measured runs, `compare`, or a sweep's tables",
        description="Tables: " + ", ".join(TABLE_NAMES) + "; `bench table TABLE --help` says what each shows.",
    )
    names = s.add_subparsers(dest="name", required=True, metavar="TABLE")
    for name, record in catalog.TABLES.items():  # each its own help: what it shows and the options it takes
        t = names.add_parser(name, help=record.help.replace("%", "%%"), description=record.help)
        t.add_argument("paths", **where)
        t.add_argument("--strict", **strict)
        t.add_argument("--format", **fmt)
        t.add_argument("--baseline", metavar="ARM" if record.sweep else "OPTIMIZER", help=record.baseline or SUPPRESS)
        t.add_argument(
            "--batch",
            type=int,
            metavar="B",
            help="only the recipes of global batch B (an adaptive run's starting batch)"
            if name == "compare"
            else SUPPRESS,
        )
        if name == "scaling":
            t.add_argument(
                "--cells",
                metavar="TREE",
                help="another sweep's results tree whose cells (arm, batch) replace the study's own: a check that "
                "searched them otherwise (the warm-up with the lr); the ratios of the arms swapped in, each swapped "
                "cell against the study's, and whether any ratio's word changes",
            )
        t.set_defaults(func=cmd_table, default_paths=where["default"])

    s = sub.add_parser("plot", help="figures (PNG and SVG) of the runs")
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument(
        "--out", type=out_folder, metavar="DIR", help="output folder (default: plots/<the results folder's name>)"
    )
    s.add_argument("--paper", **PAPER_OPTION)
    s.set_defaults(func=cmd_plot)
