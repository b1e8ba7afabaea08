"""Time to train on a cluster (`bench project`): steps and images to target turned into minutes on N accelerators.

A model, not a measurement. One step of data parallelism on N = nodes x per_node accelerators at global batch B
(per-device batch b = B / N; accumulation inside a step changes nothing here):

    step      = overhead + b / X + exposed + extra
    exposed   = max(0, allreduce(S) - (2/3) b / X)     the gradient's all-reduce, hidden behind the backward pass
                                                         (2/3 of the compute) as DDP's buckets are; an optimizer
                                                         that reduces its own statistics in step() hides nothing:
              = allreduce(S)
    allreduce = 2 (g-1)/g S / intra + 2 (g-1) a_intra    inside a node of g accelerators (ring)
              + 2 (n-1)/n S / inter + 2 ceil(log2 n) a_inter    across n nodes (ring bandwidth, tree latency: NCCL)
    extra     = (accesses per local group x groups per device + accesses per step) x P x 4 bytes / memory bandwidth

X (images/s per device at a large per-device batch) and overhead (every step's fixed cost) belong to the
accelerator and are fit to published runs; S is the bytes bench all-reduces per step (`reduced_bytes`: read from
bench/optim/groups.py and the runner, and checked against a real 2-process all-reduce in tests/test_project.py);
P the model's parameters. Minutes to target = steps x (overhead + exposed + extra) + images / (N X), so a
changing batch (SimiGrad) counts its images and steps as they were. Left out: the input pipeline (assumed to keep
up), start-up, checkpoints, evaluation beyond what the fit absorbed, stragglers, and a torus topology (TPU pods).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError

from bench import catalog
from bench.analysis import paper
from bench.analysis.render import NO_NUMBER, Table, cell
from bench.errors import UserError, did_you_mean
from bench.recipe import Strict

if TYPE_CHECKING:
    from bench.recipe import Recipe
    from bench.rundir import Run

PRESETS = Path(__file__).with_name("clusters.yaml")
VALIDATION = "time_to_train_resnet50"  # results/reference/<stem>.csv
IMAGENET_TRAIN_IMAGES = paper.IMAGENET_TRAIN
RESNET50_PARAMETERS = 25_557_032  # ResNet-50 v1.5 with 1000 classes
BACKWARD_SHARE = 2 / 3  # backward = 2 x forward FLOPs
FLOAT_BYTES = 4  # bench's gradients and statistics are fp32 (bf16 autocast keeps fp32 parameters; fp64 runs: 8)
SATURATED = 0.5  # parallel efficiency under which more accelerators stop paying
GOAL = 0.25  # the validation's goal: median absolute error under 25%

# What each kind of optimizer all-reduces and computes beyond the base update, from the code:
# plain: DDP reduces the gradient (P elements) in buckets during backward (engine/train.py);
# GroupGradients (optim/groups.py) reduces [sums | second | sq_norms | count] in step(): second = 0 (AdaScale),
# P (VRGD's squares), 2P (SimiGrad's halves); AdaScale per_group adds one float64 per param group.
# Accesses: fp32 element reads and writes per parameter in observe() (per group) and in the statistics (per step).
KINDS = {  # catalog groups: (second buffer in units of P, accesses per local group, accesses per step)
    None: (None, 0, 0),  # DDP reduces the gradient
    "sums": (0, 4, 4),  # AdaScale: sum += g, ||g||; mean, ||g_bar||^2
    "squares": (1, 6, 12),  # VRGD: sum += g, sumsq += g^2; mean, squares, the GSNR factors, g_vr
    "halves": (2, 7, 6),  # SimiGrad: sum += g, half += g, ||g||; mean, the halves' dot products
}


def stack_words(name: str, acc: Accelerator) -> str:
    """Whose speed an accelerator preset is: the published runs it was fit to, not bench's own."""
    return (
        f"{acc.images_per_second:,.0f} img/s per {name} (ResNet-50 at 224 px, mixed precision; {acc.source}: the "
        "submitters' tuned stack, not bench's; `bench perf train RECIPE --device cuda` measures bench's, for "
        "--throughput)"
    )


