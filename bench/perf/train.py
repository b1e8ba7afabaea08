"""Training throughput: bench's runner against a bare training loop, side by side (a benchmark mode).

As NVIDIA's DeepLearningExamples `--mode benchmark_training`: a few warm-up steps, then timed steps,
no evaluation. Three cases, alternating within every repeat so that a shared machine's noise falls
on all of them alike, each with its own copy of the model (same seed):

- bare: the model, the loss, backward over the recipe's micro-batches, a torch.optim.SGD step
  (momentum 0.9, the recipe's weight decay, torch's default foreach path), zero_grad; on one batch of
  random tensors.
- bench, random loader: the runner's own step (`Trainer.train_step`: the step, the loss and stop
  flag read once, the pace, the progress bar, events.jsonl in a scratch run directory) with the
  recipe's optimizer on the random-tensor loader (`data.loader: random`): the runner's overhead.
- bench, the recipe's loader: the same with the recipe's own loader (DALI, torchvision): what
  reading and decoding the data costs on top.

With ghost BatchNorm (`model.bn_batch`, or --bn-batch) over micro-batches larger than it, the two paths of
the same mathematics run side by side too (random loader): sequential micro-batches of bn_batch images (as
without the key), and, for the optimizers that keep the gradient groups apart, the groups of a micro-batch
in one torch.func pass (engine.group_pass batched) and one by one (sequential); the ratio of the recipe's
path (bench runner) over the sequential micro-batches is printed with its paired range. And a second bare loop
with torch's own BatchNorm over the whole micro-batch: ghost BatchNorm's cost, the bare loop's time over it,
judged against GHOST_TARGET as the overhead is against TARGET.

--against KEY.PATH=VALUE (repeatable) adds the runner once more with that one key changed (random loader), for
the settings that change speed but not the mathematics (engine.compile=true, engine.channels_last=true, a
larger micro_batch): its img/s over the recipe's runner, paired within each repeat, is printed with its sign-test
interval, so whether a setting pays is measured side by side on the machine it would run on.

Runner overhead = 1 - bench img/s (random loader) / bare img/s, paired within each repeat; target under 3%,
judged by a 95% interval of the median (PASS, MISS, or not resolved at the machine's noise); under MIN_PAIRS
repeats no interval reaches 95%: the lowest to the highest is printed as a range, with no verdict. The split of a
step (data wait / forward+backward / optimizer / other) comes from one more pass per case with
timers around the loader's next(), the optimizer's step() and the runner's step() (synchronising
the GPU at each, so that pass is slower and is not the img/s). On a GPU: peak memory per case,
model FLOPs utilisation and the published reference (results/reference/throughput_reference.csv).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from bench import defaults
from bench.engine.threads import resolve
from bench.errors import ArgumentParser, UserError, assignment, count, doc_summary
from bench.rundir import RunDir

TARGET = 0.03  # runner overhead, 1 - bench / bare img/s
GHOST_TARGET = 1.2  # issue 66: a bare step with ghost BatchNorm over one with torch's BatchNorm, the same micro-batch
# The fewest pairs whose sign-test interval of the median reaches 95%: [lowest, highest] misses it with
# probability 2 x 2^-n, at most 5% first at n = 6 (n = 5: 6.25%).
MIN_PAIRS = 6
# The built-in benchmark's batch on a CPU: ResNet-50's 256-image micro-batch at 224 px needs about 24 GB of
# activations (a 2-core, 24 GB machine's kernel killed it); 32 needs about 3 GB and a step takes seconds.
CPU_DEFAULT_BATCH = 32
# Dense bf16 tensor-core peak FLOP/s per GPU (the vendor's data sheet, SXM parts) for model FLOPs utilisation.
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "V100": 125e12}
REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "throughput_reference.csv"
NOT_PREEMPTED = types.SimpleNamespace(is_set=False)
# --against keys whose change the side-by-side cases cannot measure, and why
UNMEASURED = {
    "global_batch": "every case counts the recipe's batch in its img/s; give --batch for another batch",
    "data.loader": "the cases beside the recipe's run on the random loader; the recipe's own loader is its third row",
    "engine.threads": "the cases share one process and its thread count; give --threads",
}


def _recipe(args, override: str | None = None):
    """The recipe under test: the file given, or one built from --model and friends, with the flags' overrides
    (then `override`, one --against); epochs enough that the data stream and schedule outlast every timed step."""
    from bench import recipe as recipes

    sets = list(args.set)
    flags = {
        "model.name": args.model,
        "data.image_size": args.image_size,
        "global_batch": args.batch,
        "micro_batch": args.micro_batch,
        "engine.precision": args.precision,
        "engine.channels_last": args.channels_last,
        "engine.compile": args.compile,
        "model.bn_batch": args.bn_batch,
    }
    sets += [f"{key}={value}" for key, value in flags.items() if value is not None] + [override] * bool(override)
    needed = args.warmup + (args.repeats + 1) * args.steps
    if args.recipe:
        recipe = recipes.load(args.recipe, sets)
    else:
        recipe = builtin_recipe("bench perf train", args.device, sets)
    return recipe.model_copy(update={"epochs": max(recipe.epochs, needed * recipe.global_batch)})


def builtin_recipe(where: str, device: str, sets: list[str]):
    """The benchmarks' own recipe, with `sets` (KEY=VALUE) applied: ResNet-50 at 224 px on the synthetic dataset,
    batch 256; on a CPU, 32 (a few minutes, and memory a laptop has). `where` names it in errors."""
    from bench import recipe as recipes

    raw = {
        "name": "perf-train",
        "model": {"name": "resnet50"},
        "data": {
            "dataset": "synthetic",
            "image_size": 224,
            "workers": max(1, (os.cpu_count() or 2) // 2),
            "synth": {"classes": 10, "train_per_class": 20, "val_per_class": 1, "size": 256},
        },
        "global_batch": CPU_DEFAULT_BATCH if device == "cpu" else 256,
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
        "epochs": 1,
        "target_top1": 50,
    }
    return recipes.recipe_from_dict(where, recipes.apply_sets(raw, sets))


def _with_loader(recipe, loader: str):
    return recipe.model_copy(update={"data": recipe.data.model_copy(update={"loader": loader})})


class Timers:
    """Seconds per phase, summed over a pass; `wrap` times a callable, synchronising the GPU around it."""

    def __init__(self, device: torch.device):
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            self.sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        return timed


class TimedIterator:
    def __init__(self, iterator, timers: Timers):
        self.iterator, self.next = iterator, timers.wrap("data", lambda: next(iterator))

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()


class BenchCase:
    """The runner's per-step path (Trainer.train_step) over one recipe, writing a scratch run directory."""

    def __init__(self, recipe, dist, scratch: Path):
        from bench.engine.train import Progress, Trainer

        self.trainer = trainer = Trainer(recipe, dist)
        self.loader = trainer.data.loader
        self.progress = Progress()
        trainer.pace.start(self.progress)
        self.batches = trainer.data.train(0, trainer.pace.last_chunk())
        self.run = RunDir.create(scratch, recipe.name, recipe.to_yaml())
        self.bar = tqdm(total=trainer.pace.schedule_steps, unit="step", file=io.StringIO())  # drawn, not shown
        trainer.model.train()

    def steps(self, n: int) -> None:
        for _ in range(n):
            self.trainer.train_step(self.progress, self.batches, self.bar, self.run, NOT_PREEMPTED)

    @contextlib.contextmanager
    def timed(self, timers: Timers):
        """Timers around the loader, the runner's step and the optimizer's step, for one pass."""
        trainer, batches = self.trainer, self.batches
        self.batches = TimedIterator(batches, timers)
        trainer.step = timers.wrap("step", trainer.step)
        trainer.opt.step = timers.wrap("optimizer", trainer.opt.step)
        try:
            yield
        finally:
            self.batches = batches
            del trainer.step, trainer.opt.step  # the class's methods again

    def close(self) -> None:
        self.bar.close()
        getattr(self.batches, "close", lambda: None)()


