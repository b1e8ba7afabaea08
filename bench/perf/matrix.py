"""The candidate matrix: every implementation behind an `auto` key measured side by side on one device,
paired, the GPU goals judged, and the defaults the measurement chooses (bench/defaults.py).

    python -m bench.perf.matrix ROW --device cuda --budget S --json FILE [--tiny]     # one row
    python -m bench.perf.matrix report FILE... --out DIR [--write-defaults]           # the table and the proposal
    python -m bench.perf.matrix adopt DIR/defaults-proposal.json                      # the proposal, reviewed

tools/gpu_check.py --matrix runs each row in a process of its own under its cap, then the report (docs/performance.md,
"The candidate matrix"). Within a row the candidates are built side by side in one process and take turns in an
order that rotates each round (bench.perf.train.alternate), so each ratio is paired within the rounds; a row stops
starting rounds when its --budget would run out (at least one runs), and a candidate that fails (a torch.compile
mode that breaks, say) is reported as failed while the others are measured. Rows (full sizes; --tiny: resnet8_cifar
at 16 px, batch 8, bn_batch 2, the CPU rehearsal):

- runner: ResNet-50, 224 px, bf16, channels_last, batch 256, random loader, SGD: the bare loop eager and compiled,
  the runner at each engine.compile candidate (false, true, reduce-overhead; max-autotune's minutes of search do not
  fit the call). Goals: the fastest runner >= 7,000 img/s (on an H200: judged there only); overhead 1 - runner / bare
  <= 3%; the compiled runner >= 95% of the compiled bare loop. Chooses engine.compile.
- ghost_bn: the bare loop with ghost BatchNorm 32 in 256 at each engine.ghost_bn candidate, and with torch's
  BatchNorm2d over the 256, in each layout. Goal: ghost / BatchNorm2d <= 1.2 x. Chooses engine.ghost_bn per layout.
- optimizer: bench perf optim's steps on ResNet-50's shapes: LARS and VRGD-LARS (k = 4) eager, compiled and (VRGD)
  fused, against torch's fused SGD. Goals: LARS <= 1.5 x, VRGD-LARS <= 2 x, VRGD's fused observe() <= its eager code.
  Chooses engine.optimizer_step and optimizer.fused.
- eval_memory: the runner's evaluate() over 10 and over 50 batches of 256 (ResNet-50, 224 px, bf16). Goal: peak GPU
  memory flat in the number of batches (within 5%). On a CPU the process's resident high-water mark is shown, not
  judged.

A candidate replaces today's default (defaults.TODAY) only when it is faster in the paired sign test's 95% interval
(MIN_PAIRS rounds at least): a tie keeps today's.
"""

from __future__ import annotations

import itertools
import json
import re
import resource
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bench import defaults
from bench.engine.threads import resolve
from bench.errors import ArgumentParser, UserError, doc_summary
from bench.perf.train import GHOST_TARGET, MIN_PAIRS, TARGET, sign_interval, verdict