def kind(optimizer: str) -> str | None:
    """What the optimizer keeps of the gradient groups (its catalog record's `groups`)."""
    if optimizer not in catalog.OPTIMIZERS:
        raise UserError(f"unknown optimizer '{optimizer}'{did_you_mean(optimizer, catalog.OPTIMIZERS)}")
    return catalog.OPTIMIZERS[optimizer].groups


def reduced_bytes(
    optimizer: str,
    parameters: int,
    param_groups: int = 2,
    per_group_gain: bool = False,
    element_bytes: int = FLOAT_BYTES,
) -> int:
    """The bytes bench all-reduces per step for this optimizer (one rank's message), at the parameters' precision."""
    second = KINDS[kind(optimizer)][0]
    if second is None:
        return parameters * element_bytes  # DDP's buckets: the gradient
    extra = param_groups * 8 if per_group_gain else 0  # AdaScale per_group: one float64 per param group
    return ((1 + second) * parameters + 2) * element_bytes + extra  # [sums | second | sq_norms | count]


def overlapped(optimizer: str) -> bool:
    """Whether the all-reduce runs during backward (DDP) or after it, in the optimizer's step()."""
    return kind(optimizer) is None


class Accelerator(Strict):
    images_per_second: PositiveFloat
    step_overhead_ms: NonNegativeFloat
    memory_GBps: PositiveFloat
    source: str


class Cluster(Strict):
    accelerator: str
    per_node: PositiveInt
    intra_GBps: PositiveFloat
    inter_GBps: PositiveFloat
    intra_latency_us: NonNegativeFloat
    inter_latency_us: NonNegativeFloat
    source: str


class Presets(Strict):
    accelerators: dict[str, Accelerator]
    clusters: dict[str, Cluster]


def load_presets(path: str | Path | None = None) -> Presets:
    """The preset file (default: bench's own, bench/analysis/clusters.yaml), checked."""
    from bench.recipe import read_yaml

    path = Path(path) if path else PRESETS
    raw = read_yaml(path, "cluster preset")
    try:
        presets = Presets.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise UserError(f"{path}: key '{where}': {err['msg'][0].lower() + err['msg'][1:]}") from None
    for name, cluster in presets.clusters.items():
        if cluster.accelerator not in presets.accelerators:
            raise UserError(
                f"{path}: key 'clusters.{name}.accelerator': unknown accelerator "
                f"'{cluster.accelerator}' (the file's: {', '.join(presets.accelerators)})"
            )
    return presets


def cluster_of(presets: Presets, name: str) -> tuple[Cluster, Accelerator]:
    if name not in presets.clusters:
        raise UserError(
            f"unknown cluster preset '{name}'{did_you_mean(name, presets.clusters)} "
            f"(presets: {', '.join(presets.clusters)})"
        )
    cluster = presets.clusters[name]
    return cluster, presets.accelerators[cluster.accelerator]


def allreduce_seconds(nbytes: float, accelerators: int, cluster: Cluster) -> float:
    """Hierarchical all-reduce of one nbytes message: ring inside the node, ring bandwidth with tree latency across."""
    g = min(cluster.per_node, accelerators)
    n = math.ceil(accelerators / cluster.per_node)
    t = 0.0
    if g > 1:
        t += 2 * (g - 1) / g * nbytes / (cluster.intra_GBps * 1e9) + 2 * (g - 1) * cluster.intra_latency_us * 1e-6
    if n > 1:
        t += (
            2 * (n - 1) / n * nbytes / (cluster.inter_GBps * 1e9)
            + 2 * math.ceil(math.log2(n)) * cluster.inter_latency_us * 1e-6
        )
    return t


@dataclass(frozen=True)
class Device:
    """What one accelerator does for the model being projected."""

    images_per_second: float
    overhead_s: float
    memory_GBps: float


