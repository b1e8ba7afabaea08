"""The training loop: one recipe, one run directory.

Per optimizer step, each GSNR group (one or more consecutive micro-batches on a
rank) is one gradient group: forward, loss scaled by 1/micro-batches-per-group,
backward, then `opt.observe()` after the group's last micro-batch; `opt.step()`
combines the groups into the mean gradient of the whole global batch
(bench.optim's group interface), so accumulation over micro-batches and ranks
gives the same step as one big batch.

Under DDP, plain optimizers let DDP all-reduce the accumulated gradient on the
last micro-batch of the step (`no_sync()` on the others). Optimizers that
reduce group statistics themselves (`opt.reduces_gradients`, the VRGD family)
run every micro-batch under `no_sync()`: one all-reduce per step, theirs.

BatchNorm statistics are per micro-batch, as in multi-GPU training without
SyncBN; `engine.sync_bn` shares them across ranks.

The schedule position, the end of the run and each step's batch come from
pace.py (fixed batch; AdaScale's scale-invariant steps; SimiGrad's adaptive
batch). Each step's scalars go to events.jsonl: lr, loss, batch, the
optimizer's diagnostics and, where a step has two or more groups, the gradient
noise scale B_simple = noise_trace / grad_sqnorm with noise_trace = (images per
group) x grad_var (McCandlish et al. 2018; bench.optim.base.noise). With
eval.ema_epochs, evaluation reads an exponential moving average of the weights.

Training time is measured the AlgoPerf way: only training steps count
(evaluation and logging excluded), devices synchronised, max over ranks.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from bench import catalog, defaults, optim
from bench.data import Data, build, images, resolve_loader, scan
from bench.engine import (
    checkpoint,
    distributed,
    ghost_bn,
    group_pass,
    memory,
    tensorboard,
    threads,
    wandb_curves,
)
from bench.engine.faults import crash_point
from bench.engine.pace import Pace
from bench.engine.plan import recipe_plan
from bench.errors import BenchWarning, OutOfSpace, UserError
from bench.identity import digest, seed_key
from bench.models import autocast, compiled, create_model, param_dtype
from bench.recipe import Recipe
from bench.rundir import (
    FINISHED,
    META,
    RECIPE,
    RESUMABLE,
    RunDir,
    git_commit,
    held_by_a_process,
    host_info,
    input_records,
    now,
    read_meta,
    versions,
)

STRICT_CHECK_MAX = 50_000  # images a data.strict run decodes before its first step (seconds on a few cores)


def to_device(batch, device: torch.device, recipe: Recipe):
    images, labels = batch
    fmt = torch.channels_last if recipe.engine.channels_last else torch.contiguous_format
    images = images.to(device, dtype=param_dtype(recipe.engine.precision), non_blocking=True, memory_format=fmt)
    return images, labels.to(device, non_blocking=True)


@torch.no_grad()
def ema_model(model: torch.nn.Module, recipe: Recipe, train_size: int):
    """recipe eval.ema_epochs: torch's AveragedModel of `model`'s parameters and buffers (BatchNorm statistics
    averaged too, as timm's ModelEmaV3 does), decay per step exp(-batch / (ema_epochs x train_size)) (ema_decay):
    the same images averaged at every batch (Busbridge et al. 2023's EMA scaling rule); else None."""
    if recipe.eval.ema_epochs is None:
        return None
    from torch.optim.swa_utils import AveragedModel

    return AveragedModel(model, multi_avg_fn=ema_decay(recipe.global_batch, recipe, train_size), use_buffers=True)


def ema_decay(batch: int, recipe: Recipe, train_size: int):
    """The EMA's update for a step of `batch` images: a moving batch (adaptive_batch) moves the decay with it."""
    from torch.optim.swa_utils import get_ema_multi_avg_fn

    return get_ema_multi_avg_fn(math.exp(-batch / (recipe.eval.ema_epochs * train_size)))


@torch.inference_mode()
def evaluate(model: torch.nn.Module, batches, recipe: Recipe, device: torch.device) -> dict[str, float]:
    """Top-1 / Top-5 (percent), mean cross-entropy and the number of images, over every (readable) image of
    `batches` on all ranks. No autograd: a batch's activations are freed before the next is read, so memory is
    one batch's whatever the number of batches (with gradients on, the running totals would keep every batch's
    graph to the end of the pass)."""
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # top1 hits, top5 hits, loss sum, count
    for batch in batches:
        images, labels = to_device(batch, device, recipe)
        with autocast(recipe.engine.precision, device):
            logits = model(images)
        logits = logits.float()
        hits = logits.topk(min(5, logits.shape[1]), dim=1).indices == labels[:, None]
        totals += torch.stack(
            [
                hits[:, 0].sum(),
                hits.any(dim=1).sum(),
                F.cross_entropy(logits, labels, reduction="sum"),
                torch.tensor(len(labels), device=device),
            ]
        ).to(totals.dtype)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(totals)
    top1, top5, loss, count = totals.tolist()
    model.train()
    return {"top1": 100.0 * top1 / count, "top5": 100.0 * top5 / count, "loss": loss / count, "images": int(count)}


BN_BATCHES = 50  # training batches that recompute BatchNorm's statistics for Schedule-Free's evaluation weights


@contextlib.contextmanager
def evaluation_weights(model: torch.nn.Module, opt, batches: Callable, recipe: Recipe, device: torch.device):
    """The weights an evaluation reads: the training iterate, or, for an optimizer that evaluates other weights
    (`opt.swaps_weights`: Schedule-Free), those, with BatchNorm's running statistics recomputed for them as the
    schedulefree package documents: model.train(), optimizer.eval(), forward BN_BATCHES training batches without
    gradients (`batches()`: the train-eval images, fixed, so the training order is untouched), then evaluate. Under
    torch.distributed the ranks' statistics are averaged. Afterwards the parameters and buffers are those of
    before, bit for bit: an evaluation never changes the run, and a checkpoint holds the training iterate."""
    if not opt.swaps_weights:
        yield
        return
    params = [p for group in opt.param_groups for p in group["params"]]
    kept, buffers = [p.detach().clone() for p in params], [b.detach().clone() for b in model.buffers()]
    opt.eval()
    model.train()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        each = iter(batches())  # an evaluation iterable (EvalBatches): what evaluate() reads
        for batch in itertools.islice(each, BN_BATCHES):
            with autocast(recipe.engine.precision, device):
                model(to_device(batch, device, recipe)[0])
        if hasattr(each, "close"):  # a generator left before its end: close it now
            each.close()
        distributed.average_buffers(model)
    try:
        yield
    finally:
        opt.train()
        with torch.no_grad():
            for tensor, saved in zip([*params, *model.buffers()], [*kept, *buffers]):
                tensor.copy_(saved)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """Everything a run needs, built before the run directory exists, so bad input leaves nothing behind."""

    def __init__(self, recipe: Recipe, dist: distributed.Dist):
        self.recipe, self.dist, self.device = recipe, dist, dist.device
        torch.manual_seed(recipe.seed)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        # The model is built once, before the plan: micro_batch auto's cap is a probe of this very model, and its
        # classes come from the dataset's layout (scanned once, handed to the data). Nothing between draws from the
        # global random state, so the weights are those of a model built after the data.
        layout = scan(recipe.data, resolve_loader(recipe.data.loader))
        model = create_model(recipe.model.name, recipe.model.kwargs, len(layout.classes)).to(
            self.device, dtype=param_dtype(recipe.engine.precision)
        )
        cap, self.memory_note = self._memory_cap(model) if recipe.micro_batch == "auto" else (None, None)
        self.plan = recipe_plan(recipe, dist.world, cap)
        self.data: Data = build(
            recipe.data,
            self.plan.batch,
            self.plan.micro_batch,
            dist.rank,
            dist.world,
            recipe.seed,
            device=self.device,
            channels_last=recipe.engine.channels_last,
            layout=layout,
        )
        # what a resumed run checks it still trains on (saved in checkpoints, recorded in the run's meta)
        self.train_set = {"train_size": self.data.train_size, "train_digest": self.data.layout.train_digest()}
        if recipe.data.strict:
            self._check_readable()
        if dist.is_main and (said := images.upscale_warning(recipe.data)):
            warnings.warn(said, BenchWarning)
        if recipe.engine.sync_bn and dist.world > 1:
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        self.chosen = defaults.resolve(recipe.engine, self.device)  # the auto keys' candidates on this device
        if recipe.model.bn_batch:
            ghost_bn.convert(model, recipe.model.bn_batch, recipe.model.name, self.chosen.ghost_bn)
        fmt = torch.channels_last if recipe.engine.channels_last else torch.contiguous_format
        self.model = model.to(self.device, dtype=param_dtype(recipe.engine.precision), memory_format=fmt)
        self.dead = self._dead_params()
        self.opt = optim.create(  # lr: the peak, as a torch optimizer takes one; each step() hands it the step's
            self.model,
            recipe.optimizer.name,
            lr=recipe.optimizer.lr,
            weight_decay=recipe.weight_decay,
            **recipe.optimizer.hparams,
        )
        step = self.chosen.optimizer_step
        if step in self.opt.step_paths:
            self.opt.use_step(step)
        elif recipe.engine.optimizer_step != "auto":  # a measured default is for the optimizers that have it
            raise UserError(
                f"key 'engine.optimizer_step': {step}, but {recipe.optimizer.name} has no {step} step (LARS, LARC "
                "and their VRGD, AdaScale and SimiGrad forms have): use eager or auto"
            )
        self.ema = ema_model(self.model, recipe, self.data.train_size)
        self.ema_batch = recipe.global_batch  # the batch the EMA's decay is for
        self.ddp = None
        if dist.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # buffers: averaged after each step (step()), not rank 0's broadcast before each forward
            self.ddp = DistributedDataParallel(self.model, device_ids=ids, broadcast_buffers=False)
        net = self.ddp or self.model
        self.net = compiled(net, self.chosen.compile)
        self.pace = Pace(recipe, self.plan, self.data.train_size, self.opt.pace == "scale_invariant")
        batched = self.opt.reduces_gradients and self.plan.groups_per_micro > 1
        batched = batched and recipe.engine.group_pass == "batched"
        self.batched = group_pass.BatchedGroups(self.model, recipe.label_smoothing) if batched else None
        self.slowdown = threads.Slowdown(torch.get_num_threads())

    def _check_readable(self) -> None:
        """data.strict: every image decoded before the first step (`bench data check`'s checker) where that takes
        seconds (STRICT_CHECK_MAX images), so an unreadable one is the strict sentence before a run directory exists;
        beyond that, files are checked as they are read."""
        data = self.data
        files = [*data.layout.train.files, *data.layout.holdout.files, *data.layout.val.files]
        if not data.backend.READS_FILES or len(files) > STRICT_CHECK_MAX:
            return
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # each rank checks every file: no rank waits
        workers = 1 if len(files) < 5000 else max(1, threads.usable_cores() // local_ranks)
        data.unreadable.report(images.unreadable_files(files, workers))

    def _memory_cap(self, model: torch.nn.Module) -> tuple[int, str | None]:
        """The largest micro-batch whose activations fit the device (engine/memory.py), probed on the run's model
        (before any SyncBatchNorm or memory format), which it leaves as it found it, the random state too; and the
        line that says so where the memory, not engine.micro_batch_cap, decides (else None). One sentence when not
        even one image fits."""
        recipe, device = self.recipe, self.device
        group_images = None  # the batched groups pass keeps a gradient per group: its share per image
        if recipe.model.bn_batch and catalog.OPTIMIZERS[recipe.optimizer.name].reduces_gradients:
            if recipe.engine.group_pass == "batched":
                batch = recipe.adaptive_batch.min_batch if recipe.adaptive_batch else recipe.global_batch
                group_images = batch // recipe.gsnr_groups if recipe.gsnr_groups else recipe.model.bn_batch
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # dropout, drop-path
            with autocast(recipe.engine.precision, device):
                cap, per_image, free = memory.micro_batch_cap(
                    model,
                    recipe.data.image_size,
                    device,
                    param_dtype(recipe.engine.precision),
                    int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
                    group_images,
                )
        if cap < 1:
            raise UserError(
                f"micro_batch auto: one {recipe.data.image_size} px image of {recipe.model.name} keeps "
                f"{per_image / 2**20:,.0f} MB of activations and {free / 2**30:.1f} GB are free on "
                f"{device}: a smaller image_size or model, or more memory"
            )
        if cap >= recipe.engine.micro_batch_cap:
            return cap, None
        return cap, (
            f"micro_batch auto: at most {cap} images fit ({per_image / 2**20:,.1f} MB of "
            f"activations an image, {memory.FRACTION:.0%} of the {free / 2**30:.1f} GB free on "
            f"{device})"
        )

    def _dead_params(self):
        """The share of parameters no image reaches (engine/dead.py); above dead.WARN_SHARE one warning line on
        rank 0, or, with engine.dead_params: refuse, one sentence before the run directory exists. Every rank
        probes (a copy of the same model): all refuse together, none waits for a rank that stopped."""
        from bench.engine import dead

        found = dead.probe(self.model, self.recipe.data.image_size)
        if (said := dead.verdict(found, self.recipe)) and self.dist.is_main:
            warnings.warn(said, BenchWarning)
        return found

    def _sync_context(self, micro: int, accum: int):
        """DDP all-reduces only on the step's last micro-batch, and never for self-reducing optimizers."""
        last = micro == accum - 1
        if self.ddp is None or (last and not self.opt.reduces_gradients):
            return contextlib.nullcontext()
        return self.ddp.no_sync()

    def step(self, micro_batches, lr: float, chunks: int = 1) -> torch.Tensor:
        """One optimizer step over this rank's micro-batches of `chunks` chunks of the plan's global
        batch; returns the mean loss on this rank. Groups are numbered over all ranks, rank-major. `lr`: the step's,
        as bench.schedule.lr_at decided it (Pace.lr), handed to the optimizer as is (AdaScale's multiplies it by
        the gain it measures in this step: GroupOptimizer._lr)."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        accum, per_group, per_micro = (
            chunks * self.plan.accum_steps,
            self.plan.micro_per_group,
            self.plan.groups_per_micro,
        )
        first_group = self.dist.rank * (accum * per_micro // per_group)
        total = torch.zeros(
            (), dtype=torch.promote_types(torch.float32, param_dtype(self.recipe.engine.precision)), device=self.device
        )
        for micro in range(accum):
            images, labels = to_device(next(micro_batches), self.device, self.recipe)
            with self._sync_context(micro, accum):
                if per_micro > 1 and self.opt.reduces_gradients:  # each group's gradient on its own
                    loss = self._groups(images, labels, first_group + micro * per_micro, per_micro)
                else:
                    loss = self._forward_backward(images, labels, per_micro / per_group)
            if per_micro > 1 and not self.opt.reduces_gradients:  # the sum of the groups' gradients: count them
                self.opt.observe(groups=per_micro)
            elif (micro + 1) % per_group == 0 and per_micro == 1:
                self.opt.observe(index=first_group + micro // per_group)
            total += loss.detach().to(total.dtype)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.ddp is not None and not self.recipe.engine.sync_bn:  # SyncBatchNorm's statistics agree already
            distributed.average_buffers(self.model)  # one model on every rank: the one evaluated and checkpointed
        return total / accum

    def _forward_backward(self, images, labels, scale: float) -> torch.Tensor:
        """The mean loss of `images`; backward of it times `scale` (groups in it / micro-batches a group)."""
        with autocast(self.recipe.engine.precision, self.device):
            loss = F.cross_entropy(self.net(images), labels, label_smoothing=self.recipe.label_smoothing)
        (loss * scale).backward()
        return loss

    def _groups(self, images, labels, first: int, groups: int) -> torch.Tensor:
        """The micro-batch's `groups` groups, each observed with its own gradient (group indices from `first`):
        in one batched pass (group_pass.py), else group by group; returns the micro-batch's mean loss."""
        if self.batched is not None:
            try:
                with autocast(self.recipe.engine.precision, self.device):
                    grads, losses = self.batched(images, labels, groups)
            except RuntimeError as e:  # torch.func refuses the model: a setting, not a bug
                raise UserError(
                    f"key 'engine.group_pass': batched, but torch.func cannot take {self.recipe.model.name} on "
                    f"{self.device.type} ({str(e).splitlines()[0]}): use engine.group_pass sequential (or auto)"
                ) from e
            for d in range(groups):
                for p, g in grads.items():
                    p.grad = g[d]  # a view: observe() reads it and lets it go
                self.opt.observe(index=first + d)
            return losses.mean()
        losses = []
        for d, (x, y) in enumerate(zip(images.chunk(groups), labels.chunk(groups))):
            losses.append(self._forward_backward(x, y, 1.0).detach())
            self.opt.observe(index=first + d)
        return torch.stack(losses).mean()

    def checkpoint_due(self, progress: "Progress", before: float, evaluated: bool) -> bool:
        spec = self.recipe.checkpoint
        if self.pace.done(progress) or (evaluated and spec.every_steps is None and spec.every_epochs is None):
            return True
        if spec.every_steps and progress.step % spec.every_steps == 0:
            return True
        if checkpoint.point_reached(spec.at_images, progress.images - self.pace.batch(progress), progress.images):
            return True
        return bool(spec.every_epochs) and self.pace.crossed(before, progress.position, spec.every_epochs)

    def events(self, step: int, lr: float, batch: int, loss: float) -> dict:
        """One step's scalars for events.jsonl (diagnostics read now, after the step; rank 0 only)."""
        diag = self.opt.diagnostics()
        event = {"step": step, "lr": lr, "batch": batch, "loss": loss, **diag}
        if "grad_var" in diag:
            group_images = self.plan.micro_per_group * self.plan.micro_batch
            trace, sqnorm = group_images * diag["grad_var"], diag["grad_sqnorm"]
            event.update(noise_trace=trace, noise_scale=trace / sqnorm if sqnorm > 0 else None)
        return {
            key: (value if value is None or math.isfinite(value) else None) if isinstance(value, float) else value
            for key, value in event.items()
        }

    def run(
        self, run: RunDir | None, progress: "Progress", show_bar: bool, preempted: "PreemptionFlag"
    ) -> tuple[str, str | None]:
        """Train from `progress.step` to the end; returns (status, reason)."""
        self.pace.start(progress)
        micro_batches = self.data.train(progress.images // self.pace.chunk, self.pace.last_chunk())
        bar = tqdm(
            initial=progress.position,
            total=self.pace.schedule_steps,
            unit="step",
            disable=None if show_bar and run else True,  # None: no bar where stderr is no terminal (tqdm's rule)
            dynamic_ncols=True,
        )
        self.model.train()
        with bar, _closing(micro_batches):
            while not self.pace.done(progress):
                step, before = progress.step, progress.position
                lr, batch, loss, stop = self.train_step(progress, micro_batches, bar, run, preempted)
                if not math.isfinite(loss):
                    return "diverged", f"non-finite training loss at step {step}"
                evaluated = self.pace.done(progress) or self.pace.crossed(
                    before, progress.position, self.eval_every(progress)
                )
                if evaluated and (ended := self.evaluate(progress, run, bar, lr, batch)):
                    if run and not self.logs_step(step, progress):  # the run ends here: its last step is logged
                        run.log_event(self.events(step, lr, batch, loss))
                    return ended
                if stop or self.checkpoint_due(progress, before, evaluated):
                    self.save_checkpoint(run, progress)
                if stop:
                    return "preempted", (
                        f"stopped by a signal with {progress.step} steps done (checkpoint at step "
                        f"{progress.step}); run the same command to resume"
                    )
        return "completed", None

    def train_step(
        self, progress: "Progress", micro_batches, bar, run: RunDir | None, preempted: "PreemptionFlag"
    ) -> tuple[float, int, float, bool]:
        """One optimizer step and its bookkeeping (timing, the loss and stop flag over ranks, the pace, the
        bar, events.jsonl: every logging.events_every_steps-th step and the last; run() logs a step an evaluation
        ends the run at); returns (lr, batch, loss, stop). A non-finite loss returns before the pace moves."""
        pace, device = self.pace, self.device
        step, before, batch, lr = progress.step, progress.position, pace.batch(progress), pace.lr(progress)
        _sync(device)
        start = time.perf_counter()
        loss = self.step(micro_batches, lr, progress.chunks)
        if self.ema is not None:
            if batch != self.ema_batch:  # the decay of this step's batch
                self.ema.multi_avg_fn, self.ema_batch = ema_decay(batch, self.recipe, self.data.train_size), batch
            self.ema.update_parameters(self.model)
        _sync(device)
        progress.train_time += time.perf_counter() - start

        # One small all-reduce: the global batch's loss, and whether any rank was told to stop.
        flags = torch.stack([loss.float(), torch.tensor(float(preempted.is_set), device=device)])
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(flags)
        total, stop = flags.tolist()  # one read to the host
        loss = total / self.dist.world
        if not math.isfinite(loss):
            return lr, batch, loss, stop > 0
        # every rank steers the same way: gain and similarity come from all-reduced statistics
        pace.advance(progress, self.opt.gain, self.opt.similarity)
        crash_point("step", progress.step)
        progress.loss_sum += loss
        progress.loss_count += 1
        bar.update(progress.position - before)
        bar.set_postfix(
            img_s=f"{progress.images / progress.train_time:.0f}",
            loss=f"{loss:.3f}",
            lr=f"{lr:.3g}",
            **({} if pace.fixed else {"batch": batch}),
            refresh=False,
        )  # tqdm redraws at its own rate
        if run:
            if self.logs_step(step, progress):
                run.log_event(self.events(step, lr, batch, loss))
            if warning := self.slowdown.update(progress.images, progress.train_time):
                bar.write(f"bench: warning: {warning}", file=sys.stderr)
        return lr, batch, loss, stop > 0

    def logs_step(self, step: int, progress: "Progress") -> bool:
        """Whether events.jsonl gets step `step` (just taken): every logging.events_every_steps-th, and the last."""
        return step % self.recipe.logging.events_every_steps == 0 or self.pace.done(progress)

    def eval_every(self, progress: "Progress") -> float:
        """Epochs between evaluations: eval.near_target_every_epochs while the last evaluation was just below the
        target (a grid fine enough to resolve steps to target), else eval.every_epochs."""
        spec = self.recipe.eval
        return (
            spec.near_target_every_epochs
            if progress.near_target and spec.near_target_every_epochs
            else spec.every_epochs
        )

    def evaluate(self, progress: "Progress", run: RunDir | None, bar, lr: float, batch: int) -> tuple[str, str] | None:
        """Validation, train-eval and holdout Top-1 after a step; the run's metrics, its meta and the evaluation line.
        With eval.curve_images, an evaluation before the last measures val Top-1 on that subset only, unless the
        subset reaches the target: then every image is evaluated (the first row at or above the target is always
        a full one). Returns (status, reason) when the run ends here: diverged (at chance for eval.stop_at_chance
        evaluations after warm-up) or completed at the target (eval.stop_at_target); else None."""
        recipe, pace, data = self.recipe, self.pace, self.data
        eval_start = time.perf_counter()
        subset = recipe.eval.curve_images if not pace.done(progress) else None
        model = self.ema.module if self.ema is not None else self.model  # eval.ema_epochs: the averaged weights
        with evaluation_weights(self.model, self.opt, data.train_eval, recipe, self.device):  # schedule-free's
            val = evaluate(model, data.val(subset), recipe, self.device)
            if subset and val["top1"] >= recipe.target_top1:
                subset, val = None, evaluate(model, data.val(), recipe, self.device)
            crash_point("eval", progress.step)
            train_eval = evaluate(model, data.train_eval(), recipe, self.device) if not subset else {}
            held = evaluate(model, data.holdout(), recipe, self.device) if data.holdout_size and not subset else {}
        progress.eval_time += time.perf_counter() - eval_start
        slowest = distributed.max_over_ranks(progress.train_time)
        if run:
            images_seen = progress.images
            run.add_metrics(
                {
                    "epoch": images_seen / data.train_size,
                    "schedule_epoch": pace.epoch(progress),
                    "step": progress.step,
                    "images_seen": images_seen,
                    "batch": batch,
                    "train_time_s": slowest,
                    "lr": lr,
                    "train_loss": progress.loss_sum / progress.loss_count,
                    "train_eval_top1": train_eval.get("top1"),
                    "train_eval_loss": train_eval.get("loss"),
                    "val_top1": val["top1"],
                    "val_top5": val["top5"],
                    "val_loss": val["loss"],
                    "holdout_top1": held.get("top1"),
                    "holdout_loss": held.get("loss"),
                    "val_images": val["images"],
                }
            )
            run.write_meta(
                train_time_s=slowest,
                train_images_per_s=images_seen / slowest,
                eval_time_s=progress.eval_time,
                evaluated_images={
                    name: result["images"]
                    for name, result in (("val", val), ("train_eval", train_eval), ("holdout", held))
                    if result
                },
            )
            bar.write(self.eval_line(progress, lr, val), file=sys.stderr)
        progress.loss_sum, progress.loss_count = 0.0, 0
        chance = 100.0 / data.num_classes
        at_chance = pace.epoch(progress) > recipe.schedule.warmup_epochs and val["top1"] <= 1.5 * chance
        progress.chance_evals = progress.chance_evals + 1 if at_chance else 0
        if recipe.eval.stop_at_chance and progress.chance_evals >= recipe.eval.stop_at_chance:
            return "diverged", (
                f"val_top1 at chance ({val['top1']:.2f}% <= 1.5 x {chance:.2f}%) "
                f"for {progress.chance_evals} evaluations after warm-up"
            )
        progress.near_target = recipe.target_top1 - recipe.eval.near_target_margin <= val["top1"] < recipe.target_top1
        if recipe.eval.stop_at_target and val["top1"] >= recipe.target_top1 and not pace.done(progress):
            if run:
                run.write_meta(stopped_at_target=True)
            return "completed", (
                f"stopped at the target: val_top1 {val['top1']:.2f}% >= {recipe.target_top1:g}% "
                f"at step {progress.step} (eval.stop_at_target)"
            )
        return None

    def eval_line(self, progress: "Progress", lr: float, val: dict) -> str:
        """One line per evaluation, as timm's train.py logs: where the run is, how it does, how long is left."""
        pace, done = self.pace, progress.position / self.pace.schedule_steps
        left = (progress.train_time + progress.eval_time) * (1 - done) / done
        return (
            f"epoch {pace.epoch(progress):.2f}  step {progress.step}  images {progress.images:,}  "
            f"train loss {progress.loss_sum / max(progress.loss_count, 1):.4f}  val top1 {val['top1']:.2f}  "
            f"top5 {val['top5']:.2f}  lr {lr:.4g}  {progress.images / progress.train_time:,.0f} img/s  "
            f"{time.strftime('%H:%M:%S', time.gmtime(left)) if left < 86400 else f'{left / 3600:.0f} h'} left"
        )

    def save_checkpoint(self, run: RunDir | None, progress: "Progress") -> None:
        if run:  # rank 0 writes; parameters and optimizer state are identical on every rank
            checkpoint.save(run.path, self, progress)
            for curves in run.curves:
                curves.flush()  # the curves hold every point the checkpoint keeps
        if torch.distributed.is_initialized():
            torch.distributed.barrier()


@contextlib.contextmanager
def _closing(iterator):
    """Close the loader's batch iterator (the Loader protocol: closable), so an early stop (divergence,
    preemption) ends its threads and workers before the interpreter does."""
    try:
        yield iterator
    finally:
        iterator.close()


@dataclass
class Progress:
    """The loop's own state, saved in checkpoints (its fields are the checkpoint's "progress"): the next step, the
    schedule position (pace.py), the images seen (the data stream's position), the next step's batch in chunks, the
    accumulators. Each field has one writer: Pace (start, advance) the first six, Trainer the rest."""

    # Pace's: where the run is in its schedule and its data stream, and SimiGrad's controller
    step: int = 0
    position: float = 0.0
    images: int = 0
    chunks: int = 0
    similarity_sum: float = 0.0
    similarity_count: int = 0
    # Trainer's: timing (train_step, evaluate), the loss between evaluations, the evaluations' verdicts
    train_time: float = 0.0
    eval_time: float = 0.0
    loss_sum: float = 0.0
    loss_count: int = 0
    chance_evals: int = 0
    near_target: bool = False  # the last evaluation was within eval.near_target_margin below the target


class PreemptionFlag:
    """SIGTERM / SIGINT ask the run to stop after its current step (checkpoint, "preempted").

    The signals are blocked in the main thread, and so in every thread and worker started
    during the run (DALI's, the loaders'), and a handler only sets a flag: a signal then
    interrupts no image read or collective half-way. The flag is read after each step;
    `signal` is the first one seen (SIGINT, a person's Ctrl-C, ends the command with 130). A signal the process
    was started ignoring stays ignored, as Python's own SIGINT handling does: a shell script's `cmd &` (and
    nohup) ignore SIGINT, and a run that obeyed it where the sweep around it cannot would stop mid-sweep."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self):
        self._seen = self._read = False  # _read: the run's loop saw the flag set (and so stops)
        self.signal: signal.Signals | None = None
        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            self._signals = tuple(s for s in self.SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)
            self._handlers = {sig: signal.signal(sig, self._handle) for sig in self._signals}
            self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, self._signals)
        return self

    def _handle(self, signum, frame):
        self._seen = True
        self.signal = self.signal or signal.Signals(signum)

    @property
    def is_set(self) -> bool:
        if self._main and not self._seen:  # a signal sent while every thread that could take it blocks it
            if self._signals and (info := signal.sigtimedwait(self._signals, 0)) is not None:
                self._handle(info.si_signo, None)
        self._read = self._seen
        return self._seen

    def __exit__(self, *exc):
        if self._main:
            late = self.signal if self._seen and not self._read else None
            while self._signals and (info := signal.sigtimedwait(self._signals, 0)) is not None:
                late = late or (None if self._read else signal.Signals(info.si_signo))
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            for sig, handler in self._handlers.items():
                signal.signal(sig, handler)
            # A signal after the loop's last look (say, during the final evaluation) found the run finishing: it
            # goes now to the handler from before the run, so a sweep or suite stops rather than starting the
            # next run. One the run answered (checkpoint, "preempted") is dropped.
            if late and exc[0] is None:
                signal.raise_signal(late)


def _curves(recipe: Recipe, run: RunDir, state) -> list:
    """The live curve writers the recipe asks for; a resumed run's TensorBoard folder is rewritten from its logs
    (already cut back to the checkpoint), W&B continues its run."""
    out = []
    if recipe.logging.tensorboard:
        out.append(tensorboard.Curves(run.path / tensorboard.FOLDER, recipe.to_yaml(), replay=run.path))
    if recipe.logging.wandb:
        saved = recipe.model_dump(mode="json")
        tags = [recipe.optimizer.name, f"b{recipe.global_batch}", f"seed{recipe.seed}"]
        out.append(
            wandb_curves.WandbCurves(
                run.path,
                recipe.logging.wandb,
                saved,
                tags,
                group=f"{recipe.optimizer.name}-b{recipe.global_batch}-{digest(seed_key(saved, run.meta))}",
                job_type=str(recipe.tags.get("role", "run")),
                resumed_at=state.step or None,
            )
        )
    return out


def train(
    recipe: Recipe,
    results: Path,
    progress: bool = True,
    restart: bool = False,
    run_dir: Path | None = None,
    inputs: tuple[Path, ...] = (),
    branch_from: tuple[Path, bool] | None = None,
) -> RunDir | None:
    """Run `recipe` in this process (one rank of a torchrun job, or alone), resuming an
    unfinished run of it unless `restart`. Rank 0 writes and returns the run directory. `inputs`: the user's files
    the recipe was made from (its recipe file; a sweep file and its base), recorded by content in meta.json and
    left out of bench's checkout state (rundir.checkout_state). `branch_from`: (another recipe's checkpoint,
    whether the seed is its run's): a new run starts from that state (checkpoint.branch; `bench branch`), a
    resumed one from its own checkpoint as any run."""
    dist = distributed.init()
    threads.apply(recipe.engine.threads)
    try:
        with PreemptionFlag() as preempted:  # before any data thread or worker starts
            return _train(recipe, results, dist, progress, restart, run_dir, preempted, inputs, branch_from)
    finally:
        distributed.shutdown()


def _train(
    recipe: Recipe,
    results: Path,
    dist: distributed.Dist,
    progress: bool,
    restart: bool,
    run_dir: Path | None,
    preempted: PreemptionFlag,
    inputs: tuple[Path, ...],
    branch_from: tuple[Path, bool] | None = None,
) -> RunDir | None:
    """A run's phases: open it (or resume it), start its records, train, close its records."""
    trainer = Trainer(recipe, dist)
    run, state, resumed = _open(trainer, results, restart, run_dir, branch_from)
    try:
        if run:
            _start_records(run, trainer, state, resumed, inputs)
            if branch_from and not resumed:
                run.write_meta(
                    branched_from={
                        "checkpoint": str(branch_from[0]),
                        "images": state.images,
                        "train_time_s": state.train_time,  # the reference's: the branch's own cost is the rest
                        "eval_time_s": state.eval_time,
                    }
                )
        status, reason = _train_loop(trainer, run, state, progress, preempted)
        if run:
            if status in FINISHED:  # nothing left to resume: the disk gets back all but the final one
                checkpoint.prune(run.path, int(recipe.checkpoint.keep_final))
                run.pack_events()
            stopped_by = preempted.signal.name if status == "preempted" and preempted.signal else None
            run.write_meta(
                status=status,
                reason=reason,
                end_time=now(),
                stopped_by=stopped_by,
                unreadable_images=sorted(trainer.data.unreadable.files),
            )
            if status == "preempted":
                print(
                    f"preempted{f' by {stopped_by}' if stopped_by else ''}: checkpoint at step {state.step} in {run.path}"
                )
    finally:
        if run:
            run.release()  # the run is this process's no longer: a later resume may take it
    return run


def open_run(results: Path, recipe: Recipe, restart: bool, run_dir: Path | None) -> tuple[RunDir, Path | None]:
    """The run directory to write and the checkpoint to resume from (None: start at step 0).

    Without --restart, the newest unfinished run of this exact recipe is resumed
    when it has a checkpoint; --run-dir names the run to continue."""
    recipe_yaml = recipe.to_yaml()
    candidates = [Path(run_dir)] if run_dir else ([] if restart else RunDir.runs_of(results, recipe.name)[::-1])
    completed = None
    for path in candidates:
        meta_path, recipe_path = path / META, path / RECIPE
        if run_dir and not meta_path.is_file():
            raise UserError(f"{path}: not a run directory (no {META})")
        try:
            status = read_meta(path).get("status")
            same = recipe.same_as(recipe_path.read_text())
        except (OSError, ValueError):
            continue
        if run_dir and not same:
            raise UserError(f"{path}: this run was made by a different recipe; pass that recipe, or drop --run-dir")
        if run_dir and status not in RESUMABLE:
            raise UserError(f"{path}: the run is {status}; nothing to resume")
        saved = checkpoint.saved(path)
        if same and status in RESUMABLE and saved:
            return RunDir.reopen(path, checkpoint.step_of(saved[-1])), saved[-1]
        if same and status in RESUMABLE and (run_dir or not held_by_a_process(path)):  # stopped before a checkpoint
            print(f"starting {path} again from step 0 (its process stopped before the first checkpoint)")
            return RunDir.reopen(path, 0), None
        completed = completed or (path if same and status == "completed" else None)
    if completed:  # as timm's train.py, a command starts a run; but never a second one of a seed unsaid
        print(
            f"{recipe.name} with seed {recipe.seed} completed in {completed}; this starts another run of the same "
            "seed (the analysis keeps the one that ends last; --set seed=N for another seed)"
        )
    return RunDir.create(results, recipe.name, recipe_yaml), None


def _open(
    trainer: Trainer, results: Path, restart: bool, run_dir: Path | None, branch_from: tuple[Path, bool] | None = None
) -> tuple[RunDir | None, Progress, bool]:
    """Rank 0 picks the run directory and the checkpoint to resume (open_run); every rank loads that checkpoint, or,
    for a new run with `branch_from`, the state it branches from. Returns (the run directory on rank 0, else None;
    the progress to start from; whether it resumes)."""
    run, resume_from = open_run(results, trainer.recipe, restart, run_dir) if trainer.dist.is_main else (None, None)
    if torch.distributed.is_initialized():  # every rank resumes from the checkpoint rank 0 chose
        shared = [str(resume_from) if resume_from else None]
        torch.distributed.broadcast_object_list(shared, src=0)
        resume_from = Path(shared[0]) if shared[0] else None
    if resume_from is None and branch_from:
        return run, Progress(**checkpoint.branch(trainer, *branch_from)), False
    if resume_from is None:
        return run, Progress(), False
    return run, Progress(**checkpoint.restore(trainer, resume_from)), True


def _start_records(run: RunDir, trainer: Trainer, state: Progress, resumed: bool, inputs: tuple[Path, ...]) -> None:
    """The run's meta (a new run's facts, or a resumption), the opening lines, the live curves."""
    recipe, data, pace = trainer.recipe, trainer.data, trainer.pace
    if resumed:
        run.write_meta(
            status="running",
            reason=None,
            end_time=None,
            stopped_by=None,
            resumed=run.meta.get("resumed", []) + [{"time": now(), "step": state.step}],
        )
        print(f"resuming {run.path} at step {state.step}")
    else:
        run.meta.clear()  # a run directory started again from step 0 keeps nothing of its first start
        try:
            run.write_meta(
                status="running",
                recipe=recipe.name,
                start_time=now(),
                end_time=None,
                git_commit=git_commit(*inputs),
                inputs=input_records(*inputs),
                versions=versions(),
                device=str(trainer.dist.device),
                world_size=trainer.dist.world,
                **host_info(trainer.dist.device),
                plan=trainer.plan.as_dict(),
                data_root=str(data.root),
                train_size=data.train_size,
                train_digest=trainer.train_set["train_digest"],
                val_size=data.val_size,
                loader=data.loader,
                train_eval_size=len(data.train_eval_indices),
                holdout_size=data.holdout_size,
                total_steps=pace.total_steps,
                train_time_s=0.0,
                dead_params=trainer.dead.as_dict(),
                candidates=trainer.chosen.as_dict(),
            )
        except OutOfSpace:  # not even the meta fits: leave no empty run directory
            run.discard()
            raise
        print(f"run directory: {run.path}")
    if trainer.memory_note:  # only where the memory, not engine.micro_batch_cap, chose
        print(trainer.memory_note)
    threads_used = torch.get_num_threads()
    print(f"plan: {trainer.plan}, {threads_used} CPU thread{'s' * (threads_used != 1)}")
    steps = "step" + "s" * (pace.schedule_steps != 1)
    what = steps if pace.fixed else f"schedule {steps} of {pace.reference} images"
    seen = pace.schedule_steps * pace.reference
    rounded = f" ({seen:,} images, {seen / data.train_size:.3g} epochs: steps are whole)" * (
        pace.fixed and seen > 1.01 * pace.images_total  # what the run really trains on, where it differs
    )
    print(
        f"{pace.schedule_steps} {what} = {recipe.epochs:g} epoch{'s' * (recipe.epochs != 1)} of {data.train_size} "
        f"images{rounded}"
    )
    key, largest = "global_batch", recipe.global_batch
    if recipe.adaptive_batch:  # the batch may grow to its max_batch
        key, largest = "adaptive_batch.max_batch", recipe.adaptive_batch.max_batch
    if largest > data.train_size:
        warnings.warn(
            f"{key} {largest} is larger than the training set ({data.train_size} images): a step of it reads some "
            "images more than once",
            BenchWarning,
        )
    run.curves = _curves(recipe, run, state)


def _train_loop(
    trainer: Trainer, run: RunDir | None, state: Progress, progress: bool, preempted: PreemptionFlag
) -> tuple[str, str | None]:
    """Trainer.run, with a crash marked "failed" in the run's meta (then raised) and the curves closed either way."""
    status = None
    try:
        status, reason = trainer.run(run, state, progress, preempted)
        return status, reason
    except BaseException as e:
        if run:
            reason = str(e) if isinstance(e, OutOfSpace) else f"{type(e).__name__}: {e}"
            with contextlib.suppress(OutOfSpace):  # a full disk may refuse the meta too: the reason is on stderr
                run.write_meta(status="failed", reason=reason, end_time=now())
        raise
    finally:
        for curves in run.curves if run else []:
            curves.close(finished=status in FINISHED)