REPO = Path(__file__).resolve().parents[2]
ROWS = ("runner", "ghost_bn", "optimizer", "eval_memory")
# issue 85's rows: (the row that measures it, what, goal)
GOALS = [
    ("runner", "ResNet-50 224 px bf16 channels_last, batch 256, through bench's runner", ">= 7,000 img/s on an H200"),
    ("runner", "runner vs bare loop, same settings", "overhead <= 3%"),
    ("runner", "compiled runner vs compiled bare loop", ">= 95%"),
    ("ghost_bn", "ghost BatchNorm (BN batch 32 in 256) vs BatchNorm2d, channels_last", "<= 1.2 x, paired"),
    ("ghost_bn", "ghost BatchNorm (BN batch 32 in 256) vs BatchNorm2d, contiguous", "<= 1.2 x, paired"),
    ("optimizer", "LARS step vs torch fused=True SGD", "<= 1.5 x"),
    ("optimizer", "VRGD-LARS step vs torch fused=True SGD", "<= 2 x"),
    ("optimizer", "VRGD's fused observe() vs its eager code", "never slower (<= 1 x)"),
    (
        "eval_memory",
        "evaluation, 50 batches of 256 at 224 px against 10 (ResNet-50)",
        "peak GPU memory flat (<= 1.05 x)",
    ),
]
IMG_S_GOAL = 7000.0
IMG_S_GPU = "H200"  # the img/s goal is MLPerf's per-H200 rate: another GPU model's rate is measured, not judged
IMG_S_MODEL = re.compile(r"(?<![A-Za-z])H200(?! NVL)")  # an H200 SXM; not a GH200 nor the lower-power H200 NVL
COMPILED_SHARE = 0.95
LARS_GOAL, VRGD_GOAL, FLAT = 1.5, 2.0, 1.05
COMPILE_CANDIDATES = {
    "runner": False,
    "runner, compile=true": True,
    "runner, compile=reduce-overhead": "reduce-overhead",
}
REPORT, TABLE, PROPOSAL = "matrix.json", "matrix.md", "defaults-proposal.json"


@dataclass(frozen=True)
class Sizes:
    model: str
    image_size: int
    batch: int
    bn_batch: int
    eval_batches: tuple[int, int]
    rounds: int  # at most, a row's budget permitting
    warmup: int
    steps: int  # training steps a round


FULL = Sizes("resnet50", 224, 256, 32, (10, 50), rounds=12, warmup=3, steps=4)
TINY = Sizes("resnet8_cifar", 16, 8, 2, (2, 10), rounds=2, warmup=1, steps=1)


class Row:
    """One row's measurement as it goes into matrix.json: cases, failures, the goals' figures, the keys' choices."""

    def __init__(self, name: str, device: torch.device, sizes: Sizes):
        self.name, self.device, self.sizes = name, device, sizes
        self.judged = device.type == "cuda" and sizes is FULL  # the goals are for a GPU at the full sizes
        self.cases, self.failed, self.figures, self.choices = {}, {}, [], {}

    def case(self, name: str, values: list[float], unit: str, **extra) -> None:
        median = statistics.median(values) if values else None
        self.cases[name] = {"unit": unit, "median": median, "values": values, **extra}

    def figure(self, goal: int, measured: str, result: str) -> None:
        """Goal `goal` of GOALS (its index): what was measured and its verdict (not judged off a GPU at full size)."""
        self.figures.append({"goal": GOALS[goal][1], "target": GOALS[goal][2], "measured": measured, "result": result})

    def unjudged(self) -> str:
        return "goal is for a GPU at the full sizes" if self.device.type == "cuda" else "goal is for CUDA"

    def judge(self, ratios: list[float], target: float) -> str:
        """verdict() of the paired ratios' median against `target` (under it: PASS), or why it is not judged."""
        return verdict(*sign_interval(ratios), len(ratios), target) if self.judged else self.unjudged()

    def judge_rate(self, ratios: list[float]) -> str:
        """judge() of IMG_S_GOAL / img/s against 1, on the GPU model the goal is stated for only."""
        if self.judged and not IMG_S_MODEL.search(defaults.gpu_model(self.device)):
            return f"goal is for an {IMG_S_GPU}"
        return self.judge(ratios, 1.0)

    def choose(self, key: str, value, why: str) -> None:
        self.choices[key] = {"value": value, "why": why}

    def as_dict(self, seconds: float) -> dict:
        return {
            "row": self.name,
            "device": str(self.device),
            "gpu": defaults.gpu_model(self.device),
            "tiny": self.sizes is TINY,
            "torch": torch.__version__,
            "seconds": round(seconds, 1),
            "cases": self.cases,
            "failed": self.failed,
            "figures": self.figures,
            "choices": self.choices,
        }