class BareCase:
    """The model, the loss, backward and a torch SGD step, nothing else, on one batch of random tensors."""

    loader = "random tensors"

    def __init__(self, recipe, device: torch.device, batch, num_classes: int, accum_steps: int):
        from bench.engine import ghost_bn
        from bench.models import autocast, compiled, create_model, param_dtype

        torch.manual_seed(recipe.seed)
        fmt = torch.channels_last if recipe.engine.channels_last else torch.contiguous_format
        self.model = create_model(recipe.model.name, recipe.model.kwargs, num_classes).to(
            device, dtype=param_dtype(recipe.engine.precision), memory_format=fmt
        )
        chosen = defaults.resolve(recipe.engine, device)  # the runner's candidates
        if recipe.model.bn_batch:  # the same mathematics as the runner's model
            ghost_bn.convert(self.model, recipe.model.bn_batch, recipe.model.name, chosen.ghost_bn)
        self.net = compiled(self.model, chosen.compile)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=recipe.weight_decay)
        self.images, self.labels = batch
        self.accum, self.smoothing = accum_steps, recipe.label_smoothing
        self.autocast = lambda: autocast(recipe.engine.precision, device)
        self.model.train()

    def steps(self, n: int) -> None:
        for _ in range(n):
            for _ in range(self.accum):
                with self.autocast():
                    loss = F.cross_entropy(self.net(self.images), self.labels, label_smoothing=self.smoothing)
                (loss / self.accum).backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    @contextlib.contextmanager
    def timed(self, timers: Timers):
        self.opt.step = timers.wrap("optimizer", self.opt.step)
        try:
            yield
        finally:
            del self.opt.step

    def close(self) -> None:
        pass


