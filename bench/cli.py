"""The `bench` command line.

    bench validate RECIPE...
    bench recipe keys
    bench run RECIPE [--set KEY.PATH=VALUE ...] [--out DIR] [--nproc N]
    bench suite DIR [--out RESULTS] [--plots PLOTS]
    bench sweep SWEEP [--list] [--only TEXT] [--out RESULTS]
    bench submit RECIPE --nodes N --gpus-per-node G [--partition P] [--dry-run]
    bench report | table | plot PATH...   (bench/analysis/commands.py)
    bench project | export | clean PATH...   (bench/results_commands.py)
    bench data synth --out DIR [--classes N ...]   (bench/data/commands.py)
    bench perf optim [...]

Bad input (a `UserError`) prints one line and exits with code 2; tracebacks
are left for bugs.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from datetime import datetime, timedelta
from itertools import zip_longest
from pathlib import Path

from bench import catalog, results_commands
from bench.analysis import commands as analysis_commands
from bench.analysis.render import claims_of
from bench.catalog import PLUMBING
from bench.data import commands as data_commands
from bench.data import folder
from bench.data.check import check_data
from bench.engine import launch
from bench.engine.launch import Slurm
from bench.engine.plan import recipe_plan
from bench.engine.threads import quiet_openmp
from bench.errors import ArgumentParser, BenchWarning, OutOfSpace, UserError, count, one_line_warnings
from bench.results_commands import sweep_cost
from bench.rundir import META, RunDir, status_since, versions

DEFAULT_RESULTS = Path("results/runs")
MAX_MESSAGE = 1000  # characters of an error message: a value echoed back is never a page
INTERRUPTED = 130  # a person's Ctrl-C: the shell's 128 + SIGINT; a scheduler's SIGTERM/SIGUSR1 preemption is 0


def stop_code(signal_name: str | None) -> int:
    """The exit code of a run stopped by `signal_name` after its checkpoint: a Ctrl-C must stop the shell
    loop or script that started it, a scheduler's preemption is a normal end (SLURM requeues the job)."""
    return INTERRUPTED if signal_name == "SIGINT" else 0


class _Unbroken:
    """A text stream whose reader may leave (`bench run ... | head`): what a run prints is a by-product of it, so
    a closed pipe sends the rest to /dev/null instead of failing the run with BrokenPipeError."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        """From now on the descriptor is /dev/null: later writes, and the interpreter's flush at exit, succeed."""
        with contextlib.suppress(OSError, ValueError):  # a stream with no descriptor (a test's capture)
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _output_may_close():
    """stdout and stderr as _Unbroken streams while a run, suite or sweep trains."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Unbroken(sys.stdout), _Unbroken(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def cmd_validate(args) -> int:
    """What `bench run` checks before it starts, but the device's: the timm model name, its keywords and pretrained
    weights as the run checks them (recipe.load, on the meta device), the dead-parameter probe only with --models
    (it builds the model), micro_batch auto's group count at run time; the ok line names what was not checked."""
    from bench import recipe
    from bench.data import images

    for path in args.recipes:
        if _validate_sweep(path, args):
            continue
        r = recipe.load(path, args.set, models=not args.schema_only)  # --schema-only: torch-free
        skipped = [] if args.models else ["the dead-parameter probe (--models runs it)"]
        if not args.schema_only:
            check_data(path, r)
        else:
            skipped.append("the model name and keywords (--schema-only)")
            if catalog.DATASETS[r.data.dataset].user_path:
                skipped.append("data.path (--schema-only)")
        auto_groups = (
            r.micro_batch == "auto" and r.gsnr_groups is None and catalog.OPTIMIZERS[r.optimizer.name].reduces_gradients
        )
        try:  # one rank: a plan that fails there fails on any number (--nproc and submit check theirs)
            recipe_plan(r, 1, groups=not auto_groups)
        except UserError as e:
            raise UserError(f"{path}: {e}") from None
        if auto_groups:
            skipped.append("the gradient groups of micro_batch auto (checked at run time)")
        if said := images.upscale_warning(r.data):  # a folder's images only where it is there
            warnings.warn(f"{path}: {said}", BenchWarning)
        dead = _dead_params(path, r, args.schema_only) if args.models else ""
        print(
            f"{path}: ok ({r.name}: {r.model.name}, {r.optimizer.name}, global_batch {r.global_batch}, "
            f"{_loader_here(path, r.data.loader)}{dead})" + (f"; not checked: {', '.join(skipped)}" if skipped else "")
        )
    return 0