def paired(values: dict, over: str, under: str) -> list[float]:
    """values[over][i] / values[under][i]: the ratios of the same rounds."""
    return [a / b for a, b in zip(values[over], values[under])]


def interval_words(ratios: list[float], unit: str = " x", digits: int = 3) -> str:
    middle, low, high = sign_interval(ratios)
    spread = "95% interval" if len(ratios) >= MIN_PAIRS else "range"
    return f"{middle:.{digits}f}{unit} ({spread} {low:.{digits}f} to {high:.{digits}f}, {len(ratios)} paired rounds)"


def faster(ratios: list[float]) -> bool | None:
    """Time ratios candidate / today's: True when the candidate is faster in the whole 95% interval, False when
    slower in all of it, None when not resolved (or under MIN_PAIRS rounds)."""
    if len(ratios) < MIN_PAIRS:
        return None
    _, low, high = sign_interval(ratios)
    return True if high < 1 else False if low > 1 else None


def _recipe(sizes: Sizes, device: torch.device, *sets: str):
    from bench.perf.train import builtin_recipe

    base = [
        f"model.name={sizes.model}",
        f"data.image_size={sizes.image_size}",
        f"global_batch={sizes.batch}",
        f"micro_batch={sizes.batch}",
        "engine.precision=bf16",
        "engine.channels_last=true",
        "data.loader=random",
    ]
    recipe = builtin_recipe("bench perf matrix", device.type, [*base, *sets])
    needed = sizes.warmup + (sizes.rounds + 2) * sizes.steps  # the schedule outlasts every step run
    return recipe.model_copy(update={"epochs": needed * recipe.global_batch})


def _engine(recipe, **keys):
    return recipe.model_copy(update={"engine": recipe.engine.model_copy(update=keys)})


def _bn_batch(recipe, bn_batch):
    return recipe.model_copy(update={"model": recipe.model.model_copy(update={"bn_batch": bn_batch})})


def runner_row(row: Row, deadline: float) -> None:
    """The bare loop and the runner at each engine.compile candidate (module docstring)."""
    from bench.engine.distributed import Dist
    from bench.perf.train import BareCase, BenchCase, measure

    sizes, device = row.sizes, row.device
    recipe = _recipe(sizes, device)
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as scratch:
        dist = Dist(0, 1, 0, device)
        runners = {
            name: BenchCase(_engine(recipe, compile=c), dist, Path(scratch)) for name, c in COMPILE_CANDIDATES.items()
        }
        trainer = runners["runner"].trainer
        batch, classes = next(trainer.data.train(0, 1)), trainer.data.num_classes
        cases = {
            "bare": BareCase(recipe, device, batch, classes, 1),
            "bare, compiled": BareCase(_engine(recipe, compile=True), device, batch, classes, 1),
            **runners,
        }
        try:
            rates, splits, peaks = measure(
                cases,
                sizes.rounds,
                sizes.steps,
                sizes.warmup,
                device,
                sizes.batch,
                deadline=deadline,
                failed=row.failed,
            )
        finally:
            for case in cases.values():
                case.close()
    for name, values in rates.items():
        split = {key: round(1e3 * seconds, 2) for key, seconds in splits.get(name, {}).items()}
        row.case(name, values, "img/s", peak_gib=round(peaks[name], 2), split_ms=split)
    measured = [name for name in COMPILE_CANDIDATES if name in rates]
    if measured:
        best = max(measured, key=lambda name: statistics.median(rates[name]))
        ratios = [IMG_S_GOAL / rate for rate in rates[best]]  # under 1: above the goal
        middle, low, high = (statistics.median(rates[best]), min(rates[best]), max(rates[best]))
        row.figure(0, f"{middle:,.0f} img/s ({best}; {low:,.0f} to {high:,.0f} over {len(rates[best])} rounds)",
                   row.judge_rate(ratios))  # fmt: skip
    if {"bare", "runner"} <= rates.keys():
        overheads = [1 - b / a for a, b in zip(rates["bare"], rates["runner"])]
        percent = interval_words([100 * o for o in overheads], "%", 1)
        row.figure(1, f"overhead {percent}", row.judge(overheads, TARGET))
    if {"bare, compiled", "runner, compile=true"} <= rates.keys():
        ratios = paired(rates, "runner, compile=true", "bare, compiled")
        row.figure(2, f"{interval_words(ratios)} the compiled bare loop's img/s",
                   row.judge([1 / r for r in ratios], 1 / COMPILED_SHARE))  # fmt: skip
    # engine.compile: the candidate resolved faster than eager with the highest median, else today's
    wins = {
        name: statistics.median(paired(rates, name, "runner"))
        for name in measured
        if name != "runner" and "runner" in rates and faster([1 / r for r in paired(rates, name, "runner")])
    }
    if wins:
        best = max(wins, key=wins.get)
        row.choose("engine.compile", COMPILE_CANDIDATES[best], f"{best}: {wins[best]:.3f} x eager's img/s, resolved")
    else:
        row.choose("engine.compile", defaults.TODAY["engine.compile"], "no compile mode resolved faster than eager")


