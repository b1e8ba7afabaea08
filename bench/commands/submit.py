"""`bench submit`: a recipe as a SLURM job (sbatch + torchrun), or a sweep file as a job array of one-GPU workers.

bench submit RECIPE|SWEEP --nodes N --gpus-per-node G [--partition P] [--dry-run]
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

from bench.commands import DEFAULT_RESULTS, out_and_plots
from bench.commands.run import load_recipe, run_arguments, worker_args
from bench.engine import launch
from bench.engine.launch import Slurm
from bench.engine.plan import recipe_plan
from bench.errors import UserError, count, one_line
from bench.rundir import META


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
    out = str(out_and_plots(args.out if args.out != str(DEFAULT_RESULTS) else None, None, spec.name)[0])
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
        r = load_recipe(args, notes)
        workers = args.workers_per_node or args.gpus_per_node or 1
        try:  # an impossible plan is refused before the queue
            plan = recipe_plan(r, args.nodes * workers)
        except UserError as e:
            raise UserError(f"{args.recipe} on {args.nodes} node(s) x {workers} worker(s): {e}") from None
        name, script = (
            r.name,
            launch.sbatch_script(
                worker_args(args),
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


def add_parsers(sub) -> None:
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
    s.add_argument("--nodes", type=count(1), required=True, help="nodes of the job (sbatch --nodes)")
    s.add_argument("--gpus-per-node", type=count(0), required=True, help="GPUs per node (0: CPU nodes, gloo)")
    s.add_argument(
        "--workers-per-node", type=count(1), help="torchrun workers per node (default: one per GPU; 1 on CPU nodes)"
    )
    s.add_argument("--cpus-per-worker", type=count(1), default=8, help="CPU cores per worker (default 8)")
    s.add_argument("--partition", type=one_line)
    s.add_argument("--time", type=one_line, help="SLURM time limit, e.g. 12:00:00")
    s.add_argument("--account", type=one_line, help="the account charged (#SBATCH --account)")
    s.add_argument("--qos", type=one_line, help="quality of service (#SBATCH --qos)")
    s.add_argument("--mem", type=one_line, help="memory per node, e.g. 200G (#SBATCH --mem)")
    s.add_argument("--constraint", type=one_line, help="node features, e.g. 'h100&ib' (#SBATCH --constraint)")
    s.add_argument("--exclusive", action="store_true", help="whole nodes (#SBATCH --exclusive)")
    s.add_argument(
        "--sbatch",
        type=one_line,
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