def step_parts(
    per_device_batch: float,
    accelerators: int,
    cluster: Cluster,
    device: Device,
    optimizer: str,
    parameters: int,
    groups: int = 1,
    nbytes: float | None = None,
) -> dict[str, float]:
    """One step's seconds, by part (the module's equations). groups: the step's gradient groups over all ranks."""
    compute = per_device_batch / device.images_per_second
    nbytes = reduced_bytes(optimizer, parameters) if nbytes is None else nbytes
    comm = allreduce_seconds(nbytes, accelerators, cluster)
    exposed = max(0.0, comm - BACKWARD_SHARE * compute) if overlapped(optimizer) else comm
    _, per_group, per_step = KINDS[kind(optimizer)]
    local_groups = max(1.0, groups / accelerators)
    extra = (per_group * local_groups + per_step) * parameters * FLOAT_BYTES / (device.memory_GBps * 1e9)
    return {"overhead": device.overhead_s, "compute": compute, "allreduce": comm, "exposed": exposed, "extra": extra}


def seconds_to_target(
    images: float,
    steps: float,
    accelerators: int,
    cluster: Cluster,
    device: Device,
    optimizer: str,
    parameters: int,
    groups: int = 1,
    nbytes: float | None = None,
) -> float:
    """steps x (overhead + exposed + extra) + images / (N X); inf when the target was never reached."""
    if not (math.isfinite(images) and math.isfinite(steps)):
        return math.inf
    parts = step_parts(
        images / steps / accelerators, accelerators, cluster, device, optimizer, parameters, groups, nbytes
    )
    return steps * (parts["overhead"] + parts["exposed"] + parts["extra"]) + images / (
        accelerators * device.images_per_second
    )


# --- validation against the public record ------------------------------------------------------------------------


def reference_runs() -> tuple[pd.DataFrame, str]:
    return paper.reference(VALIDATION)


def _observed_step(row) -> tuple[float, float]:
    """(per-device batch, seconds per step) of a published run."""
    steps = row.epochs * IMAGENET_TRAIN_IMAGES / row.global_batch
    return row.global_batch / row.accelerators, row.minutes * 60 / steps


def fit(rows: pd.DataFrame, presets: Presets) -> Device:
    """X and the step overhead that make the model reproduce the calibration rows (least squares of
    seconds per step on per-device batch, with the exposed all-reduce of the current fit taken off; one row: no
    overhead). The all-reduce uses each row's cluster and gradient bytes."""
    memory = presets.accelerators[rows.iloc[0].accelerator].memory_GBps
    x, t0 = 1e-3, 0.0  # seconds per image, seconds per step
    for _ in range(50):
        device = Device(1 / x, t0, memory)
        points = []
        for row in rows.itertuples():
            b, s = _observed_step(row)
            cluster = presets.clusters[row.cluster]
            nbytes = RESNET50_PARAMETERS * row.gradient_bytes
            exposed = step_parts(b, row.accelerators, cluster, device, "lars", RESNET50_PARAMETERS, nbytes=nbytes)[
                "exposed"
            ]
            points.append((b, s - exposed))
        if len(points) == 1:
            x, t0 = points[0][1] / points[0][0], 0.0
        else:
            slope = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
            x, t0 = slope.slope, max(slope.intercept, 0.0)
    return Device(1 / x, t0, memory)


def validate(presets: Presets | None = None) -> pd.DataFrame:
    """Every published run projected: calibration rows from the fit they made, validation rows from the preset's
    accelerator (which the test holds equal to that fit). error = projected / reported - 1."""
    presets = presets or load_presets()
    runs, _ = reference_runs()
    out = []
    for row in runs.itertuples():
        cluster = presets.clusters[row.cluster]
        acc = presets.accelerators[row.accelerator]
        device = Device(acc.images_per_second, acc.step_overhead_ms / 1e3, acc.memory_GBps)
        images = row.epochs * IMAGENET_TRAIN_IMAGES
        steps = images / row.global_batch
        seconds = seconds_to_target(
            images,
            steps,
            row.accelerators,
            cluster,
            device,
            "lars",
            RESNET50_PARAMETERS,
            nbytes=RESNET50_PARAMETERS * row.gradient_bytes,
        )
        out.append({**row._asdict(), "projected_minutes": seconds / 60, "error": seconds / 60 / row.minutes - 1})
    return pd.DataFrame(out).drop(columns="Index")