def ghost_row(row: Row, deadline: float) -> None:
    """The bare loop with ghost BatchNorm at each engine.ghost_bn candidate and with torch's BatchNorm2d, in each
    layout (module docstring)."""
    from bench.perf.train import BareCase, measure

    sizes, device = row.sizes, row.device
    classes = 10
    batch = (torch.randn(sizes.batch, 3, sizes.image_size, sizes.image_size, device=device),
             torch.randint(0, classes, (sizes.batch,), device=device))  # fmt: skip
    cases = {}
    for layout in defaults.LAYOUTS:
        recipe = _recipe(sizes, device, f"engine.channels_last={layout == 'channels_last'}")
        cases[f"BatchNorm2d, {layout}"] = BareCase(recipe, device, batch, classes, 1)
        for impl in defaults.GHOST:
            ghost = _bn_batch(_engine(recipe, ghost_bn=impl), sizes.bn_batch)
            cases[f"ghost {impl}, {layout}"] = BareCase(ghost, device, batch, classes, 1)
    rates, _, peaks = measure(
        cases, sizes.rounds, sizes.steps, sizes.warmup, device, sizes.batch, deadline=deadline, failed=row.failed
    )
    for name, values in rates.items():
        row.case(name, values, "img/s", peak_gib=round(peaks[name], 2))
    choice = dict(defaults.TODAY["engine.ghost_bn"])
    whys = []
    for goal, layout in zip((3, 4), defaults.LAYOUTS):
        plain, impls = f"BatchNorm2d, {layout}", [i for i in defaults.GHOST if f"ghost {i}, {layout}" in rates]
        if plain in rates and impls:  # time ratios: BatchNorm2d's img/s over ghost's
            best = max(impls, key=lambda i: statistics.median(rates[f"ghost {i}, {layout}"]))
            ratios = paired(rates, plain, f"ghost {best}, {layout}")
            row.figure(goal, f"ghost {best}: {interval_words(ratios)} the time", row.judge(ratios, GHOST_TARGET))
        if len(impls) == 2:
            custom = faster(paired(rates, f"ghost batch_norm, {layout}", f"ghost custom, {layout}"))  # custom's time
            if custom is not None:
                choice[layout] = "custom" if custom else "batch_norm"
            whys.append(
                f"{layout}: {choice[layout]}" + (", resolved" if custom is not None else ", not resolved: today's")
            )
    if whys:
        row.choose("engine.ghost_bn", choice, "; ".join(whys))


