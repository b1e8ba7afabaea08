"""The training loop: one recipe, one run directory.

Per optimizer step, each of this rank's micro-batches is one gradient group:
forward, mean loss over the micro-batch, backward, `opt.observe()`; then
`opt.step()` combines the groups into the mean gradient of the whole global
batch (bench.optim's group interface), so accumulation gives the same step as
one big batch.

Training time is measured the AlgoPerf way: only training steps count
(evaluation and logging excluded), with the device synchronised.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from tqdm import tqdm

from bench import optim
from bench.data import Data, build
from bench.engine.plan import BatchPlan, make_plan
from bench.engine.rundir import RunDir, git_commit, host_info, now, versions
from bench.errors import UserError
from bench.recipe import Recipe
from bench.schedule import lr_at


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def create_model(recipe: Recipe, num_classes: int) -> torch.nn.Module:
    kwargs = dict(recipe.model.kwargs)
    given = kwargs.setdefault("num_classes", num_classes)
    if given != num_classes:
        raise UserError(f"key 'model.kwargs.num_classes' is {given} but the dataset has {num_classes} classes")
    return timm.create_model(recipe.model.name, **kwargs)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches, device: torch.device) -> dict[str, float]:
    """Top-1 / Top-5 (percent) and mean cross-entropy over every image of `batches`."""
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # top1, top5, loss sum, count
    for images, labels in batches:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        logits = model(images).float()
        top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
        hits = top5 == labels[:, None]
        totals += torch.stack([
            hits[:, 0].sum(), hits.any(dim=1).sum(),
            F.cross_entropy(logits, labels, reduction="sum"), torch.tensor(len(labels), device=device),
        ]).to(totals.dtype)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
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


def train(recipe: Recipe, results: Path, rank: int = 0, world: int = 1, progress: bool = True) -> RunDir | None:
    """Run `recipe`. Rank 0 creates and writes the run directory (and returns it), but
    only once the data, model and optimizer are built, so bad input leaves nothing behind."""
    torch.manual_seed(recipe.seed)
    device = pick_device()
    plan = make_plan(recipe.global_batch, recipe.micro_batch, world)
    data: Data = build(recipe.data, plan.global_batch, plan.micro_batch, rank, world, recipe.seed)
    model = create_model(recipe, data.num_classes).to(device)
    opt = optim.create(model, recipe.optimizer.name, lr=recipe.optimizer.lr,
                       weight_decay=recipe.weight_decay, **recipe.optimizer.hparams)
    run = RunDir.create(results, recipe.name, recipe.to_yaml()) if rank == 0 else None
    try:
        _loop(recipe, run, data, plan, model, opt, device, rank, progress)
    except BaseException as e:
        if run:
            run.write_meta(status="failed", reason=f"{type(e).__name__}: {e}", end_time=now())
        raise
    return run


def _loop(recipe: Recipe, run: RunDir | None, data: Data, plan: BatchPlan, model, opt, device, rank, progress) -> None:

    steps_per_epoch = data.train_size / plan.global_batch
    total_steps = math.ceil(recipe.epochs * data.train_size / plan.global_batch)
    if run:
        run.write_meta(
            status="running", recipe=recipe.name, start_time=now(), end_time=None, git_commit=git_commit(),
            versions=versions(), device=str(device), world_size=plan.world_size, **host_info(device),
            plan={"global_batch": plan.global_batch, "world_size": plan.world_size,
                  "accum_steps": plan.accum_steps, "micro_batch": plan.micro_batch},
            data_root=str(data.root), train_size=data.train_size, val_size=len(data.layout.val),
            train_eval_size=len(data.train_eval_indices), total_steps=total_steps, train_time_s=0.0,
        )
        print(f"plan: {plan}; {total_steps} steps ({recipe.epochs:g} epochs of {data.train_size} images)")
        print(f"run directory: {run.path}")

    status, reason = "completed", None
    train_time, loss_sum, loss_count = 0.0, 0.0, 0
    micro_batches = data.train(0, total_steps)
    bar = tqdm(total=total_steps, unit="step", disable=not (progress and rank == 0), dynamic_ncols=True)
    model.train()
    for step in range(total_steps):
        lr = lr_at(step, recipe.optimizer.lr, total_steps, steps_per_epoch, recipe.schedule)
        for group in opt.param_groups:
            group["lr"] = lr
        _sync(device)
        start = time.perf_counter()
        step_loss = torch.zeros((), device=device)
        for _ in range(plan.accum_steps):
            images, labels = next(micro_batches)
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels, label_smoothing=recipe.label_smoothing)
            loss.backward()
            opt.observe()
            step_loss += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        train_time += time.perf_counter() - start

        step_loss = step_loss.item() / plan.accum_steps
        if not math.isfinite(step_loss):
            status, reason = "diverged", f"non-finite training loss at step {step}"
            break
        loss_sum, loss_count = loss_sum + step_loss, loss_count + 1
        images_seen = (step + 1) * plan.global_batch
        bar.update()
        bar.set_postfix(img_s=f"{images_seen / train_time:.0f}", loss=f"{step_loss:.3f}", lr=f"{lr:.3g}")
        if run:
            run.log_event({"step": step, "lr": lr, "loss": step_loss, **opt.diagnostics()})

        if eval_due(step, plan, data.train_size, recipe.eval.every_epochs, total_steps):
            val = evaluate(model, data.val(), device)
            train_eval = evaluate(model, data.train_eval(), device)
            if run:
                run.add_metrics({
                    "epoch": images_seen / data.train_size, "step": step + 1, "images_seen": images_seen,
                    "train_time_s": train_time, "lr": lr, "train_loss": loss_sum / loss_count,
                    "train_eval_top1": train_eval["top1"], "train_eval_loss": train_eval["loss"],
                    "val_top1": val["top1"], "val_top5": val["top5"], "val_loss": val["loss"],
                })
                run.write_meta(train_time_s=train_time)
            loss_sum, loss_count = 0.0, 0
    bar.close()
    if run:
        run.write_meta(status=status, reason=reason, end_time=now(), train_time_s=train_time)