def validation_table(frame: pd.DataFrame) -> Table:
    table = Table(
        "Projected against published ResNet-50 time to train",
        ["system", "accelerators", "batch", "epochs", "role", "reported min", "projected min", "error %", "source"],
    )
    for r in frame.itertuples():
        table.rows.append(
            [
                r.system,
                cell(r.accelerators, "int"),
                cell(r.global_batch, "int"),
                cell(r.epochs, "float"),
                r.role,
                cell(r.minutes, "float"),
                cell(r.projected_minutes, "float"),
                cell(100 * r.error, "pct"),
                r.source,
            ]
        )
    held = frame[frame.role == "validation"]
    table.notes += [
        f"validation rows (never fit): median |error| {100 * held.error.abs().median():.1f}% over {len(held)} rows "
        f"(goal under {100 * GOAL:.0f}%), largest {100 * held.error.abs().max():.1f}%; calibration rows fit the "
        f"accelerator and are shown, not counted",
        "a projection from results/reference/time_to_train_resnet50.csv and bench/analysis/clusters.yaml "
        "(bench/analysis/project.py's equations); what it leaves out: the input pipeline, start-up, stragglers",
    ]
    return table


# --- projecting measured or published steps ----------------------------------------------------------------------


def measured_inputs(paths: list[str]) -> tuple[pd.DataFrame, dict]:
    """Per optimizer and batch: the median over seeds of images and steps to target (a miss counts as never: half
    or more misses make the median a miss), from a results tree; a sweep's reruns when it has them. Also the
    recipe facts the model needs."""
    from bench.analysis import results

    study = results.load_study(paths)
    runs = study.runs
    if "role" in runs and (runs.role == "rerun").any():
        runs = runs[runs.role == "rerun"]
    runs = runs[runs.finished]
    if not len(runs):
        raise UserError(f"{', '.join(paths)}: no finished run to project")
    rows = []
    for (opt, batch), g in runs.groupby(["optimizer", "global_batch"]):
        rows.append(
            {
                "optimizer": opt,
                "global_batch": int(batch),
                "seeds": len(g),
                "reached": int(g.steps_to_target.map(math.isfinite).sum()),
                "steps": g.steps_to_target.median(),
                "images": g.images_to_target.median(),  # a miss is inf
                "groups": int(g.plan_groups.max()),
            }
        )
    frame = pd.DataFrame(rows)
    if not frame.steps.map(math.isfinite).any():
        raise UserError(
            f"{', '.join(paths)}: no optimizer and batch reached its target_top1 in most of its runs; "
            "nothing to project (lower target_top1 or train longer)"
        )
    resnet50_224 = bool((runs.model == "resnet50").all() and (runs.image_size == 224).all())
    record = study.record(runs.run.iloc[0])
    fp64 = (record.recipe.get("engine") or {}).get("precision") == "fp64"  # else fp32 parameters (bf16 autocast too)
    return frame, {"run": record, "resnet50_224": resnet50_224, "element_bytes": 8 if fp64 else FLOAT_BYTES}


def resnet50_224(recipe: Recipe) -> bool:
    """Whether a recipe trains ResNet-50 at 224 px: the model of the presets' throughput, RESNET50_PARAMETERS and
    (where its data is not here) ImageNet-1k's training images."""
    return recipe.model.name == "resnet50" and recipe.data.image_size == 224