def optimizer_row(row: Row, deadline: float) -> None:
    """bench perf optim's cases with the compiled steps (module docstring)."""
    from bench.perf import optim as perf_optim

    device = row.device
    shapes = perf_optim.SMALL if row.sizes is TINY else perf_optim._shapes("resnet50")
    bench = perf_optim.Bench(shapes, device, lr=1.0, weight_decay=5e-5, groups=4, compiled=True)
    numel = sum(torch.Size(s).numel() for s in shapes)
    times = perf_optim.measure(bench, max(numel, 2**24), row.sizes.rounds, device, deadline, row.failed)
    for name, values in times.items():
        row.case(name, values, "s")
    fused = bench.opts["vrgd"]._kernels is not None
    if "vrgd" in row.cases:
        row.cases["vrgd"]["fused kernels"] = fused
    for goal, names, target in ((5, ("lars", "lars_compiled"), LARS_GOAL),
                                (6, ("vrgd", "vrgd_eager", "vrgd_compiled"), VRGD_GOAL)):  # fmt: skip
        names = [name for name in names if name in times and "sgd" in times]
        if names:
            best = min(names, key=lambda name: statistics.median(times[name]))
            ratios = paired(times, best, "sgd")
            row.figure(
                goal, f"{best}: {interval_words(ratios)} torch's {bench.sgd} SGD step", row.judge(ratios, target)
            )
    if fused and {"observe", "observe_eager"} <= times.keys():
        ratios = paired(times, "observe", "observe_eager")
        row.figure(7, f"{interval_words(ratios)} the eager observe()'s time", row.judge(ratios, 1.0))
    elif not fused:
        row.figure(7, "not measured: no fused kernels here", "")
    if {"lars", "lars_compiled"} <= times.keys():
        won = faster(paired(times, "lars_compiled", "lars"))
        row.choose("engine.optimizer_step", "compiled" if won else "eager",
                   f"LARS compiled: {interval_words(paired(times, 'lars_compiled', 'lars'))} eager's time")  # fmt: skip
    unfused = [name for name in ("vrgd_eager_total", "vrgd_compiled_total") if name in times]
    if fused and "vrgd_total" in times and unfused:
        other = min(unfused, key=lambda name: statistics.median(times[name]))
        ratios = paired(times, "vrgd_total", other)
        row.choose("optimizer.fused", bool(faster(ratios)), f"VRGD-LARS fused step with its observe()s: "
                   f"{interval_words(ratios)} {other.removesuffix('_total')}'s time")  # fmt: skip
    else:
        row.choose("optimizer.fused", False, "no fused kernels here")


def eval_memory_row(row: Row, deadline: float) -> None:
    """evaluate() over a few and over many batches: peak memory (module docstring)."""
    from bench.engine.train import evaluate
    from bench.models import create_model, param_dtype

    sizes, device = row.sizes, row.device
    recipe = _recipe(sizes, device)
    model = create_model(recipe.model.name, recipe.model.kwargs, 10).to(
        device, dtype=param_dtype(recipe.engine.precision), memory_format=torch.channels_last
    )
    batch = (torch.randn(sizes.batch, 3, sizes.image_size, sizes.image_size, device=device),
             torch.randint(0, 10, (sizes.batch,), device=device))  # fmt: skip
    cuda = device.type == "cuda"

    def peak_mib(batches: int) -> float:
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        evaluate(model, itertools.repeat(batch, batches), recipe, device)
        if cuda:
            return torch.cuda.max_memory_allocated(device) / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the process's high-water mark

    few, many = sizes.eval_batches
    peaks = {few: [], many: []}
    for batches in (few, many) * (2 if cuda else 1):  # a CPU's high-water mark only rises: one pass each
        peaks[batches].append(peak_mib(batches))
    unit = "MiB, peak GPU memory" if cuda else "MiB, resident high-water mark of the process"
    for batches, values in peaks.items():
        row.case(f"{batches} batches", values, unit)
    low, high = max(peaks[few]), max(peaks[many])
    if cuda:
        result = ("PASS" if high <= FLAT * low else "MISS") if row.judged else row.unjudged()
        row.figure(8, f"{high:,.0f} MiB over {many} batches, {low:,.0f} over {few} ({high / low:.3f} x)", result)
    else:
        row.figure(8, f"CPU: the process's resident high-water mark rose {high - low:,.1f} MiB from {few} to {many} "
                   f"batches ({low:,.0f} MiB); the GPU's peak is owed", row.unjudged())  # fmt: skip


