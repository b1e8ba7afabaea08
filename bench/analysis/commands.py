"""`bench report`, `bench table`, `bench plot`, and `regenerate()` for `bench suite`.

    bench report [PATH...] [--runs] [--format markdown|csv|latex|parquet|json] [--out FILE]
    bench table TABLE [PATH...] [--format markdown|csv|latex] [--baseline OPTIMIZER|ARM] [--batch B]
    bench plot [PATH...] --out DIR
    bench export tensorboard [PATH...] --out DIR

PATH: run directories or results trees (any folder holding run directories).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from bench import catalog
from bench.analysis.render import FORMATS
from bench.errors import UserError
from bench.files import atomic_write
from bench.rundir import FINISHED, checkpoints, prune_checkpoints

EXPORTS = ("parquet", "json")  # bench.analysis.export.FORMATS, without importing pandas for every command
TABLE_NAMES = tuple(catalog.TABLES)
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
        from bench.analysis.render import render, side_notes

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
    from bench.analysis.render import render, side_notes

    reads_runs = catalog.TABLES[args.name].runs if args.name in catalog.TABLES else True
    study = results.load_study(args.paths, args.strict) if reads_runs else None
    table = tables.build(args.name, study, args.baseline, args.batch)
    print(render(table, args.format), end="")
    sys.stderr.write(side_notes([table], args.format))
    return 0


def cmd_export(args) -> int:
    from bench.analysis import results
    from bench.engine import tensorboard

    for folder in tensorboard.export(results.load(args.paths, args.strict), Path(args.out)):
        print(folder)
    return 0


def cmd_clean(args) -> int:
    """Remove the checkpoints of finished runs (completed or diverged): the analysis reads none of them."""
    from bench.rundir import find_runs, read_recipe_and_meta

    freed, runs = 0, 0
    for run in find_runs(args.paths):
        _, meta = read_recipe_and_meta(run)
        if meta.get("status") in FINISHED and checkpoints(run)[: len(checkpoints(run)) - args.keep_final]:
            freed += prune_checkpoints(run, int(args.keep_final))
            runs += 1
    print(
        f"removed the checkpoints of {runs} finished run{'s' * (runs != 1)}{' but the final one' * args.keep_final}: "
        f"{freed / 2**20:,.1f} MiB freed (unfinished runs keep theirs, to resume)"
    )
    return 0


def cmd_plot(args) -> int:
    from bench.analysis import plots, results

    for path in plots.plot_all(results.load_study(args.paths, args.strict), args.out):
        print(path)
    return 0


def cmd_project(args) -> int:
    import pandas as pd

    from bench.analysis import project
    from bench.analysis.render import Table, cell, render, side_notes

    presets = project.load_presets(args.presets)
    if args.list:
        for name, c in presets.clusters.items():
            print(
                f"{name}: {c.per_node} x {c.accelerator} per node, {c.intra_GBps:g} GB/s in a node, "
                f"{c.inter_GBps:g} GB/s per node; {c.source}"
            )
        return 0
    if args.validate:
        table = project.validation_table(project.validate(presets))
        print(render(table, args.format), end="")
        sys.stderr.write(side_notes([table], args.format))
        return 0
    if not args.cluster:
        raise UserError("bench project: give --cluster NAME (--list shows the presets), or --validate")
    cluster, acc = project.cluster_of(presets, args.cluster)
    recipe_file = len(args.paths) == 1 and Path(args.paths[0]).is_file()
    if recipe_file and _project_file(args, acc):
        return 0
    if recipe_file:
        inputs, facts = project.recipe_inputs(args.paths[0])
        what = f"the recipe's {facts['epochs']:g} epochs of {facts['images']:,} images ({args.paths[0]})"
        parameters = args.parameters or facts["parameters"]
    elif args.reference:
        inputs, what = project.reference_inputs(), "LARS' epochs to 75.9% from MLPerf's reference convergence points"
        parameters = project.RESNET50_PARAMETERS
    else:
        inputs, facts = project.measured_inputs(args.paths)
        what = f"median steps and images to target over the seeds of {', '.join(args.paths)}"
        parameters = args.parameters or project.count_parameters(facts["run"])
    if args.throughput:
        device = project.Device(args.throughput, (args.step_overhead_ms or 0.0) / 1e3, acc.memory_GBps)
        speed = f"{args.throughput:,.0f} img/s per accelerator (given), {args.step_overhead_ms or 0:g} ms a step"
    elif args.reference or facts.get("resnet50_224"):
        device = project.Device(acc.images_per_second, acc.step_overhead_ms / 1e3, acc.memory_GBps)
        speed = f"{project.stack_words(cluster.accelerator, acc)}, {acc.step_overhead_ms:g} ms a step"
    else:
        raise UserError(
            f"{', '.join(args.paths)}: the runs' model has no published throughput on {cluster.accelerator}"
            " (the presets hold ResNet-50 at 224 px): give --throughput IMG_S per accelerator "
            "(measure it with `bench perf train RECIPE --device cuda` on one)"
        )
    counts = args.accelerators
    element_bytes = project.FLOAT_BYTES if args.reference else facts["element_bytes"]
    frame = project.project(inputs, cluster, device, counts, parameters, element_bytes)
    slow, fast = args.compare
    if args.reference:  # the other optimizer's step time at LARS' batches (its steps are not published)
        other = inputs.assign(optimizer=slow, steps=math.nan, images=math.nan)
        frame_all = pd.concat([frame, project.project(other, cluster, device, counts, parameters, element_bytes)])
    else:
        frame_all = frame
    note = (
        f"Projection (bench project, not a measurement): {what}; {args.cluster} ({cluster.source}); {speed}; "
        f"{parameters:,} parameters"
    )
    tables = [
        project.minutes_table(frame, f"Projected minutes to target on {args.cluster}", [note]),
        project.break_even_table(project.break_even(frame_all, slow, fast), slow, fast),
    ]
    efficient = project.saturation(frame)
    if len(efficient):
        sat = Table(
            "Accelerators worth adding: the most with parallel efficiency of at least "
            f"{project.SATURATED:.0%} against the fewest",
            ["optimizer", "batch", "efficient up to"],
        )
        sat.rows = [
            [project.paper.display(r.optimizer), cell(r.global_batch, "int"), cell(r.efficient_up_to, "int")]
            for r in efficient.itertuples()
        ]
        tables.append(sat)
    print("\n".join(render(t, args.format) for t in tables), end="")
    sys.stderr.write(side_notes(tables, args.format))
    if args.plot:
        for path in project.plot(frame, args.plot, f"{args.cluster}", note):
            print(path)
    return 0


def _project_file(args, acc) -> bool:
    """A sweep file: its runs and GPU-hours (bench sweep --list's), at --throughput or the preset's; True if it
    was one."""
    from bench import sweep
    from bench.analysis.project import sweep_cost

    if not sweep.is_sweep_file(args.paths[0]):
        return False
    spec = sweep.load(args.paths[0])
    print(sweep_cost(spec, sweep.expand(args.paths[0], spec), args.throughput))
    return True


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
            outputs[name] = tables.build(name, study, tables.baseline_for(name, baseline))
    return _write_tables(results_dir, outputs) + (plots.plot_all(study, plots_dir) if plots_dir is not None else [])


def regenerate_sweep(results_dir: str | Path, plots_dir: str | Path, baseline: str | None = None) -> list[Path]:
    """A sweep's results tree: the report, the tuning and verdict tables (markdown and csv) and the sweep figures."""
    from bench.analysis import report, results, tables, tuning_plots

    results_dir = Path(results_dir)
    study = results.load_study([results_dir])
    outputs = {
        "report": report.table(study.runs),
        **{name: tables.build(name, study, tables.baseline_for(name, baseline)) for name in tables.SWEEP_TABLES},
    }
    return _write_tables(results_dir, outputs) + tuning_plots.plot_all(study, plots_dir)


def _write_tables(results_dir: Path, outputs: dict) -> list[Path]:
    """Each table as <name>.md (with its title and notes) and <name>.csv (the plain table, read_csv's)."""
    from bench.analysis.render import render

    written = []
    for name, table in outputs.items():
        for fmt, ext in EXTENSIONS.items():
            path = results_dir / f"{name}.{ext}"
            atomic_write(path, render(table, fmt))
            written.append(path)
    return written


def _counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive integers")
    return sorted(set(counts))


def _pair(text: str) -> tuple[str, str]:
    names = tuple(text.split(","))
    unknown = [n for n in names if n not in catalog.OPTIMIZERS]
    if len(names) != 2 or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not two optimizer names SLOW,FAST" + (f" ({', '.join(unknown)} unknown)" if unknown else "")
        )
    return names


