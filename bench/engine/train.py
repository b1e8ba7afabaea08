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

Training time is measured the AlgoPerf way: only training steps count
(evaluation and logging excluded), devices synchronised, max over ranks.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from bench import optim
from bench.data import Data, build
from bench.engine import distributed
from bench.engine.plan import BatchPlan, make_plan
from bench.engine.rundir import RunDir, git_commit, host_info, now, versions
from bench.errors import UserError
from bench.recipe import Recipe
from bench.schedule import lr_at


def create_model(recipe: Recipe, num_classes: int) -> torch.nn.Module:
    kwargs = dict(recipe.model.kwargs)
    given = kwargs.setdefault("num_classes", num_classes)
    if given != num_classes:
        raise UserError(f"key 'model.kwargs.num_classes' is {given} but the dataset has {num_classes} classes")
    return timm.create_model(recipe.model.name, **kwargs)


def autocast(recipe: Recipe, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=recipe.engine.precision == "bf16")


def to_device(batch, device: torch.device, channels_last: bool):
    images, labels = batch
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return images.to(device, non_blocking=True, memory_format=fmt), labels.to(device, non_blocking=True)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches, recipe: Recipe, device: torch.device) -> dict[str, float]:
    """Top-1 / Top-5 (percent) and mean cross-entropy over every image of `batches`, all ranks."""
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # top1 hits, top5 hits, loss sum, count
    for batch in batches:
        images, labels = to_device(batch, device, recipe.engine.channels_last)
        with autocast(recipe, device):
            logits = model(images)
        logits = logits.float()
        hits = logits.topk(min(5, logits.shape[1]), dim=1).indices == labels[:, None]
        totals += torch.stack([
            hits[:, 0].sum(), hits.any(dim=1).sum(),
            F.cross_entropy(logits, labels, reduction="sum"), torch.tensor(len(labels), device=device),
        ]).to(totals.dtype)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(totals)
    top1, top5, loss, count = totals.tolist()
    model.train()
    return {"top1": 100.0 * top1 / count, "top5": 100.0 * top5 / count, "loss": loss / count}