def _validate_sweep(path: str, args) -> bool:
    """A sweep file is validated as `bench sweep` reads it: the file, every trial's recipe and batch plan, the
    search's warnings; True if it was one."""
    from bench import sweep

    if not sweep.is_sweep_file(path):
        return False
    if args.set:
        raise UserError(f"{path}: a sweep file takes no --set; put overrides in its `set`")
    spec = sweep.load(path)
    trials = sweep.expand(path, spec)
    for t in {(t.arm, t.batch): t for t in trials}.values():
        try:
            recipe_plan(t.recipe, 1, groups=t.recipe.micro_batch != "auto")
        except UserError as e:
            raise UserError(f"{path}: trial {t.name}: {e}") from None
    for warning in sweep.search_warnings(spec):
        warnings.warn(f"{path}: {warning}", BenchWarning)
    print(
        f"{path}: ok (sweep {spec.name}: {len(trials)} trials, arms {', '.join(spec.arms)}, batches "
        f"{', '.join(map(str, spec.batches))}); not checked: the data (bench validate the base recipe checks it)"
    )
    return True


def _loader_here(path: str, loader: str) -> str:
    """The loader a run of the recipe would use on this machine, as bench.data.resolve_loader picks it (auto's
    fallback warned, with its import error). A named loader that does not import here is a warning, not an error:
    the recipe may be for another machine."""
    name = catalog.LOADER_ALIASES.get(loader, loader)
    errors = {}  # the loaders tried before the one taken: why each does not import
    for candidate in catalog.AUTO_LOADERS if name == "auto" else (name,):
        record = catalog.LOADERS[candidate]
        errors[candidate] = _import_error(record.requires) if record.requires else None
        if errors[candidate] is None:
            break
    for skipped, error in errors.items():
        if error is not None and name == "auto":
            warnings.warn(f"{path}: {catalog.LOADERS[skipped].fallback(candidate, error)}", BenchWarning)
        elif error is not None:
            what = f"key 'data.loader' is '{name}' but {record.requires} does not import here ({error})"
            warnings.warn(f"{path}: {what}", BenchWarning)
            return f"loader {name}: not importable here"
    return f"loader {candidate} here"


@functools.cache
def _import_error(module: str) -> str | None:
    """A loader's module imported in a child process (DALI's import is heavy; validate's process stays light)."""
    record = next(r for r in catalog.LOADERS.values() if r.requires == module)
    code = f"from bench import catalog; print(catalog.LOADERS[{record.name!r}].import_error() or '')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or (None if done.returncode == 0 else f"exit code {done.returncode}")


def _dead_params(path: str, r, schema_only: bool) -> str:
    """`bench run`'s dead-parameter probe of a recipe (bench/engine/dead.py), its warning or refusal, and the
    share for the ok line; the classes are the dataset's where cheap to know, else timm's ImageNet 1000."""
    from bench.engine import dead

    spec = r.data
    classes = (
        r.model.kwargs.get("num_classes")
        or {"synthetic": spec.synth.classes, "digits": 10}.get(spec.dataset)
        or (None if schema_only else folder.class_count(spec.path, spec.dataset == "filelist"))
        or 1000
    )
    found = dead.recipe_probe(r, classes)
    try:
        said = dead.verdict(found, r)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    if said:
        warnings.warn(f"{path}: {said}", BenchWarning)
    return f", dead parameters {found.share:.1%} ({found.dead:,} of {found.total:,}) at {spec.image_size} px"


KEY_COLUMNS = (26, 16)  # the widest the type and default columns get before they wrap
MEANING_MIN = 30  # a meaning column narrower than this goes under its key instead, indented