SUPPRESS = argparse.SUPPRESS  # an option a table does not take (tables.build refuses it): not in its help


def add_parsers(sub, default_results: Path) -> None:
    where = dict(
        nargs="*",
        default=[str(default_results)],
        metavar="PATH",
        help=f"run directories or results trees (default: {default_results})",
    )
    fmt = dict(choices=FORMATS, default="markdown", help="output format (default: %(default)s)")
    strict = dict(
        action="store_true", help="a damaged run directory is an error (default: named in a warning and left out)"
    )

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
    s.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output (parquet needs it)")
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
        t.set_defaults(func=cmd_table)

    s = sub.add_parser("export", help="the runs' curves for another tool: TensorBoard event files")
    s.add_argument(
        "what",
        choices=["tensorboard"],
        help="tensorboard: a folder per run (optimizer/batch/seed/run), for `tensorboard --logdir DIR`",
    )
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--out", required=True, metavar="DIR", help="output folder")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("clean", help="remove the checkpoints of finished runs (report, table and plot need none)")
    s.add_argument("paths", nargs="+", metavar="PATH", help="run directories or results trees")
    s.add_argument("--keep-final", action="store_true", help="keep each finished run's final checkpoint")
    s.set_defaults(func=cmd_clean)

    s = sub.add_parser(
        "project",
        help="project minutes to target on a cluster from steps to target (a model)",
        description="Minutes to target on N accelerators from a results tree's steps and images to "
        "target, or from MLPerf's published LARS epochs (--reference), with each optimizer's "
        "communication; --validate projects published ResNet-50 time-to-train results.",
    )
    s.add_argument("paths", **where)
    s.add_argument("--cluster", metavar="NAME", help="a cluster preset (--list shows them)")
    s.add_argument(
        "--presets", metavar="FILE", help="a preset file of your own (default: bench's, bench/analysis/clusters.yaml)"
    )
    s.add_argument("--list", action="store_true", help="list the cluster presets and exit")
    s.add_argument(
        "--validate",
        action="store_true",
        help="project the published runs of results/reference/time_to_train_resnet50.csv and show each error",
    )
    s.add_argument(
        "--reference", action="store_true", help="LARS on ResNet-50 from MLPerf's reference epochs instead of PATH"
    )
    s.add_argument(
        "--accelerators",
        type=_counts,
        default=[8, 64, 512, 4096],
        metavar="N,N,...",
        help="accelerator counts (default: 8,64,512,4096)",
    )
    s.add_argument(
        "--throughput",
        type=float,
        metavar="IMG_S",
        help="images/s per accelerator for the runs' model (default: the preset's, ResNet-50 at 224 px only, "
        "fit to the published MLPerf runs: NVIDIA's tuned stack, 7,480 img/s per H100, not bench's; "
        "`bench perf train RECIPE --device cuda` measures bench's own)",
    )
    s.add_argument(
        "--step-overhead-ms", type=float, metavar="MS", help="with --throughput: each step's fixed cost (default 0)"
    )
    s.add_argument(
        "--parameters", type=int, metavar="N", help="the model's parameters (default: counted from the runs' recipe)"
    )
    s.add_argument(
        "--compare",
        type=_pair,
        default=("vrgd_lars", "lars"),
        metavar="SLOW,FAST",
        help="the break-even pair (default: vrgd_lars,lars)",
    )
    s.add_argument("--format", **fmt)
    s.add_argument("--plot", metavar="DIR", help="also draw minutes against accelerators into DIR")
    s.set_defaults(func=cmd_project)

    s = sub.add_parser("plot", help="figures (PNG and SVG) of the runs")
    s.add_argument("paths", **where)
    s.add_argument("--strict", **strict)
    s.add_argument("--out", default="plots", metavar="DIR", help="output folder (default: %(default)s)")
    s.set_defaults(func=cmd_plot)