MEASURE = {"runner": runner_row, "ghost_bn": ghost_row, "optimizer": optimizer_row, "eval_memory": eval_memory_row}


def measure_row(name: str, device: torch.device, sizes: Sizes, budget: float) -> dict:
    """One row within `budget` seconds (a fifth kept for what follows the rounds: the split pass, the JSON)."""
    start = time.monotonic()
    row = Row(name, device, sizes)
    MEASURE[name](row, start + 0.8 * budget)
    return row.as_dict(time.monotonic() - start)


def print_row(result: dict) -> None:
    """The lines tools/gpu_check.py quotes as the step's figures."""
    for figure in result["figures"]:
        print(f"matrix {result['row']}: {figure['goal']}: {figure['measured']}; goal {figure['target']}: "
              f"{figure['result'] or '-'}")  # fmt: skip
    for key, choice in result["choices"].items():
        print(f"matrix choice {key} = {json.dumps(choice['value'])}: {choice['why']}")
    for name, error in result["failed"].items():
        print(f"matrix {result['row']}: candidate {name!r} failed: {error}")


# ----- the report -----


def _commit() -> str:
    """The tree measured: its commit, and whether files were edited since (a lent machine gets a copied tree)."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    edited = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True)
    return (done.stdout.strip() or "unknown") + (" with uncommitted changes" if edited.stdout.strip() else "")


def proposal(rows: list[dict]) -> dict:
    """The defaults.json entry the rows choose: each measured key's candidate, and how it was measured."""
    entry = {key: choice["value"] for row in rows for key, choice in row["choices"].items()}
    torch_version = rows[0]["torch"] if rows else torch.__version__
    when = time.strftime("%Y-%m-%d", time.gmtime())
    entry["measured"] = f"tools/gpu_check.py --matrix, {when}, torch {torch_version}, bench {_commit()}"
    return entry


def table(rows: list[dict], entry: dict, gpu: str | None, missing: dict[str, str]) -> str:
    """matrix.md: issue 85's rows with their figures and verdicts, the candidates' medians, the proposal."""
    by_row = {row["row"]: row for row in rows}
    where = gpu or "CPU (the rehearsal: figures of tiny sizes, no verdicts)"
    lines = [f"# The candidate matrix: {where}", "", "| row | goal | measured | result |", "| --- | --- | --- | --- |"]
    for row_name, what, target in GOALS:
        found = [f for f in by_row.get(row_name, {}).get("figures", []) if f["goal"] == what]
        if found:
            lines.append(f"| {what} | {target} | {found[0]['measured']} | {found[0]['result'] or '-'} |")
        else:
            why = missing.get(row_name, "the row gave no figure for it")
            lines.append(f"| {what} | {target} | not measured: {why} | - |")
    lines += ["", "| row | candidate | median | unit |", "| --- | --- | --- | --- |"]
    for row in rows:
        for name, case in row["cases"].items():
            median = "-" if case["median"] is None else f"{case['median']:.4g}"
            lines.append(f"| {row['row']} | {name} | {median} | {case['unit']} |")
        for name, error in row["failed"].items():
            lines.append(f"| {row['row']} | {name} | failed: {error} | |")
    lines += ["", f"Proposed defaults for {gpu or 'this CPU (not written: defaults.json lists GPU models)'}:", ""]
    lines += [f"- `{key}`: `{json.dumps(value)}`" for key, value in entry.items() if key != "measured"]
    lines += ["", f"Measured: {entry['measured']}.", ""]
    return "\n".join(lines)