def cmd_recipe_keys(args) -> int:
    """Every recipe key with its type, default and meaning (from the schema), wrapped to the terminal's width (a
    narrow one gets each meaning under its key), then each optimizer's own keys and source from the catalog
    (torch-free); `--optimizer NAME`: that one's keys with their defaults (its class imported)."""
    from bench import recipe

    width = shutil.get_terminal_size((100, 24)).columns
    wrap = functools.partial(
        textwrap.fill, width=max(width, MEANING_MIN), subsequent_indent="      ", break_on_hyphens=False
    )
    if args.optimizer:
        return _optimizer_keys(catalog.OPTIMIZERS[args.optimizer], wrap)
    rows = [("key", "type", "default", "meaning"), *recipe.keys()]
    columns = [max(len(r[0]) for r in rows)]
    columns += [min(cap, max(len(r[i + 1]) for r in rows)) for i, cap in enumerate(KEY_COLUMNS)]
    meaning = width - sum(columns) - 2 * len(columns)
    under = meaning < MEANING_MIN
    if not under:
        columns.append(meaning)
    for row in rows:
        cells = [textwrap.wrap(text, w, break_on_hyphens=False) or [""] for text, w in zip(row, columns)]
        for parts in zip_longest(*cells, fillvalue=""):
            print("  ".join(p.ljust(w) for p, w in zip(parts, columns)).rstrip())
        if under and row[3]:
            print(wrap(row[3], initial_indent="    ", subsequent_indent="    "))
    print()
    print(
        wrap(
            "optimizer.name [whose code makes its update: bench, or a library's class] and its own keys beside "
            "name and lr, plumbing apart (how a step is computed, not what: bench/catalog.py's PLUMBING); "
            "`bench recipe keys --optimizer NAME` gives one with its defaults, docs/algorithms.md the equations:",
            subsequent_indent="",
        )
    )
    for name, record in catalog.OPTIMIZERS.items():
        own, plumbing = _split_plumbing(record.options)
        apart = f"; plumbing: {', '.join(plumbing)}" if plumbing else ""
        print(wrap(f"  {name} [{record.source}]: {', '.join(own)}{apart}"))
    return 0


def _split_plumbing(options) -> tuple[list, list]:
    """An optimizer's options: its own, then its plumbing (catalog.PLUMBING), each in the record's order."""
    return [o for o in options if o not in PLUMBING], [o for o in options if o in PLUMBING]


def _optimizer_keys(record, wrap) -> int:
    """`bench recipe keys --optimizer NAME`: its source, paper, and keys with their defaults (its class's)."""
    from bench import optim

    defaults = optim.hyperparameters(optim.REGISTRY[record.name])  # one sentence when its package is missing
    own, plumbing = _split_plumbing(record.options)
    source = ", ".join(filter(None, [record.source, record.package]))
    print(wrap(f"{record.name} [{source}]: {'; '.join(filter(None, [record.display, record.paper]))}"))
    print(wrap("  keys (optimizer.KEY beside name and lr; weight_decay is a top-level key; defaults in parentheses):"))
    for title, keys in (("", own), ("plumbing (how a step is computed, not what): ", plumbing)):
        if keys:
            print(wrap(f"    {title}" + ", ".join(f"{k} ({defaults[k]})" for k in keys)))
    return 0


def _recipe(args, notes: list[str] | None = None):
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


def _worker_args(args) -> list[str]:
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
    with _output_may_close():
        return _run(args)