def _path(trainer, batched: bool | None = None) -> str:
    """How the runner computes a micro-batch of several BatchNorm batches, in a few words (`batched`: the group
    pass named, default the trainer's)."""
    plan, g = trainer.plan, trainer.recipe.model.bn_batch
    what = f"bench, ghost BN {g} in {plan.micro_batch}"
    if plan.groups_per_micro > 1 and trainer.opt.reduces_gradients:
        return what + (
            ", vmap groups" if (trainer.batched is not None if batched is None else batched) else ", groups 1 by 1"
        )
    return what


def ghost_cases(recipe, trainer) -> dict:
    """With ghost BatchNorm over larger micro-batches: the other paths of the same mathematics (module
    docstring), {case: (recipe, label)}; nothing otherwise."""
    g, plan = recipe.model.bn_batch, trainer.plan
    if not g or plan.micro_batch == g:
        return {}
    # micro_batch g without the key: one group per micro-batch, the groups ghost BatchNorm's plan computes
    sequential = recipe.model_copy(
        update={"micro_batch": g, "model": recipe.model.model_copy(update={"bn_batch": None})}
    )
    cases = {"sequential": (sequential, f"bench, micro-batches of {g}")}
    if trainer.opt.reduces_gradients and plan.groups_per_micro > 1:
        engine = recipe.engine.model_copy(update={"group_pass": "sequential" if trainer.batched else "batched"})
        cases["other_pass"] = (recipe.model_copy(update={"engine": engine}), _path(trainer, trainer.batched is None))
    return cases


def ghost_ratio(rates: dict, trainer) -> str:
    """The runner's img/s over the sequential micro-batches', paired within each repeat, and ghost BatchNorm's cost
    in the bare loop against GHOST_TARGET, in sentences."""
    middle, low, high = sign_interval([b / a for a, b in zip(rates["sequential"], rates["bench"])])
    pairs, g = len(rates["bench"]), trainer.recipe.model.bn_batch
    line = (
        f"\nghost BatchNorm: {_path(trainer)} against micro-batches of {g}: "
        f"{middle:.2f} x the img/s (median of {pairs} paired repeats, {low:.2f} to {high:.2f})"
    )
    if "other_pass" in rates:
        other = statistics.median(b / a for a, b in zip(rates["other_pass"], rates["bench"]))
        line += f"; {other:.2f} x the other group pass's"
    line += "; the same mathematics (tests/test_ghost_bn.py)"
    cost = sign_interval([a / b for a, b in zip(rates["bare_bn"], rates["bare"])])  # time ratio = inverse img/s
    return line + (
        f"\nghost BatchNorm's cost, bare loop: ghost BN {g} in {trainer.plan.micro_batch} takes {cost[0]:.2f} x the "
        f"time of torch's BatchNorm over {trainer.plan.micro_batch} ({_spread(pairs)} {cost[1]:.2f} to {cost[2]:.2f}), "
        f"goal <= {GHOST_TARGET} x: {verdict(*cost, pairs, GHOST_TARGET)}"
    )