def report(paths: list[Path], out: Path, write_defaults: bool, defaults_file: Path | None = None) -> dict:
    """matrix.json, matrix.md and defaults-proposal.json in `out` from the rows' files (a missing one: its row is
    "not measured"); with `write_defaults`, the proposal into `defaults_file` too (a GPU's matrix only)."""
    rows = sorted((json.loads(p.read_text()) for p in paths if p.is_file()), key=lambda row: ROWS.index(row["row"]))
    missing = {name: "the row did not finish (gpu-check.md says why)" for name in ROWS}
    for row in rows:
        missing.pop(row["row"], None)
    gpus = {row["gpu"] for row in rows}
    if len(gpus) > 1:
        raise UserError(f"bench perf matrix report: the rows ran on different devices ({sorted(map(str, gpus))})")
    gpu = next(iter(gpus), None)
    entry = proposal(rows)
    out.mkdir(parents=True, exist_ok=True)
    matrix = {"gpu": gpu, "rows": rows, "not measured": missing, "proposal": entry}
    (out / REPORT).write_text(json.dumps(matrix, indent=2) + "\n")
    (out / TABLE).write_text(table(rows, entry, gpu, missing))
    defaults.check_entry("the proposal", entry)
    (out / PROPOSAL).write_text(json.dumps({"gpus": {gpu or "cpu (a rehearsal)": entry}}, indent=2) + "\n")
    if write_defaults:
        if gpu is None:
            raise UserError("--write-defaults: this matrix ran on a CPU; defaults.json lists GPU models only")
        defaults.write(gpu, entry, defaults_file)
    return matrix


def adopt(proposal_file: Path, defaults_file: Path | None = None) -> list[str]:
    """A reviewed defaults-proposal.json's GPU entries into defaults.json (defaults.write); the GPU models written."""
    try:
        gpus = json.loads(proposal_file.read_text())["gpus"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{proposal_file}: not a matrix's {PROPOSAL} ({type(e).__name__}: {e})") from None
    if any(gpu.startswith("cpu") for gpu in gpus):
        raise UserError(f"{proposal_file}: a CPU rehearsal's proposal; defaults.json lists GPU models only")
    for gpu, entry in gpus.items():
        defaults.write(gpu, entry, defaults_file)
    return list(gpus)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m bench.perf.matrix", description=doc_summary(__doc__))
    parser.add_argument("row", choices=[*ROWS, "report", "adopt"])
    parser.add_argument("files", nargs="*", type=Path, help=f"report: the rows' JSON files; adopt: a {PROPOSAL}")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU rehearsal)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds for the row (default 120)")
    parser.add_argument("--json", type=Path, help="a row: the file for its result")
    parser.add_argument("--out", type=Path, help=f"report: the folder for {REPORT}, {TABLE} and {PROPOSAL}")
    parser.add_argument("--write-defaults", action="store_true", help=f"report: the proposal into {defaults.FILE}")
    args = parser.parse_args(argv)
    if args.row == "adopt":
        for path in args.files:
            print(f"{defaults.FILE}: the measured defaults of {', '.join(adopt(path))} (from {path})")
        return 0
    if args.row == "report":
        if not args.out:
            raise UserError("python -m bench.perf.matrix report: --out DIR is required")
        matrix = report(args.files, args.out, args.write_defaults)
        print(f"matrix report: {args.out / TABLE}; proposal for {matrix['gpu'] or 'the CPU'}: {args.out / PROPOSAL}")
        print(*[f"matrix not measured: {name}: {why}" for name, why in matrix["not measured"].items()], sep="\n")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("python -m bench.perf.matrix --device cuda: no CUDA device is visible to torch")
    torch.set_num_threads(resolve("auto"))
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True  # as the runner sets it
    result = measure_row(args.row, torch.device(args.device), TINY if args.tiny else FULL, args.budget)
    print_row(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