def _run(args) -> int:
    from bench import sweep

    if Path(args.recipe).is_dir():  # recipes/mini: a folder of recipes is a suite's
        raise UserError(
            f"{args.recipe}: a folder, not a recipe file; `bench suite {args.recipe}` runs every recipe in it "
            "(skipping completed ones), then reports and plots"
        )
    if sweep.is_sweep_file(args.recipe):  # recipes/demo.yaml: a comparison
        return _run_sweep(args)
    r = _recipe(args)  # bad input stops here, before any worker starts
    check_data(args.recipe, r)
    if args.nproc > 1:
        recipe_plan(r, args.nproc)
        started = time.time()
        try:
            return launch.run_local(args.nproc, _worker_args(args), args.max_restarts)
        except launch.Stopped as e:
            return _after_stop(str(e), r.name, args, started)

    from bench.engine.train import train

    run = train(
        r,
        Path(args.out),
        progress=not args.no_progress,
        restart=args.restart,
        run_dir=Path(args.run_dir) if args.run_dir else None,
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
    results/<name> unless --out says where, figures in plots/<name>), from any tree as a one-recipe run is (each
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
    out = Path(args.out) if args.out != str(DEFAULT_RESULTS) else Path("results") / name
    plots = Path("plots") / name
    return _sweep(
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
    return fail(
        f"stopped by {signal_name} before the workers wrote a checkpoint; the same command resumes from the last one",
        stop_code(signal_name) or 1,
    )


def cmd_suite(args) -> int:
    with _output_may_close():
        return _suite(args)


def _suite(args) -> int:
    from bench.suite import Preempted, run_suite

    folder = Path(args.folder)
    results = Path(args.out or Path("results") / folder.name)
    plots = Path(args.plots or Path("plots") / folder.name)
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


def cmd_sweep(args) -> int:
    with _output_may_close():
        return _sweep(args)


def _sweep(args) -> int:
    from bench import sweep

    spec = sweep.load(args.sweep)
    if args.list:
        trials = sweep.expand(args.sweep, spec)
        print(sweep.trial_table(trials), end="")
        for warning in sweep.search_warnings(spec):
            print(f"bench: warning: {args.sweep}: {warning}", file=sys.stderr)
        measured = sweep.measured_speed(Path(args.out or Path("results") / spec.name))
        print("\n" + sweep_cost(spec, trials, args.throughput, measured))
        return 0
    results = Path(args.out or Path("results") / spec.name)
    plots = Path(args.plots or Path("plots") / spec.name)
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


def _submit_sweep(args) -> tuple[str, str]:
    """A sweep file's job array: `--array` workers (default: one per trial, at most 64), one GPU each (or
    none, on CPU nodes)."""
    from bench import sweep

    spec = sweep.load(args.recipe)
    trials = sweep.expand(args.recipe, spec)  # bad input stops here, before anything is written
    sweep.refuse_dirty(spec, args.allow_dirty, (Path(args.recipe), spec.base))  # here, not in every array task
    if (
        args.nodes != 1
        or args.gpus_per_node > 1
        or (args.workers_per_node or 1) != 1
        or args.set
        or args.tensorboard
        or args.wandb
        or args.threads
    ):
        raise UserError(
            f"{args.recipe}: a sweep is submitted as a job array of one-GPU workers; use --nodes 1 "
            "--gpus-per-node 1 (or 0 on CPU nodes; no --workers-per-node, and no --set, --tensorboard, "
            "--wandb or --threads: "
            "put overrides in the sweep file's set)"
        )
    out = args.out if args.out != str(DEFAULT_RESULTS) else str(Path("results") / spec.name)
    tasks = args.array or min(len(trials), 64)
    plans: dict[int, dict[str, list[str]]] = {}  # batch -> plan -> arms (one line a batch where the arms agree)
    for t in trials:
        arms = plans.setdefault(t.batch, {}).setdefault(_plan_note(t.recipe, recipe_plan(t.recipe, 1)), [])
        arms += [t.arm] if t.arm not in arms else []
    notes = [
        f"batch {batch}{'' if len(by) == 1 else ', ' + ', '.join(arms)}: {note}"
        for batch, by in plans.items()
        for note, arms in by.items()
    ]
    return spec.name, launch.sbatch_array_script(
        ["sweep", args.recipe, "--out", out, *(["--allow-dirty"] if args.allow_dirty else [])],
        tasks,
        _slurm(args),
        f"bench-sweep-{spec.name}",
        Path.cwd(),
        args.gpus_per_node,
        args.cpus_per_worker,
        tuple(notes),
    )


def _plan_note(recipe, plan) -> str:
    """The batch plan as `bench run` prints it; micro_batch auto's is the cap's, which the device may lower."""
    lowered = "; micro_batch auto: the device's memory may lower it" if recipe.micro_batch == "auto" else ""
    return f"plan: {plan}{lowered}"


def _slurm(args):
    return Slurm(
        args.partition, args.time, args.account, args.qos, args.mem, args.constraint, args.exclusive, tuple(args.sbatch)
    )


def cmd_submit(args) -> int:
    from bench import sweep

    notes = []
    if sweep.is_sweep_file(args.recipe):
        name, script = _submit_sweep(args)
    else:
        if args.allow_dirty:
            raise UserError(
                f"{args.recipe}: --allow-dirty is a sweep file's option; a run starts from any tree and records "
                f"its commit, and whether it was clean, in {META}"
            )
        r = _recipe(args, notes)
        workers = args.workers_per_node or args.gpus_per_node or 1
        plan = recipe_plan(r, args.nodes * workers)  # an impossible plan is refused before the queue
        name, script = (
            r.name,
            launch.sbatch_script(
                _worker_args(args),
                args.nodes,
                args.gpus_per_node,
                _slurm(args),
                f"bench-{r.name}",
                Path.cwd(),
                workers,
                args.cpus_per_worker,
                (_plan_note(r, plan),),
            ),
        )
    if args.dry_run:
        print(script, end="")
    else:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        print(launch.submit(script, Path(args.out).parent / "slurm" / f"{name}-{stamp}.sbatch"))
    for note in notes:  # once submitted (a refusal is one line); on stderr: --dry-run's stdout is the script
        print(f"bench: {note}", file=sys.stderr)
    return 0


def perf_benchmarks() -> dict[str, str]:
    """Each module of bench.perf is a benchmark; its docstring's first line is the help."""
    folder = Path(__file__).parent / "perf"
    found = {}
    for path in sorted(folder.glob("[!_]*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = doc.split("\n")[0]
    return found


def cmd_perf(args) -> int:
    return importlib.import_module(f"bench.perf.{args.benchmark}").main(args.rest)


class _Version(argparse.Action):
    """`bench --version`: bench, python, torch, torchvision, timm, DALI... one per line (a bug report's first lines)."""

    def __call__(self, parser, namespace, values, option_string=None):
        found = versions()
        print(f"bench {found.pop('bench')}")
        for name, version in found.items():
            print(f"{name} {version or 'not installed'}")
        parser.exit()


def set_argument(s, help: str = "override a recipe key") -> None:
    s.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE", help=help)


def report_arguments(s, named: str, baseline: str, baseline_metavar: str | None = None) -> None:
    """--out, --plots and --baseline of the commands that run many recipes and then report (suite, sweep)."""
    s.add_argument("--out", help=f"results directory (default: results/<{named}>)")
    s.add_argument("--plots", help=f"plots directory (default: plots/<{named}>)")
    s.add_argument("--baseline", metavar=baseline_metavar, help=baseline)


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="bench", description="Large-batch ImageNet training benchmarks.")
    p.add_argument("--version", action=_Version, nargs=0, help="print the versions of bench and what it runs on")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("validate", help="load and check recipe files and their dataset folders")
    s.add_argument("recipes", nargs="+", metavar="RECIPE")
    s.add_argument(
        "--schema-only",
        action="store_true",
        help="check the recipes' schema only: not their data.path (recipes written for another machine), nor the model "
        "name (torch-free)",
    )
    set_argument(s)
    s.add_argument(
        "--models",
        action="store_true",
        help="also build each timm model and probe it for parameters no image reaches (seconds a model; "
        "`bench run` always does; the model name, keywords and pretrained weights are checked without it)",
    )
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("recipe", help="explain recipes").add_subparsers(dest="what", required=True, metavar="WHAT")
    s = s.add_parser("keys", help="every recipe key: type, default, meaning (from the schema)")
    s.add_argument(
        "--optimizer",
        choices=catalog.OPTIMIZERS,
        metavar="NAME",
        help="only this optimizer's keys, with their defaults (imports its code)",
    )
    s.set_defaults(func=cmd_recipe_keys)

    def run_arguments(s):
        s.add_argument("recipe", metavar="RECIPE")
        set_argument(s)
        s.add_argument("--out", default=str(DEFAULT_RESULTS), help="results directory (default: %(default)s)")
        s.add_argument(
            "--restart", action="store_true", help="start a new run even if an unfinished one can be resumed"
        )
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

    s = sub.add_parser("run", help="train one recipe (resuming its unfinished run, if any)")
    run_arguments(s)
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--nproc", type=count(1), default=1, metavar="N", help="start N local workers through torchrun")
    s.add_argument("--max-restarts", type=count(0), default=0, help="torchrun restarts after a worker fails")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("suite", help="run every recipe of a folder (skipping completed runs), then report and plot")
    s.add_argument("folder", metavar="DIR")
    report_arguments(s, "DIR name", "optimizer the compare table's speedups are relative to")
    set_argument(s, "override a key in every recipe")
    s.set_defaults(func=cmd_suite)

    s = sub.add_parser(
        "sweep",
        help="tune optimizers at each batch with one budget, rerun the best over seeds, "
        "then report the verdict (bench/sweep.py documents the sweep file)",
    )
    s.add_argument("sweep", metavar="SWEEP")
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
        "(CPU capability, GPU or torch build) than its finished runs' (refused by default)",
    )
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser(
        "submit",
        help="submit a recipe as a SLURM job (sbatch + torchrun), or a sweep file as a job array of one-GPU workers",
    )
    run_arguments(s)
    s.add_argument(
        "--array",
        type=count(1),
        metavar="N",
        help="sweep files: workers in the job array (default: one per trial, at most 64)",
    )
    s.add_argument("--nodes", type=count(1), required=True)
    s.add_argument("--gpus-per-node", type=count(0), required=True, help="GPUs per node (0: CPU nodes, gloo)")
    s.add_argument(
        "--workers-per-node", type=count(1), help="torchrun workers per node (default: one per GPU; 1 on CPU nodes)"
    )
    s.add_argument("--cpus-per-worker", type=count(1), default=8, help="CPU cores per worker (default 8)")
    s.add_argument("--partition")
    s.add_argument("--time", help="SLURM time limit, e.g. 12:00:00")
    s.add_argument("--account", help="the account charged (#SBATCH --account)")
    s.add_argument("--qos", help="quality of service (#SBATCH --qos)")
    s.add_argument("--mem", help="memory per node, e.g. 200G (#SBATCH --mem)")
    s.add_argument("--constraint", help="node features, e.g. 'h100&ib' (#SBATCH --constraint)")
    s.add_argument("--exclusive", action="store_true", help="whole nodes (#SBATCH --exclusive)")
    s.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="any other #SBATCH option, as sbatch takes it, e.g. --sbatch=--mail-type=END (repeatable)",
    )
    s.add_argument(
        "--allow-dirty",
        action="store_true",
        help="sweep files: the array runs from a tree with uncommitted changes to bench's checkout "
        "(bench sweep --allow-dirty)",
    )
    s.add_argument("--dry-run", action="store_true", help="print the batch script instead of submitting it")
    s.set_defaults(func=cmd_submit, no_progress=True)

    analysis_commands.add_parsers(sub, DEFAULT_RESULTS)

    results_commands.add_parsers(sub, DEFAULT_RESULTS)

    data_commands.add_parser(sub)

    perf = sub.add_parser("perf", help="micro-benchmarks").add_subparsers(
        dest="benchmark", required=True, metavar="BENCHMARK"
    )
    for name, help in perf_benchmarks().items():
        s = perf.add_parser(name, help=help, add_help=False)  # its own options go to its main()
        s.set_defaults(func=cmd_perf)
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
        if args.func is cmd_perf:
            args.rest = rest
        elif rest:
            p.error(f"unrecognized arguments: {' '.join(rest)}")
        return args.func(args)
    except UserError as e:
        return fail(str(e), 2)
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