def recipe_inputs(r: Recipe, train: int, groups: int) -> tuple[pd.DataFrame, dict]:
    """A recipe's steps and images (its epochs of `train` images: its training set's, which the caller reads from
    its data), its `groups` (its batch plan's gradient groups on one rank), and the facts the model needs."""
    steps = math.ceil(r.epochs * train / r.global_batch)
    row = {"optimizer": r.optimizer.name, "global_batch": r.global_batch, "seeds": math.nan, "reached": math.nan}
    row |= {"steps": steps, "images": steps * r.global_batch, "groups": groups}
    with_parameters = RESNET50_PARAMETERS if resnet50_224(r) else None
    return pd.DataFrame([row]), {
        "resnet50_224": resnet50_224(r),
        "element_bytes": 8 if r.engine.precision == "fp64" else FLOAT_BYTES,
        "epochs": r.epochs,
        "images": train,
        "parameters": with_parameters,
    }


def reference_inputs() -> pd.DataFrame:
    """LARS' epochs to 75.9% by batch from MLPerf's reference convergence points (the middle of the range)."""
    rcp, _ = paper.reference("mlperf_resnet50_rcp")
    epochs = (rcp.epochs_min + rcp.epochs_max) / 2
    images = epochs * IMAGENET_TRAIN_IMAGES
    return pd.DataFrame(
        {
            "optimizer": "lars",
            "global_batch": rcp.batch.astype(int),
            "seeds": math.nan,
            "reached": math.nan,
            "steps": images / rcp.batch,
            "images": images,
            "groups": 1,
        }
    )


def recorded_parameters(record: Run) -> int | None:
    """A measured run's model parameters as its meta records them (every trained coordinate, counted by the
    dead-parameter probe: `dead_params.total`); None for a run from before that record."""
    return (record.meta.get("dead_params") or {}).get("total") or None


def project(
    inputs: pd.DataFrame,
    cluster: Cluster,
    device: Device,
    accelerators: list[int],
    parameters: int,
    element_bytes: int = FLOAT_BYTES,
) -> pd.DataFrame:
    """Minutes to target for every optimizer, batch and accelerator count (per-device batch at least 1)."""
    rows = []
    for r in inputs.itertuples():
        nbytes = reduced_bytes(r.optimizer, parameters, element_bytes=element_bytes)
        for n in accelerators:
            if n > r.global_batch:
                continue
            parts = step_parts(r.global_batch / n, n, cluster, device, r.optimizer, parameters, r.groups, nbytes)
            minutes = (
                seconds_to_target(r.images, r.steps, n, cluster, device, r.optimizer, parameters, r.groups, nbytes) / 60
            )
            rows.append(
                {
                    "optimizer": r.optimizer,
                    "global_batch": r.global_batch,
                    "accelerators": n,
                    "steps": r.steps,
                    "minutes": minutes,
                    "step_ms": 1e3 * (parts["overhead"] + parts["compute"] + parts["exposed"] + parts["extra"]),
                    "allreduce_ms": 1e3 * parts["allreduce"],
                    "exposed_ms": 1e3 * parts["exposed"],
                    "extra_ms": 1e3 * parts["extra"],
                }
            )
    return pd.DataFrame(rows)


def saturation(frame: pd.DataFrame) -> pd.DataFrame:
    """Per optimizer and batch: the most accelerators whose parallel efficiency against the fewest projected is at
    least SATURATED (past it more accelerators stop paying), and per optimizer and accelerator count the batch
    with the fewest minutes (past it a larger batch stops helping)."""
    out = []
    for (opt, batch), g in frame[frame.minutes.map(math.isfinite)].groupby(["optimizer", "global_batch"]):
        g = g.sort_values("accelerators")
        base = g.iloc[0]
        eff = base.minutes * base.accelerators / (g.minutes * g.accelerators)
        out.append(
            {"optimizer": opt, "global_batch": batch, "efficient_up_to": int(g.accelerators[eff >= SATURATED].max())}
        )
    return pd.DataFrame(out)


