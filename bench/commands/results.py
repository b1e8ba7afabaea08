"""`bench project`, `bench export` and `bench clean`: the commands over results that need the runner's side besides
(or instead of) the analysis, which stays torch-free and reads records only (bench/analysis/; docs/extending.md,
"Where things live").

    bench project [PATH... | RECIPE | SWEEP] --cluster NAME [--throughput IMG_S] [...]
    bench export tensorboard [PATH...] --out DIR
    bench clean PATH... [--keep-final]

What each takes from the runner's side: `bench project`, around the model of bench/analysis/project.py, a recipe
file's training images (from its data) and gradient groups (its batch plan), a sweep file's trials (bench/sweep.py;
`sweep_cost` is `bench sweep --list`'s too), and the parameters of a run whose meta predates their record
(its model, built on the meta device); `bench export` the TensorBoard writer (bench/engine/tensorboard.py);
`bench clean` the checkpoints (bench/engine/checkpoint.py).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

from bench import catalog
from bench.analysis.commands import FORMAT_OPTION, STRICT_OPTION, paths_option
from bench.analysis.render import Table, cell, render, side_notes
from bench.commands import DEFAULT_RESULTS
from bench.engine import checkpoint, tensorboard
from bench.engine.plan import recipe_plan
from bench.errors import BenchWarning, UserError, out_folder
from bench.rundir import FINISHED, find_runs, read_recipe_and_meta


def cmd_project(args) -> int:
    import pandas as pd

    from bench.analysis import project

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
    recipe_files = bool(args.paths) and all(Path(p).is_file() for p in args.paths)
    if recipe_files and len(args.paths) == 1 and _project_file(args, acc):
        return 0
    if recipe_files:
        inputs, facts, parameters = _recipes_inputs(args.paths, args.parameters)
        one = f" ({args.paths[0]})" if len(args.paths) == 1 else ""
        whose = "the recipes'" if len(args.paths) > 1 else "the recipe's"
        what = f"{whose} {facts['epochs']} of {facts['images']:,} images{one}"
    elif args.reference:
        inputs, what = project.reference_inputs(), "LARS' epochs to 75.9% from MLPerf's reference convergence points"
        parameters = project.RESNET50_PARAMETERS
    else:
        inputs, facts = project.measured_inputs(args.paths)
        what = f"median steps and images to target over the seeds of {', '.join(args.paths)}"
        parameters = args.parameters or project.recorded_parameters(facts["run"]) or count_parameters(facts["run"])
    if args.step_overhead_ms is not None and not args.throughput:
        raise UserError("bench project: --step-overhead-ms goes with --throughput (a preset has its own)")
    if args.throughput:
        if args.step_overhead_ms is None:
            warnings.warn(
                "--throughput without --step-overhead-ms: no fixed cost a step (kernel launches, the optimizer, the "
                "all-reduce's latency), which at small per-device batches misses by a third (docs/cluster.md); its "
                "intercept: `bench perf train` at two batches, step time against batch",
                BenchWarning,
            )
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
    tables = [project.minutes_table(frame, f"Projected minutes to target on {args.cluster}", [note])]
    even = project.break_even(frame_all, slow, fast)
    if recipe_files:  # a recipe's steps are its budget, not steps to target: nothing measured to set beside
        even = even.assign(measured_steps_ratio=math.nan)
    if len(even):  # both optimizers at some batch; otherwise there is nothing to break even with
        tables.append(project.break_even_table(even, slow, fast))
    else:
        tables[0].notes.append(
            f"No break-even table: it needs {project.paper.display(slow)} and {project.paper.display(fast)} at one "
            "batch (--compare SLOW,FAST names the pair)"
        )
    efficient = project.saturation(frame)
    if len(efficient):
        sat = Table(
            "Accelerators worth adding: the most with parallel efficiency of at least "
            f"{project.SATURATED:.0%} against the fewest",
            ["optimizer", "batch", "efficient up to"],
        )
        most = max(counts)  # efficient at every count projected: it says no more than that
        sat.rows = [
            [
                project.paper.display(r.optimizer),
                cell(r.global_batch, "int"),
                cell(
                    r.efficient_up_to,
                    "int",
                    note="the most projected: more were not" if r.efficient_up_to == most else "",
                ),
            ]
            for r in efficient.itertuples()
        ]
        tables.append(sat)
    if args.format == "csv" and len(tables) > 1:  # one table a csv, as read_csv reads it
        names = " and ".join(t.title.split(":")[0] for t in tables[1:])
        warnings.warn(f"the csv holds the minutes; {names}: --format markdown or latex", BenchWarning)
        tables = tables[:1]
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

    if not sweep.is_sweep_file(args.paths[0]):
        return False
    spec = sweep.load(args.paths[0])
    print(sweep_cost(spec, sweep.expand(args.paths[0], spec), args.throughput))
    return True


def _recipes_inputs(paths: list[str], parameters: int | None) -> tuple:
    """The steps and images of recipe files (project.recipe_inputs, one row each), their facts (the first's, with
    every recipe's epochs in words) and the model's parameters (--parameters, else the first's); recipes of
    different models, training sets or precisions are refused (one projection prices one model's all-reduce)."""
    import pandas as pd

    from bench import sweep
    from bench.analysis import project

    rows, epochs, first, found = [], [], None, {}
    for path in paths:
        if sweep.is_sweep_file(path):
            raise UserError(f"{path}: a sweep file is projected alone (bench project {path} --cluster NAME)")
        r, train, groups, classes = _recipe_facts(path)
        row, facts = project.recipe_inputs(r, train, groups)
        same = (r.model.name, r.model.kwargs, train, facts["element_bytes"])
        if first is None:
            first, found = same, facts
            parameters = parameters or facts["parameters"] or model_parameters(r.model.name, r.model.kwargs, classes)
        elif same != first:
            raise UserError(
                f"{path}: its model, training set or precision is not {paths[0]}'s; project the recipes of one model "
                "at a time (one projection prices one model's all-reduce)"
            )
        rows.append(row)
        epochs.append(f"{r.epochs:g} epochs" + (f" ({path})" if len(paths) > 1 else ""))
    return pd.concat(rows, ignore_index=True), {**found, "epochs": ", ".join(epochs)}, parameters


def _recipe_facts(path: str) -> tuple:
    """A recipe file's recipe, its training images (read from its data; ImageNet-1k's where the data is not here
    and the model is ResNet-50 at 224 px), its gradient groups on one rank (its batch plan's) and its classes."""
    from bench import recipe as recipe_mod
    from bench.analysis import project
    from bench.data import build

    r = recipe_mod.load(path)
    try:
        data = build(r.data, 1, 1, 0, 1, 0, device="cpu")
        train, classes = data.train_size, data.num_classes
    except UserError:
        if not project.resnet50_224(r):
            raise
        train, classes = project.IMAGENET_TRAIN_IMAGES, None  # ResNet-50's parameters are known: not counted
    return r, train, recipe_plan(r, 1).gsnr_groups, classes


def count_parameters(record) -> int:
    """The model parameters of a measured run whose meta does not record them (project.recorded_parameters),
    by building its recipe's model (on the meta device: no memory). `record`: the run's bench.rundir.Run."""
    recipe, meta = record.recipe, record.meta
    train = Path(meta.get("data_root") or "") / "train"
    classes = (recipe.get("model") or {}).get("kwargs", {}).get("num_classes") or (
        sum(1 for p in train.iterdir() if p.is_dir()) if train.is_dir() else None
    )
    if not classes:
        raise UserError(
            f"{record.path}: cannot count the model's parameters (its dataset folder {train} is not here): "
            "give --parameters N"
        )
    return model_parameters(recipe["model"]["name"], recipe["model"].get("kwargs") or {}, classes)


def model_parameters(name: str, kwargs: dict, classes: int) -> int:
    """The parameters of a recipe's model (model.name, model.kwargs) for `classes` classes, built on the meta
    device (no memory)."""
    import torch

    from bench.models import create_model

    with torch.device("meta"):
        return sum(p.numel() for p in create_model(name, kwargs, classes).parameters())


def sweep_cost(
    spec, trials, throughput: float | None = None, measured: float | None = None, done: dict | None = None
) -> str:
    """The runs of `bench sweep --list`, their training images and steps (at most: every run to its budget), and
    their time: GPU-hours at a stated throughput (or ResNet-50's preset), and hours on this machine at `measured`
    img/s (the sweep's finished runs' median, where some exist); `done`: the finished runs (sweep.finished_counts),
    split from what is left. Evaluation and start-up left out."""
    from bench import sweep
    from bench.analysis.project import IMAGENET_TRAIN_IMAGES, load_presets, resnet50_224, stack_words

    n = sweep.run_counts(spec, trials)
    said = (
        f"{n['trials']:,} trials + at most {n['local']:,} local points + at most {n['reruns']:,} reruns = at most "
        f"{n['trials'] + n['local'] + n['reruns']:,} runs ({len(spec.arms)} arms x {len(spec.batches)} "
        f"batch{'es' * (len(spec.batches) != 1)}; reruns: top {spec.reruns.top} x {len(spec.reruns.seeds)} seeds a "
        f"cell, {len(spec.reruns.matched)} matched pair{'s' * (len(spec.reruns.matched) != 1)})"
    )
    resnet50 = resnet50_224(trials[0].recipe)
    try:
        images, whose = sweep.training_images(spec), "training images"
    except UserError:
        images, whose = (
            (IMAGENET_TRAIN_IMAGES, "training images (ImageNet-1k's: the data is not here)") if resnet50 else (None, "")
        )
    if images is None:
        return f"{said}\nimages and time: not known here (the training data is not where the base recipe says)"
    n = sweep.run_counts(spec, trials, images)
    epochs = {k: n[f"{k}_epochs"] for k in ("trial", "local", "rerun")}
    total = sum(epochs.values()) * images
    parts = ", ".join(f"{k}s {v * images:,.0f}" for k, v in epochs.items())
    lines = [
        said,
        f"at most {total:,.0f} training images ({parts}) in {n['steps']:,.0f} steps, {images:,} {whose} an epoch",
    ]
    if throughput or resnet50:
        if throughput:
            speed, words = throughput, f"{throughput:,.3g} img/s per GPU (given)"
        else:
            presets = load_presets()
            name = presets.clusters["dgx-h100"].accelerator
            speed, words = presets.accelerators[name].images_per_second, stack_words(name, presets.accelerators[name])
        hours = {k: v * images / speed / 3600 for k, v in epochs.items()}
        lines.append(
            f"GPU-hours of training: {_hours(hours['trial'])} trials + at most {_hours(hours['local'])} local + at most "
            f"{_hours(hours['rerun'])} reruns = at most {_hours(sum(hours.values()))}, at {words}"
        )
    if done and done["trials"] + done["local"] + done["reruns"]:
        runs = {k: n[k] - done[k] for k in ("trials", "local", "reruns")}
        left = sum(epochs[k] - done[f"{k}_epochs"] for k in epochs) * images
        lines.append(
            f"finished: {done['trials']:,.0f} trials, {done['local']:,.0f} local points, {done['reruns']:,.0f} "
            f"reruns ({(total - left):,.0f} images at their budgets; {_hours(done['seconds'] / 3600)} hours of one "
            f"process as they ran, stops at the target included); left: at most {sum(runs.values()):,.0f} "
            f"run{'s' * (sum(runs.values()) != 1)} "
            f"({runs['trials']:,.0f} trials, at most {runs['local']:,.0f} local, at most {runs['reruns']:,.0f} "
            f"reruns), at most {left:,.0f} images"
            + (f", at most {_hours(left / measured / 3600)} hours of one process here" if measured else "")
        )
    if measured:
        lines.append(
            f"on this machine: at most {_hours(total / measured / 3600)} hours of one process at {measured:,.0f} img/s "
            "(the median of this sweep's finished runs; evaluation included)"
        )
    elif not throughput and not resnet50:
        lines.append(
            "time: give --throughput IMG_S, or run one trial (bench sweep --only ...) and list again: its img/s is used"
        )
    return "\n".join(lines)


def _hours(h: float) -> str:
    return f"{h:,.0f}" if h >= 10 else f"{h:.2g}"


def cmd_export(args) -> int:
    from bench.analysis import results

    for folder in tensorboard.export(results.load(args.paths, args.strict), Path(args.out)):
        print(folder)
    return 0


def cmd_clean(args) -> int:
    """Remove the checkpoints of finished runs (completed or diverged): the analysis reads none of them."""
    freed, runs = 0, 0
    for run in find_runs(args.paths):
        _, meta = read_recipe_and_meta(run)
        saved = checkpoint.saved(run)
        if meta.get("status") in FINISHED and saved[: len(saved) - args.keep_final]:
            freed += checkpoint.prune(run, int(args.keep_final))
            runs += 1
    print(
        f"removed the checkpoints of {runs} finished run{'s' * (runs != 1)}{' but the final one' * args.keep_final}: "
        f"{freed / 2**20:,.1f} MiB freed (unfinished runs keep theirs, to resume)"
    )
    return 0


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


def add_parsers(sub) -> None:
    where = paths_option(DEFAULT_RESULTS)
    s = sub.add_parser("export", help="the runs' curves for another tool: TensorBoard event files")
    s.add_argument(
        "what",
        choices=["tensorboard"],
        help="tensorboard: a folder per run (<arm>/b<batch>/<role>/seed<seed>/<recipe>-<run>), for "
        "`tensorboard --logdir DIR`",
    )
    s.add_argument("paths", **where)
    s.add_argument("--strict", **STRICT_OPTION)
    s.add_argument("--out", type=out_folder, required=True, metavar="DIR", help="output folder")
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
    s.add_argument("--format", **FORMAT_OPTION)
    s.add_argument("--plot", metavar="DIR", help="also draw minutes against accelerators into DIR")
    s.set_defaults(func=cmd_project)
