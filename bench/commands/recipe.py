"""`bench validate` and `bench recipe keys`: what a run checks before it starts, and what a recipe may say.

bench validate RECIPE... [--schema-only] [--models] [--set KEY.PATH=VALUE ...]
bench recipe keys [--optimizer NAME]
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import textwrap
import warnings
from itertools import zip_longest
from pathlib import Path

from bench import catalog
from bench.catalog import PLUMBING
from bench.commands import set_argument
from bench.data import folder
from bench.data.check import check_data
from bench.engine.plan import recipe_plan
from bench.errors import BenchWarning, UserError


def cmd_validate(args) -> int:
    """What `bench run` checks before it starts, but the device's: the timm model name, its keywords and pretrained
    weights as the run checks them (recipe.load, on the meta device), the dead-parameter probe only with --models
    (it builds the model), micro_batch auto's group count at run time; the ok line names what was not checked."""
    from bench import recipe
    from bench.data import images

    for path in args.recipes:
        if _validate_branch(path, args) or _validate_sweep(path, args):
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


def _validate_branch(path: str, args) -> bool:
    """A branch file is validated as `bench branch` reads it: the file, every reference's and branch's recipe (which
    reads the data's size); True if it was one."""
    from bench import branch

    if not branch.is_branch_file(path):
        return False
    if args.set:
        raise UserError(f"{path}: a branch file takes no --set; put overrides in its `set`")
    spec = branch.load(path)
    runs = branch.plan(Path(path), spec)
    print(
        f"{path}: ok (branch file {spec.name}: {len(runs)} reference run(s) at {spec.b0}, "
        f"{sum(len(b) for _, b in runs)} branches at k = {', '.join(map(str, sorted(spec.k)))})"
    )
    return True


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
    if not args.schema_only:  # each data section the trials read (the sweep's set may move data.path)
        for t in {t.recipe.data: t for t in reversed(trials)}.values():  # each one's first trial
            check_data(f"{path}: trial {t.name}", t.recipe)
    for warning in sweep.search_warnings(spec):
        warnings.warn(f"{path}: {warning}", BenchWarning)
    print(
        f"{path}: ok (sweep {spec.name}: {len(trials)} trials, arms {', '.join(spec.arms)}, batches "
        f"{', '.join(map(str, spec.batches))})" + "; not checked: the data (--schema-only)" * args.schema_only
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


def add_parsers(sub) -> None:
    s = sub.add_parser("validate", help="load and check recipe, sweep and branch files and their dataset folders")
    s.add_argument("recipes", nargs="+", metavar="RECIPE", help="a recipe, sweep or branch file")
    s.add_argument(
        "--schema-only",
        action="store_true",
        help="check the recipes' schema only: not their data.path (recipes written for another machine), nor the model "
        "name (torch-free); a branch file, and a sweep file whose budget is in steps or images, still read the "
        "training set's size",
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