def eval_due(step: int, plan: BatchPlan, train_size: int, every_epochs: float, total_steps: int) -> bool:
    """After step `step` (0-based): true when images seen crossed a multiple of the eval interval."""
    if step == total_steps - 1:
        return True
    interval = every_epochs * train_size
    return math.floor((step + 1) * plan.global_batch / interval) > math.floor(step * plan.global_batch / interval)


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
        self.plan = make_plan(recipe.global_batch, recipe.micro_batch, dist.world, recipe.gsnr_groups,
                              recipe.engine.micro_batch_cap)
        self.data: Data = build(recipe.data, self.plan.global_batch, self.plan.micro_batch,
                                dist.rank, dist.world, recipe.seed)
        model = create_model(recipe, self.data.num_classes)
        if recipe.engine.sync_bn and dist.world > 1:
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        fmt = torch.channels_last if recipe.engine.channels_last else torch.contiguous_format
        self.model = model.to(self.device, memory_format=fmt)
        self.opt = optim.create(self.model, recipe.optimizer.name, lr=recipe.optimizer.lr,
                                weight_decay=recipe.weight_decay, **recipe.optimizer.hparams)
        self.ddp = None
        if dist.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=ids)
        net = self.ddp or self.model
        self.net = torch.compile(net) if recipe.engine.compile else net
        self.steps_per_epoch = self.data.train_size / self.plan.global_batch
        self.total_steps = math.ceil(recipe.epochs * self.data.train_size / self.plan.global_batch)

    def _sync_context(self, micro: int):
        """DDP all-reduces only on the step's last micro-batch, and never for self-reducing optimizers."""
        last = micro == self.plan.accum_steps - 1
        if self.ddp is None or (last and not self.opt.reduces_gradients):
            return contextlib.nullcontext()
        return self.ddp.no_sync()

    def step(self, micro_batches, lr: float) -> torch.Tensor:
        """One optimizer step over this rank's micro-batches; returns the mean loss on this rank."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        total = torch.zeros((), device=self.device)
        for micro in range(self.plan.accum_steps):
            images, labels = to_device(next(micro_batches), self.device, self.recipe.engine.channels_last)
            with self._sync_context(micro):
                with autocast(self.recipe, self.device):
                    loss = F.cross_entropy(self.net(images), labels, label_smoothing=self.recipe.label_smoothing)
                (loss / self.plan.micro_per_group).backward()
            if (micro + 1) % self.plan.micro_per_group == 0:
                self.opt.observe()
            total += loss.detach().float()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return total / self.plan.accum_steps

    def run(self, run: RunDir | None, progress: bool) -> tuple[str, str | None]:
        """Train to the end; returns (status, reason)."""
        recipe, plan, data, device = self.recipe, self.plan, self.data, self.device
        status, reason = "completed", None
        train_time, loss_sum, loss_count = 0.0, 0.0, 0
        micro_batches = data.train(0, self.total_steps)
        bar = tqdm(total=self.total_steps, unit="step", disable=not (progress and run), dynamic_ncols=True)
        self.model.train()
        for step in range(self.total_steps):
            lr = lr_at(step, recipe.optimizer.lr, self.total_steps, self.steps_per_epoch, recipe.schedule)
            _sync(device)
            start = time.perf_counter()
            loss = self.step(micro_batches, lr)
            _sync(device)
            train_time += time.perf_counter() - start

            if torch.distributed.is_initialized():  # the global batch's loss, so all ranks agree on divergence
                torch.distributed.all_reduce(loss)
                loss /= self.dist.world
            loss = loss.item()
            if not math.isfinite(loss):
                status, reason = "diverged", f"non-finite training loss at step {step}"
                break
            loss_sum, loss_count = loss_sum + loss, loss_count + 1
            images_seen = (step + 1) * plan.global_batch
            bar.update()
            bar.set_postfix(img_s=f"{images_seen / train_time:.0f}", loss=f"{loss:.3f}", lr=f"{lr:.3g}")
            if run:
                run.log_event({"step": step, "lr": lr, "loss": loss, **self.opt.diagnostics()})
            if eval_due(step, plan, data.train_size, recipe.eval.every_epochs, self.total_steps):
                val = evaluate(self.model, data.val(), recipe, device)
                train_eval = evaluate(self.model, data.train_eval(), recipe, device)
                slowest = distributed.max_over_ranks(train_time)
                if run:
                    run.add_metrics({
                        "epoch": images_seen / data.train_size, "step": step + 1, "images_seen": images_seen,
                        "train_time_s": slowest, "lr": lr, "train_loss": loss_sum / loss_count,
                        "train_eval_top1": train_eval["top1"], "train_eval_loss": train_eval["loss"],
                        "val_top1": val["top1"], "val_top5": val["top5"], "val_loss": val["loss"],
                    })
                    run.write_meta(train_time_s=slowest, train_images_per_s=images_seen / slowest)
                loss_sum, loss_count = 0.0, 0
        bar.close()
        return status, reason


def train(recipe: Recipe, results: Path, progress: bool = True) -> RunDir | None:
    """Run `recipe` in this process (one rank of a torchrun job, or alone).
    Rank 0 creates, writes and returns the run directory; other ranks return None."""
    dist = distributed.init()
    try:
        trainer = Trainer(recipe, dist)
        run = RunDir.create(results, recipe.name, recipe.to_yaml()) if dist.is_main else None
        if run:
            run.write_meta(
                status="running", recipe=recipe.name, start_time=now(), end_time=None, git_commit=git_commit(),
                versions=versions(), device=str(dist.device), world_size=dist.world, **host_info(dist.device),
                plan=trainer.plan.as_dict(), data_root=str(trainer.data.root), train_size=trainer.data.train_size,
                val_size=len(trainer.data.layout.val), train_eval_size=len(trainer.data.train_eval_indices),
                total_steps=trainer.total_steps, train_time_s=0.0,
            )
            print(f"plan: {trainer.plan}")
            print(f"{trainer.total_steps} steps = {recipe.epochs:g} epochs of {trainer.data.train_size} images")
            print(f"run directory: {run.path}")
        try:
            status, reason = trainer.run(run, progress)
        except BaseException as e:
            if run:
                run.write_meta(status="failed", reason=f"{type(e).__name__}: {e}", end_time=now())
            raise
        if run:
            run.write_meta(status=status, reason=reason, end_time=now())
        return run
    finally:
        distributed.shutdown()