def flops_per_image(recipe, num_classes: int, device: torch.device) -> float:
    """FLOPs of one training image (forward + backward), counted by torch's FlopCounterMode on two images (so
    BatchNorm trains) and halved:
    matrix multiplications and convolutions at 2 FLOPs per multiply-add (ResNet-50 at 224 px: 4.1 G
    multiply-adds forward, so about 8.2 GFLOP forward and 24.6 GFLOP with backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    from bench.models import create_model, param_dtype

    model = create_model(recipe.model.name, recipe.model.kwargs, num_classes).to(
        device, dtype=param_dtype(recipe.engine.precision)
    )
    size = recipe.data.image_size
    images = torch.randn(2, 3, size, size, device=device, dtype=param_dtype(recipe.engine.precision))
    counter = FlopCounterMode(display=False)
    with counter:
        model(images).sum().backward()
    return counter.get_total_flops() / 2


def alternate(units: dict, rounds: int, deadline: float | None = None, failed: dict | None = None) -> dict:
    """Each unit's result in every round ({name: [what unit() returned, ...]}), the units taking turns in an order
    that rotates each round, so a shared machine's slow spell falls on all of them alike and none always runs
    first. `deadline` (time.monotonic()): no round starts when the last one would end past it (at least one round
    runs). `failed`: where given, a unit that raises is dropped, all its rounds with it, and its error kept there
    as "Type: message"; else the error propagates."""
    results = {name: [] for name in units}
    for rnd in range(rounds):
        start = time.monotonic()
        names = list(results)
        turn = rnd % max(1, len(names))
        for name in names[turn:] + names[:turn]:
            try:
                results[name].append(units[name]())
            except Exception as e:
                if failed is None:
                    raise
                failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                del results[name]
        if deadline is not None and time.monotonic() + (time.monotonic() - start) > deadline:
            break
    return results


def measure(
    cases: dict,
    repeats: int,
    steps: int,
    warmup: int,
    device: torch.device,
    images_per_step: int,
    clock=time.perf_counter,
    deadline: float | None = None,
    failed: dict | None = None,
):
    """img/s of every case in every repeat, peak GPU memory per case, then one timed pass each for the split
    of a step. Within a repeat the cases take turns step by step, in an order that rotates each step (alternate).
    `clock`: wall time, or time.process_time (--clock cpu: this process's CPU seconds, which leave out the time
    other processes hold the cores; not a loader's worker processes). `deadline`, `failed`: alternate's (a case
    that fails its warm-up is dropped too)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    peaks = dict.fromkeys(cases, 0.0)

    def one_step(name: str):
        def timed() -> float:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync()
            start = clock()
            cases[name].steps(1)
            sync()
            seconds = clock() - start
            if device.type == "cuda":
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated(device) / 2**30)
            return seconds

        return timed

    warm = alternate({name: lambda case=case: case.steps(warmup) for name, case in cases.items()}, 1, None, failed)
    # allocation, cudnn.benchmark, torch.compile, the loader's first batches
    seconds = alternate({name: one_step(name) for name in warm}, repeats * steps, deadline, failed)
    done = min(len(times) for times in seconds.values()) // steps if seconds else 0
    rates = {
        name: [steps * images_per_step / sum(times[r * steps : (r + 1) * steps]) for r in range(done)]
        for name, times in seconds.items()
    }
    peaks = {name: peaks[name] for name in rates}

    def split(case) -> dict[str, float]:
        timers = Timers(device)
        with case.timed(timers):
            total = timers.wrap("total", case.steps)
            total(steps)
        seconds = {key: value / steps for key, value in timers.seconds.items()}
        step = seconds.get("step", seconds["total"])
        data, opt = seconds.get("data", 0.0), seconds["optimizer"]
        return {"data": data, "forward+backward": step - data - opt, "optimizer": opt, "other": seconds["total"] - step}

    # a case whose split pass fails (`failed` given) keeps its img/s and has no split
    passes = alternate({name: lambda case=cases[name]: split(case) for name in rates}, 1, None, failed)
    return rates, {name: done[0] for name, done in passes.items()}, peaks


BUSY = "while True: pass"  # another user's CPU-bound process on a shared machine