def break_even(frame: pd.DataFrame, slow: str, fast: str) -> pd.DataFrame:
    """Per batch and accelerator count, the break-even: the steps `slow` (VRGD-LARS, whose steps cost more) may take
    as a fraction of `fast`'s (LARS) and still finish no later (fast's step time / slow's), beside the measured
    steps ratio (slow's median steps to target / fast's)."""
    keys = ["global_batch", "accelerators"]
    both = frame[frame.optimizer == slow].merge(frame[frame.optimizer == fast], on=keys, suffixes=("_slow", "_fast"))
    return both[keys].assign(
        needed_steps_ratio=both.step_ms_fast / both.step_ms_slow, measured_steps_ratio=both.steps_slow / both.steps_fast
    )


def minutes_table(frame: pd.DataFrame, title: str, notes: list[str]) -> Table:
    counts = sorted(frame.accelerators.unique())
    table = Table(
        title, ["optimizer", "batch", "steps to target"] + [f"{n:,} acc. (min)" for n in counts], notes=list(notes)
    )
    for (opt, batch), g in frame.groupby(["optimizer", "global_batch"], sort=False):
        minutes = dict(zip(g.accelerators, g.minutes))
        table.rows.append(
            [paper.display(opt), cell(batch, "int"), cell(g.steps.iloc[0], "steps")]
            + [cell(minutes.get(n, math.nan), "epochs") for n in counts]
        )
    return table


def break_even_table(even: pd.DataFrame, slow: str, fast: str) -> Table:
    counts = sorted(even.accelerators.unique())
    table = Table(
        f"Break-even: the fraction of {paper.display(fast)}'s steps {paper.display(slow)} may take and "
        "still finish no later",
        ["batch"] + [f"{n:,} acc." for n in counts] + ["measured"],
    )
    for batch, g in even.groupby("global_batch"):
        needed = dict(zip(g.accelerators, g.needed_steps_ratio))
        table.rows.append(
            [cell(batch, "int")]
            + [cell(needed.get(n, math.nan), "ratio") for n in counts]
            + [cell(g.measured_steps_ratio.iloc[0], "ratio")]
        )
    table.notes.append(
        f"needed = {paper.display(fast)}'s projected step time / {paper.display(slow)}'s at that batch "
        f"and accelerator count; measured = {paper.display(slow)}'s median steps to target / "
        f"{paper.display(fast)}'s ({NO_NUMBER}: not measured); below 1: {paper.display(slow)}'s steps "
        "cost more, so it must reach the target in fewer"
    )
    return table


def plot(frame: pd.DataFrame, out: Path, title: str, note: str) -> list[Path]:
    """Minutes to target against the global batch, a line per accelerator count (a line style per optimizer),
    log-log, titled as a projection in the suite's style; its inputs (`note`) go to the caption file."""
    import matplotlib.pyplot as plt

    from bench.analysis import style

    counts = sorted(frame.accelerators.unique())
    colors = plt.get_cmap("viridis")([i / max(1, len(counts) - 1) * 0.9 for i in range(len(counts))])
    styles = ["-", "--", ":", "-."]
    with plt.rc_context(style.STYLE):
        fig, ax = plt.subplots(figsize=style.size(True, 4.5))
        finite = frame[frame.minutes.map(math.isfinite)]
        for j, (opt, g) in enumerate(finite.groupby("optimizer", sort=False)):
            for n, c in zip(counts, colors):
                line = g[g.accelerators == n].sort_values("global_batch")
                if len(line):
                    ax.plot(
                        line.global_batch,
                        line.minutes,
                        styles[j % len(styles)],
                        marker="o",
                        color=c,
                        label=f"{paper.display(opt)}, {n:,} accelerators",
                    )
        batches = sorted(finite.global_batch.unique())
        style.log2_batch_axis(ax, batches, labelled=[b for b in batches if b & (b - 1) == 0])  # labels that fit
        style.plain_log_y(ax)
        ax.set(ylabel="minutes to target", title=f"Projected, not measured: {title}")
        ax.legend(fontsize=7)
        style.caption(fig, f"Minutes to target against the global batch, a line per accelerator count. {note}")
        return style.save(fig, Path(out), "time-to-train")