def contended(case, repeats: int, steps: int, images_per_step: int) -> tuple[list[float], list[float]]:
    """img/s of `case` alone and beside one busy process, alternating within each repeat (--contended)."""
    idle, busy = [], []
    for _ in range(repeats):
        for rates, beside in ((idle, False), (busy, True)):
            neighbour = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True) if beside else None
            try:
                time.sleep(0.5 if beside else 0.0)  # the neighbour is running before the clock starts
                start = time.perf_counter()
                case.steps(steps)
                rates.append(steps * images_per_step / (time.perf_counter() - start))
            finally:
                if neighbour:
                    neighbour.kill()
                    neighbour.wait()
    return idle, busy


def sign_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high) of paired values: the sign test's 95% interval of the median from their order statistics
    (bench.analysis.power.median_interval); with fewer than MIN_PAIRS no interval reaches 95% and it is the lowest
    to the highest."""
    from bench.analysis.power import median_interval

    low, high, _ = median_interval(values, 0.95) or (values[0], values[0], 0.0)
    return statistics.median(values), low, high


def overhead(rates: dict) -> tuple[float, float, float]:
    """Runner overhead 1 - bench / bare, paired within each repeat: (median, low, high) by sign_interval."""
    return sign_interval([1 - b / a for a, b in zip(rates["bare"], rates["bench"])])


def verdict(middle: float, low: float, high: float, pairs: int = MIN_PAIRS, target: float = TARGET) -> str:
    """PASS or MISS when the whole interval is on one side of the target; none from a range of too few pairs."""
    if pairs < MIN_PAIRS:
        return f"no verdict from {pairs} repeat{'s' * (pairs != 1)} (--repeats {MIN_PAIRS} or more give an interval)"
    if high < target:
        return "PASS"
    if low >= target:
        return "MISS"
    return "not resolved at this noise: more --repeats"


def _spread(pairs: int) -> str:
    return "95% interval" if pairs >= MIN_PAIRS else "range (too few repeats for an interval)"


def _reference(precision: str) -> list[dict]:
    wanted = {"bf16": "amp", "fp32": "tf32"}.get(precision)
    with open(REFERENCE) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return [row for row in rows if row["precision"] == wanted and row["gpus"] == "1"]


def report(recipe, device, rates, splits, peaks, labels, flops) -> float:
    median = {name: statistics.median(r) for name, r in rates.items()}
    width = max(44, *(len(label) + 2 for label in labels.values()))
    print(
        f"{'case':<{width}}{'img/s':>9}{'x bare':>8}{'step ms':>9}{'data':>8}{'fwd+bwd':>9}{'optim':>8}{'other':>8}"
        f"{'peak GiB':>10}"
    )
    for name, rate in median.items():
        split = splits[name]
        peak = f"{peaks[name]:>10.2f}" if device.type == "cuda" else f"{'':>10}"
        print(
            f"{labels[name]:<{width}}{rate:>9.1f}{rate / median['bare']:>8.3f}{sum(split.values()) * 1e3:>9.1f}"
            + "".join(
                f"{split[key] * 1e3:>{w}.1f}"
                for key, w in (("data", 8), ("forward+backward", 9), ("optimizer", 8), ("other", 8))
            )
            + peak
        )
    middle, low, high = overhead(rates)
    pairs = len(rates["bare"])
    print(
        f"\nrunner overhead: 1 - bench (random loader) / bare = {100 * middle:.1f}% (median over "
        f"{pairs} paired repeats; {_spread(pairs)} {100 * low:.1f}% to {100 * high:.1f}%), target < "
        f"{100 * TARGET:.0f}%: {verdict(middle, low, high, pairs)}"
    )
    if device.type == "cpu":
        print(
            f"peak resident memory of the process (all cases): "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"
        )
    print(
        f"model FLOPs: {flops / 1e9:.2f} GFLOP per training image (torch FlopCounterMode, forward + backward, "
        "2 FLOPs per multiply-add)"
    )
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = next((value for key, value in PEAK_BF16.items() if key in name), None)
        if recipe.engine.precision == "bf16" and peak:
            print(
                f"model FLOPs utilisation (bench, random loader): {100 * median['bench'] * flops / peak:.1f}% of "
                f"{peak / 1e12:.0f} TFLOP/s dense bf16 ({name})"
            )
        for row in _reference(recipe.engine.precision):
            print(
                f"published reference: {row['gpu']}, {row['gpus']} GPU, {row['precision']}: "
                f"{float(row['images_per_second']):,.0f} img/s ({row['source']}; ResNet-50 v1.5, DALI)"
            )
    print(
        "\nimg/s: median over the repeats; within a repeat the cases take turns step by step, in an order rotating\n"
        "each step. x bare: that median over the bare loop's. The overhead pairs bench and bare within each repeat;\n"
        "its interval is the sign test's for the median (PASS: all of it under the target, MISS: all above);\n"
        f"under {MIN_PAIRS} repeats it is the lowest to the highest pair, a range with no verdict.\n"
        "step ms and its split: one more pass per case with timers (the GPU synchronised at each):\n"
        "data = waiting for the loader's next batch, optim = the optimizer's step(), fwd+bwd = the rest of the\n"
        "runner's step, other = the runner's work around it (loss and stop flag, pace, progress bar, events.jsonl)."
    )
    return middle


def against_ratio(rates: dict, override: str) -> str:
    """One --against case's img/s over the recipe's runner ('bench'), paired within each repeat, in a sentence."""
    pairs = len(rates["bench"])
    middle, low, high = sign_interval([b / a for a, b in zip(rates["bench"], rates[override])])
    return (
        f"against the recipe, {override}: {middle:.2f} x its img/s (median of {pairs} paired repeats; "
        f"{_spread(pairs)} {low:.2f} to {high:.2f})"
    )


def parse_against(overrides: list[str], prog: str, unmeasured: dict[str, str] | None = None) -> list[str]:
    """The --against settings, each once, in order; one that is not KEY.PATH=VALUE, or whose key the benchmark
    cannot measure (`unmeasured`: key -> why), is a UserError."""
    overrides = list(dict.fromkeys(overrides))  # one case a setting
    for override in overrides:
        if "=" not in override:
            raise UserError(f"{prog} --against {override!r}: expected KEY.PATH=VALUE, e.g. engine.compile=true")
        if (key := override.split("=", 1)[0]) in (unmeasured or {}):
            raise UserError(f"{prog} --against {override!r}: {unmeasured[key]}")
    return overrides


def compile_words(setting) -> str:
    return "" if not setting else ", compiled" + (f" ({setting})" if isinstance(setting, str) else "")


def main(argv: list[str] | None = None) -> int:
    from bench.models import COMPILE_MODES

    parser = ArgumentParser(prog="bench perf train", description=doc_summary(__doc__))
    parser.add_argument("recipe", nargs="?", help="a recipe file (default: --model and friends, resnet50 at 224 px)")
    parser.add_argument(
        "--set", action="append", default=[], type=assignment, metavar="KEY.PATH=VALUE", help="override a recipe key"
    )
    parser.add_argument("--model", help="timm model (default: the recipe's, else resnet50)")
    parser.add_argument("--image-size", type=count(1), help="image side in pixels (default: the recipe's, else 224)")
    parser.add_argument("--batch", type=count(1), help="global batch (default: the recipe's, else 256)")
    parser.add_argument("--micro-batch", type=count(1), help="micro-batch (default: the recipe's, else auto)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], help="default: the recipe's, else fp32")
    parser.add_argument("--channels-last", action="store_const", const=True, help="NHWC memory format")
    parser.add_argument(
        "--bn-batch", type=count(1), help="ghost BatchNorm's batch (model.bn_batch), compared with micro-batches of it"
    )
    parser.add_argument(
        "--compile",
        nargs="?",
        const=True,
        choices=COMPILE_MODES,
        metavar="MODE",
        help=f"torch.compile the model, in torch's default mode or MODE ({', '.join(COMPILE_MODES)})",
    )
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="also time the runner with this one key changed (repeatable; e.g. engine.compile=true), and print its "
        "img/s over the recipe's, paired",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--threads", type=count(1), help="CPU threads (torch.set_num_threads); default: bench's auto (engine.threads)"
    )
    parser.add_argument(
        "--contended",
        action="store_true",
        help="also time bench's runner beside one busy process "
        "(a shared machine) against alone, alternating; goal: at least half the rate alone",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="img/s per wall second, or per CPU second of this process (cpu: a shared machine's other processes "
        "leave it alone; the random loader only)",
    )
    parser.add_argument("--warmup", type=count(1), default=2, help="untimed steps per case first (default 2)")
    parser.add_argument("--steps", type=count(1), default=6, help="timed steps per case and repeat (default 6)")
    parser.add_argument("--repeats", type=count(1), default=5, help="timed repeats (default 5)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("bench perf train --device cuda: no CUDA device is visible to torch")
    args.against = parse_against(args.against, "bench perf train", UNMEASURED)
    from bench.engine.distributed import Dist

    torch.set_num_threads(args.threads or resolve("auto"))

    device = torch.device(args.device)
    dist = Dist(0, 1, 0, device)
    recipe = _recipe(args)
    with tempfile.TemporaryDirectory(prefix="bench-perf-train-") as scratch:
        random = BenchCase(_with_loader(recipe, "random"), dist, Path(scratch))
        trainer = random.trainer
        batch, classes, accum = next(trainer.data.train(0, 1)), trainer.data.num_classes, trainer.plan.accum_steps
        cases = {"bare": BareCase(recipe, device, batch, classes, accum), "bench": random}
        if recipe.data.loader != "random":
            cases["loader"] = BenchCase(recipe, dist, Path(scratch))
        labels = {
            "bare": "bare loop (torch SGD, random tensors)",
            "bench": "bench runner, random loader",
            "loader": f"bench runner, {cases.get('loader', random).loader} loader",
        }
        for name, (variant, label) in ghost_cases(recipe, trainer).items():
            cases[name], labels[name] = BenchCase(_with_loader(variant, "random"), dist, Path(scratch)), label
        for override in args.against:
            try:
                variant = _with_loader(_recipe(args, override), "random")
            except UserError as error:  # the recipe's own words name --set: name the flag given
                raise UserError(
                    f"bench perf train --against {override!r}: {str(error).replace(f'--set {override!r}: ', '')}"
                ) from None
            cases[override], labels[override] = BenchCase(variant, dist, Path(scratch)), f"bench, {override}"
        if "sequential" in cases:  # ghost BatchNorm's cost: the bare loop again with torch's BatchNorm
            plain = recipe.model_copy(update={"model": recipe.model.model_copy(update={"bn_batch": None})})
            cases["bare_bn"] = BareCase(plain, device, batch, classes, accum)
            g, micro = recipe.model.bn_batch, trainer.plan.micro_batch
            labels |= {
                "bench": _path(trainer),
                "bare": f"bare loop, ghost BN {g} in {micro} (torch SGD)",
                "bare_bn": f"bare loop, torch's BatchNorm over {micro}",
            }
        plan = trainer.plan
        where = (
            f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}"
            if device.type == "cpu"
            else torch.cuda.get_device_name(device)
        )
        small = (
            " (the CPU default; --batch to change)" if device.type == "cpu" and not (args.recipe or args.batch) else ""
        )
        print(
            f"bench perf train: {recipe.model.name} at {recipe.data.image_size} px, global batch "
            f"{plan.batch} = {plan.accum_steps} x {plan.micro_batch}{small}, {recipe.engine.precision}"
            f"{', channels_last' if recipe.engine.channels_last else ''}{compile_words(recipe.engine.compile)}"
            f", optimizer {recipe.optimizer.name}; {device.type} ({where}); {args.warmup} warm-up + {args.repeats} x "
            f"{args.steps} timed steps per case{', img/s per CPU second (--clock cpu)' if args.clock == 'cpu' else ''}\n"
        )
        try:
            clock = time.process_time if args.clock == "cpu" else time.perf_counter
            rates, splits, peaks = measure(cases, args.repeats, args.steps, args.warmup, device, plan.batch, clock)
            shared = contended(cases["bench"], args.repeats, args.steps, plan.batch) if args.contended else None
        finally:
            for case in cases.values():
                case.close()
        flops = flops_per_image(recipe, trainer.data.num_classes, device)
        report(recipe, device, rates, splits, peaks, labels, flops)
        if "sequential" in cases:
            print(ghost_ratio(rates, trainer))
        for override in args.against:
            print(against_ratio(rates, override))
        if shared:
            alone, beside = (statistics.median(r) for r in shared)
            ratios = sorted(b / a for a, b in zip(*shared))
            print(
                f"\nshared machine (--contended): bench runner beside one busy process {beside:,.1f} img/s against "
                f"{alone:,.1f} alone = {beside / alone:.2f} x (paired repeats: {ratios[0]:.2f} to {ratios[-1]:.2f}); "
                f"goal >= 0.5: {'met' if beside / alone >= 0.5 else 'MISSED'} with {torch.get_num_threads()} "
                f"threads (GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
