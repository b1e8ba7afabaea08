"""What more than one test module uses, in one plain module (fixtures live in conftest.py): hand-made run
directories (recipe.yaml, meta.json, metrics.csv, events.jsonl) for the analysis tests, the float64 optimizer
references, the multi-rank parameter runs of the equivalence tests (top-level functions, for
conftest.start_ranks), recipe and sweep texts, the LaTeX document pdflatex sets tables in. No test module imports
another."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from bench import catalog, optim
from bench import recipe as recipe_mod
from bench.engine import distributed
from bench.engine.train import Trainer
from bench.rundir import METRIC_COLUMNS, OPTIONAL_METRIC_COLUMNS
from tests.conftest import free_port, start_ranks, write_recipe

TOY = {
    "dataset": "synthetic",
    "synth": {"classes": 10, "train_per_class": 100, "val_per_class": 30, "size": 72, "seed": 0},
    "image_size": 64,
    "workers": 1,
    "loader": "auto",
}
IMAGENET = {"dataset": "folder", "path": "/data/imagenet", "image_size": 224, "workers": 8, "loader": "auto"}
IMAGENET_SIZES = {"train_size": 1_281_167, "val_size": 50_000}


def make_run(
    root: Path,
    name: str,
    optimizer: str,
    batch: int,
    seed: int,
    val: list[float],
    train_eval: list[float] | None = None,
    *,
    status: str = "completed",
    target: float = 60.0,
    train_size: int = 1000,
    val_size: int = 300,
    data: dict | None = None,
    model: str = "resnet10t",
    eval_every: float = 1.0,
    epochs: float | None = None,
    lr: float = 0.1,
    data_workers: int | None = None,
    model_kwargs: dict | None = None,
    events: list[dict] | None = None,
    legacy: bool = False,
    holdout: list[float] | None = None,
    run_name: str | None = None,
    meta_extra: dict | None = None,
    **recipe_extra,
) -> Path:
    """A run of `len(val)` evaluations every `eval_every` epochs (of a recipe of `epochs`, default as many as
    evaluated); loss = 1 - top1/100 so gaps are checkable; 10 training seconds per epoch. legacy: metrics.csv
    without the columns added later (schedule_epoch, batch, holdout_*), as runs made before them. holdout: the
    holdout_top1 of each evaluation (default: none, empty cells). run_name: the run folder (default seed<seed>)."""
    run = Path(root) / name / (run_name or f"seed{seed}")
    run.mkdir(parents=True)
    data = dict(data or TOY, **({"workers": data_workers} if data_workers is not None else {}))
    recipe = {
        "name": name,
        "model": {"name": model, "kwargs": model_kwargs or {}},
        "data": data,
        "global_batch": batch,
        "micro_batch": "auto",
        "gsnr_groups": None,
        "optimizer": {"name": optimizer, "lr": lr},
        "epochs": epochs or len(val) * eval_every,
        "seed": seed,
        "eval": {"every_epochs": eval_every},
        "engine": {"compile": False},
        "target_top1": target,
        **recipe_extra,
    }
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    steps_per_epoch = train_size / batch
    rows = []
    train_eval = train_eval or [v + 5 for v in val]
    for i, (v, t) in enumerate(zip(val, train_eval)):
        epoch = (i + 1) * eval_every
        rows.append(
            {
                "epoch": epoch,
                "schedule_epoch": epoch,
                "batch": batch,
                "step": round(epoch * steps_per_epoch),
                "images_seen": round(epoch * train_size),
                "train_time_s": 10.0 * epoch,
                "lr": lr,
                "train_loss": 1.0,
                "train_eval_top1": t,
                "train_eval_loss": 1 - t / 100,
                "val_top1": v,
                "val_top5": min(100.0, v + 20),
                "val_loss": 1 - v / 100,
                "holdout_top1": holdout[i] if holdout else "",
                "holdout_loss": 1 - holdout[i] / 100 if holdout else "",
                "val_images": val_size,
            }
        )
    columns = [c for c in METRIC_COLUMNS if not (legacy and c in OPTIONAL_METRIC_COLUMNS)]
    lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    plan = {"global_batch": batch, "world_size": 1, "accum_steps": 1, "micro_batch": min(batch, 256), "gsnr_groups": 1}
    meta = {
        "status": status,
        "reason": None,
        "plan": plan,
        "train_time_s": 10.0 * len(val) * eval_every,
        "total_steps": round(len(val) * eval_every * steps_per_epoch),
        "train_size": train_size,
        "val_size": val_size,
        **(meta_extra or {}),
    }
    (run / "meta.json").write_text(json.dumps(meta))
    if events:
        (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


# A conv weight, a linear weight, one with w = 0, one whose gradient is always 0, and a bias
# (ndim 1: excluded from weight decay and trust ratios by create()).
SHAPES = [(4, 3, 3, 3), (6, 5), (3, 4), (5, 2), (5,)]
ZERO_W, ZERO_G = 2, 3
LRS = [0.5, 0.5, 0.2, 0.9, 0.3]  # an lr change between steps, as a schedule makes


def weights(seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    ws = [torch.randn(shape, generator=gen, dtype=dtype) for shape in SHAPES]
    ws[ZERO_W].zero_()
    return ws


def gradients(steps, k=1, seed=1, dtype=torch.float64):
    """steps x k groups x tensors; the ZERO_G tensor's gradient is 0 in every group."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        groups = [[torch.randn(shape, generator=gen, dtype=dtype) for shape in SHAPES] for _ in range(k)]
        for grads in groups:
            grads[ZERO_G].zero_()
        out.append(groups)
    return out


def backward(params, grads):
    """What a backward pass does to p.grad: set it, or add to it."""
    for p, g in zip(params, grads):
        p.grad = g.clone() if p.grad is None else p.grad + g


def run_steps(opt, params, steps) -> list[list[torch.Tensor]]:
    """observe() each group's gradients, step(), zero_grad(); the weights after each step."""
    history = []
    for groups in steps:
        for grads in groups:
            backward(params, grads)
            opt.observe()
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append([p.detach().clone() for p in params])
    return history


def run(name, ws, steps, lrs, names=None, step_path="eager", **hparams):
    """Our optimizer from create(): per step, observe each group (none when k = 1), step; params after each step.
    names: the parameters' names (create() then gets named parameters, as from model.named_parameters());
    step_path: how its update runs (use_step: LARS's "compiled", engine.optimizer_step)."""
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(list(zip(names, params)) if names else params, name, lr=lrs[0], **hparams)
    opt.use_step(step_path)
    history = []
    for lr, groups in zip(lrs, steps):
        for group in opt.param_groups:
            group["lr"] = lr
        for grads in groups:
            backward(params, grads)
            if len(groups) > 1:
                opt.observe()
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append([p.detach().clone() for p in params])
    return history, opt


class Ref:
    """Per-tensor float64 loops from the equations in the optimizers' docstrings. Tensors with
    ndim <= 1 are excluded: no weight decay, trust ratio 1."""

    def __init__(self, ws, weight_decay):
        self.w = [w.clone() for w in ws]
        self.adapt = [w.ndim > 1 for w in ws]
        self.wd = [weight_decay if a else 0.0 for a in self.adapt]
        self.trusts = []  # of adapted tensors, per step

    def run(self, steps, lrs):
        history = []
        for lr, groups in zip(lrs, steps):
            mean = [torch.stack(g).mean(0) for g in zip(*groups)]
            self.step(mean, lr)
            history.append([w.clone() for w in self.w])
        return history


class RefSGD(Ref):
    def __init__(self, ws, weight_decay, momentum=0.9, nesterov=False):
        super().__init__(ws, weight_decay)
        self.m, self.nesterov, self.v = momentum, nesterov, [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        """lr: a number, or one per tensor (AdaScale's per-group gains)."""
        for i, g in enumerate(grads):
            lr_i = lr[i] if isinstance(lr, list) else lr
            d = g + self.wd[i] * self.w[i]
            self.v[i] = self.m * self.v[i] + d
            self.w[i] = self.w[i] - lr_i * (d + self.m * self.v[i] if self.nesterov else self.v[i])


class RefLARS(Ref):
    def __init__(self, ws, weight_decay, momentum=0.9, eta=1e-3, eps=0.0, nesterov=False, clip=False):
        super().__init__(ws, weight_decay)
        self.m, self.eta, self.eps, self.nesterov, self.clip = momentum, eta, eps, nesterov, clip
        self.v = [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr, trust_grads=None):
        """lr: a number, or one per tensor (AdaScale's per-group gains)."""
        trusts, lrs = [], lr if isinstance(lr, list) else [lr] * len(grads)
        for i, g in enumerate(grads):
            w, wd, trust, lr = self.w[i], self.wd[i], 1.0, lrs[i]
            if self.adapt[i]:
                w_norm, g_norm = w.norm(), (g if trust_grads is None else trust_grads[i]).norm()
                if w_norm > 0 and g_norm > 0:
                    trust = float(self.eta * w_norm / (g_norm + wd * w_norm + self.eps))
                if self.clip:
                    trust = min(trust / lr, 1.0)
                trusts.append(trust)
            d = g + wd * w
            self.v[i] = self.m * self.v[i] + lr * trust * d
            self.w[i] = w - (self.m * self.v[i] + lr * trust * d if self.nesterov else self.v[i])
        self.trusts.append(trusts)


class RefAdam(Ref):
    """AdamW, or LAMB with lamb=True."""

    def __init__(self, ws, weight_decay, betas=(0.9, 0.999), eps=1e-8, lamb=False):
        super().__init__(ws, weight_decay)
        self.betas, self.eps, self.lamb, self.t = betas, eps, lamb, 0
        self.m, self.v = [torch.zeros_like(w) for w in ws], [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        (b1, b2), self.t = self.betas, self.t + 1
        trusts = []
        for i, g in enumerate(grads):
            w, wd = self.w[i], self.wd[i]
            self.m[i] = b1 * self.m[i] + (1 - b1) * g
            self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
            adam = (self.m[i] / (1 - b1**self.t)) / ((self.v[i] / (1 - b2**self.t)).sqrt() + self.eps)
            if not self.lamb:
                self.w[i] = w * (1 - lr * wd) - lr * adam
                continue
            u, trust = adam + wd * w, 1.0
            if self.adapt[i]:
                if w.norm() > 0 and u.norm() > 0:
                    trust = float(w.norm() / u.norm())
                trusts.append(trust)
            self.w[i] = w - lr * trust * u
        self.trusts.append(trusts)


class RefNAdamW(Ref):
    """NAdamW (AlgoPerf's baseline, timm's NAdamW): AdamW with Nesterov's look-ahead on the first moment,
    m_hat = (b1 m_t + (1 - b1) g) / (1 - b1^t), and the weight decay decoupled, w <- w (1 - lr wd) first."""

    def __init__(self, ws, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(ws, weight_decay)
        self.betas, self.eps, self.t = betas, eps, 0
        self.m, self.v = [torch.zeros_like(w) for w in ws], [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        (b1, b2), self.t = self.betas, self.t + 1
        for i, g in enumerate(grads):
            w = self.w[i] * (1 - lr * self.wd[i])
            self.m[i] = b1 * self.m[i] + (1 - b1) * g
            self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
            ahead = (b1 * self.m[i] + (1 - b1) * g) / (1 - b1**self.t)
            self.w[i] = w - lr * ahead / ((self.v[i] / (1 - b2**self.t)).sqrt() + self.eps)


class RefLion(Ref):
    """Lion (Chen et al. 2023, Algorithm 2): w <- w (1 - lr wd) - lr sign(b1 m + (1 - b1) g), then
    m <- b2 m + (1 - b2) g."""

    def __init__(self, ws, weight_decay, betas=(0.9, 0.99)):
        super().__init__(ws, weight_decay)
        self.betas, self.m = betas, [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        b1, b2 = self.betas
        for i, g in enumerate(grads):
            update = torch.sign(b1 * self.m[i] + (1 - b1) * g)
            self.w[i] = self.w[i] * (1 - lr * self.wd[i]) - lr * update
            self.m[i] = b2 * self.m[i] + (1 - b2) * g


TIGHT = dict(rtol=1e-10, atol=1e-12)  # fp64 parameters against the float64 references, so fp64 statistics


def assert_history(ours, ref, **tol):
    assert len(ours) == len(ref) > 0 and all(len(a) == len(b) for a, b in zip(ours, ref))  # zip would drop a step
    for step, (a, b) in enumerate(zip(ours, ref)):
        for i, (x, y) in enumerate(zip(a, b)):
            torch.testing.assert_close(x, y, **tol, msg=lambda m: f"step {step + 1}, tensor {i}: {m}")


HPARAMS = {  # a sensible setting per optimizer for the digits problem
    "sgd": dict(lr=0.1), "lars": dict(lr=10.0), "larc": dict(lr=10.0), "lamb": dict(lr=0.02),
    "adamw": dict(lr=0.01), "vrgd_sgd": dict(lr=0.1), "vrgd_lars": dict(lr=10.0), "vrgd_adam": dict(lr=0.01),
    "vrgd_lamb": dict(lr=0.02), "adascale_sgd": dict(lr=0.03), "adascale_lars": dict(lr=3.0),
    "simigrad_sgd": dict(lr=0.1), "simigrad_lars": dict(lr=10.0), "simigrad_lamb": dict(lr=0.02),
    "merit": dict(lr=0.02), "vrgd_merit": dict(lr=0.02), "nesterov": dict(lr=0.1), "nadamw": dict(lr=0.01),
    "muon": dict(lr=0.02), "kron": dict(lr=0.01), "lion": dict(lr=0.005), "schedulefree_adamw": dict(lr=0.01),
    "schedulefree_sgd": dict(lr=1.0), "soap": dict(lr=0.01), "vrgd_nadamw": dict(lr=0.01), "vrgd_muon": dict(lr=0.02),
}  # fmt: skip


class RefVRGD:
    """The GSNR core from the equations (paper's Algorithm 1), feeding a reference base optimizer."""

    def __init__(self, base, gamma=0.1, eps=1e-12, beta3=0.0, bias_correction=True, trust_grad="vr", segments=None):
        """segments: the normalisation segment of each tensor of SHAPES (gsnr_norm); None: one per tensor."""
        self.base, self.gamma, self.eps, self.beta3, self.bias_correction = base, gamma, eps, beta3, bias_correction
        self.segments = segments or list(range(len(SHAPES)))
        self.trust_grad, self.t, self.p = trust_grad, 0, [torch.zeros(s, dtype=torch.float64) for s in SHAPES]
        self.clip_frac, self.r_mean, self.dead_frac = [], [], []

    def run(self, steps, lrs):
        history = []
        for lr, groups in zip(lrs, steps):
            self.step(groups, lr)
            history.append([w.clone() for w in self.base.w])
        return history

    def step(self, groups, lr):
        self.t += 1
        means, rs, vrs, clipped, dead = [], [], [], 0, 0
        for grads in zip(*groups):
            g = torch.stack(grads)
            means.append(g.mean(0))
            rs.append(means[-1] ** 2 / (g.var(0, unbiased=False) + self.eps))
        r_sum = sum(r.sum().item() for r in rs)
        for segment in set(self.segments):
            members = [i for i, s in enumerate(self.segments) if s == segment]
            r_mean = sum(rs[i].sum() for i in members) / sum(rs[i].numel() for i in members)
            for i in members:
                rs[i] = rs[i] / r_mean if r_mean > 0 else rs[i]
        for i, (mean, r) in enumerate(zip(means, rs)):
            clipped += ((r < self.gamma) & (r > 0)).sum().item()  # live coordinates only
            dead += (r == 0).sum().item()  # a gradient of 0 in every group
            r = r.clamp(self.gamma, 1.0)
            if self.beta3:
                self.p[i] = self.beta3 * self.p[i] + (1 - self.beta3) * r
                r = self.p[i] / (1 - self.beta3**self.t) if self.bias_correction else self.p[i]
            vrs.append(r * mean)
        numel = sum(m.numel() for m in means)
        self.clip_frac.append(clipped / (numel - dead))
        self.dead_frac.append(dead / numel)
        self.r_mean.append(r_sum / numel)
        if self.trust_grad == "mean":
            self.base.step(vrs, lr, trust_grads=means)
        else:
            self.base.step(vrs, lr)


# fp32 against the float64 reference. The variance from the sums, sum g^2 / k - mean^2, cancels where the
# groups nearly agree (relative error ~6e-8 x mean(g^2) / var): with k = 2 (one difference per coordinate)
# fp32 factors drift ~1e-4 from float64 in 5 steps in the eager code as in the kernel, so k >= 3 here
# (the fp64 tests of test_optim_vrgd.py take k = 2 exactly, and the kernel's arithmetic does not depend on k).
FP32 = dict(rtol=1e-4, atol=1e-5)


def fp32(steps):
    return [[[g.float() for g in grads] for grads in groups] for groups in steps]


def triton_in_the_interpreter(device="cpu"):
    """The Triton kernels (fused_triton.py) against the eager code on `device`, for the step (trust_grad vr
    and mean, LARC) and observe(). On CPU tensors: in a process with TRITON_INTERPRET=1; on "cuda" compiled."""
    from bench.optim import fused_triton

    ws, steps = [w.float().to(device) for w in weights()], fp32(gradients(len(LRS), k=3))
    steps = [[[None if g is None else g.to(device) for g in grads] for grads in groups] for groups in steps]
    steps[1][0][1] = None  # a parameter without a gradient in the step's first group
    gen = torch.Generator().manual_seed(5)
    ws.append(torch.randn(3 * fused_triton.BLOCK + 5, generator=gen).to(device))  # chunks past the first, a partial one
    for groups in steps:
        for grads in groups:
            grads.append(torch.randn(ws[-1].shape, generator=gen).to(device) + 0.2)
    for name, hparams in [
        ("vrgd_lars", dict(weight_decay=0.1, eta=0.05)),
        ("vrgd_lars", dict(weight_decay=0.1, eta=0.05, trust_grad="mean", momentum=0.8)),
        ("vrgd_sgd", dict(weight_decay=0.1)),  # vrgd_factors, g_vr written by the kernel
        ("vrgd_adam", dict(weight_decay=0.1)),
    ]:  # vrgd_factors, then GSNR momentum
        results = []
        for kernels in (fused_triton, None):
            params = [nn.Parameter(w.clone()) for w in ws]
            opt = optim.create(params, name, lr=LRS[0], fused=False, **hparams)
            opt._kernels, history = kernels, []
            for lr, groups in zip(LRS, steps):
                for group in opt.param_groups:
                    group["lr"] = lr
                for grads in groups:
                    for p, g in zip(params, grads):
                        p.grad = None if g is None else g.clone()
                    opt.observe()
                opt.step()
                history.append([p.detach().clone() for p in params])
            results.append((history, opt.diagnostics()))
        (history, diag), (eager, eager_diag) = results
        assert_history(history, eager, **FP32)
        assert diag == pytest.approx(eager_diag, rel=1e-4, abs=1e-7)
    print("triton kernels agree")


EQUIV = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 16, workers: 0, eval_batch: 64}
global_batch: 32
micro_batch: 4
optimizer: {name: OPT, lr: LR, momentum: 0.9}
schedule: {warmup_epochs: 0.2}
epochs: 1
weight_decay: 1.0e-4
engine: {precision: PRECISION}
target_top1: 50
"""
STEPS = 3


@contextlib.contextmanager
def process_group(rank: int, world: int, port: int):
    """This process as rank `rank` of a `world`-rank group on this machine, one thread; shut down on leaving."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    try:
        yield distributed.init()
    finally:
        distributed.shutdown()


def train_steps(rank: int, world: int, port: int, recipe_paths: list[str], outs: list[str], steps: int = STEPS) -> None:
    """Each recipe's parameters after `steps` steps, on `world` ranks of one process group; and each rank's buffers
    (BatchNorm's statistics), in `<out>.buffers<rank>`."""
    with process_group(rank, world, port) as dist:
        for recipe_path, out in zip(recipe_paths, outs):
            trainer = Trainer(recipe_mod.load(recipe_path), dist)
            batches = trainer.data.train(0, steps)
            for step in range(steps):
                trainer.step(batches, lr=trainer.recipe.optimizer.lr * (step + 1) / steps)
            if rank == 0:
                torch.save({k: v.detach().clone() for k, v in trainer.model.named_parameters()}, out)
            torch.save({k: v.detach().clone() for k, v in trainer.model.named_buffers()}, f"{out}.buffers{rank}")


def params_after(tmp_path, recipe_paths: list, world: int, steps: int = STEPS) -> list[dict]:
    """The parameters each recipe reaches on `world` ranks (1: in this process; else spawned, one group)."""
    outs = [str(tmp_path / f"{Path(p).stem}-{world}-{steps}.pt") for p in recipe_paths]
    paths = [str(p) for p in recipe_paths]
    if world == 1:
        train_steps(0, 1, 0, paths, outs, steps)
        for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(k)  # leave no torchrun variables behind for other tests
    else:
        start_ranks(train_steps, (world, free_port(), paths, outs, steps), world)
    return [torch.load(out) for out in outs]


def equiv_recipe(tmp_path, data, opt: str, lr: float, precision: str, model: str = "resnet10t") -> Path:
    text = EQUIV.replace("DATA", str(data)).replace("OPT", opt).replace("LR", str(lr)).replace("PRECISION", precision)
    return write_recipe(tmp_path / f"{opt}-{precision}.yaml", text.replace("resnet10t", model))


BASE = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 16, workers: 0, eval_batch: 64, holdout: 32}
global_batch: 32
optimizer: {name: sgd, lr: 0.1}
epochs: 2
eval: {every_epochs: 1, stop_at_chance: 0}
checkpoint: {every_steps: 2}
target_top1: 30
"""  # 160 - 32 = 128 training images: 4 steps an epoch at batch 32


SWEEP = """
base: base.yaml
batches: [32]
arms:
  sgd:
    set: {optimizer.name: sgd, optimizer.nesterov: true}
    space:
      optimizer.lr: {low: 0.01, high: 0.5, scale: log}
  lars:
    set: {optimizer.name: lars}
    space:
      optimizer.lr: {low: 0.5, high: 5.0, scale: log}
      schedule.warmup_epochs: {low: 0.0, high: 1.0}
trials: 2
budget: {epochs: 2}
reruns: {seeds: [1, 2]}
"""


def sweep_run(
    root, arm, batch, role, seed, val, trial=0, study=0, lr=0.1, status="completed", holdout=None, target=60.0
):
    name = f"s-{arm}-b{batch}-" + (f"t{trial:02d}-s{study}" if role == "trial" else f"best-seed{seed}")
    tags = {"sweep": "s", "arm": arm, "trial": trial, "study": study, "role": role}
    return make_run(
        root,
        name,
        "lars" if "lars" in arm else "sgd",
        batch,
        seed,
        val,
        status=status,
        lr=lr,
        tags=tags,
        holdout=holdout or val,
        target=target,
        train_eval=[v + 3 for v in val],
    )


def idx(path, array: np.ndarray, magic: bytes | None = None, gz: bool = False, cut: int = 0) -> None:
    """An idx file of unsigned bytes as LeCun's format has it: magic, big-endian int32 dimensions, data."""
    head = magic or bytes([0, 0, 8, array.ndim])
    data = head + b"".join(int(n).to_bytes(4, "big") for n in array.shape) + array.astype(np.uint8).tobytes()
    data = data[: len(data) - cut]
    path.write_bytes(gzip.compress(data) if gz else data)


def family(root, train_per_class=6, val_per_class=2, classes=10, gz=False, prefix=""):
    """A small MNIST-like dataset: image i of class c is filled with 10 c + i % 10, so each file tells its label."""
    root.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for split, per in (("train", train_per_class), ("t10k", val_per_class)):
        labels = np.repeat(np.arange(classes), per)[::-1].copy()  # not sorted: the converter must not assume it
        images = np.stack([np.full((28, 28), 10 * c + i % 10) for i, c in enumerate(labels)])
        idx(root / f"{prefix}{split}-images-idx3-ubyte{suffix}", images, gz=gz)
        idx(root / f"{prefix}{split}-labels-idx1-ubyte{suffix}", labels, gz=gz)
    return root


BACKENDS = [name for name, r in catalog.LOADERS.items() if r.reads_files]  # every loader of image files


RELIABILITY_RECIPE = """
model: {name: resnet8_cifar}  # bench's own: a run's process imports no timm (these tests are about the run)
data: {dataset: folder, path: DATA, image_size: 24, crop_scale_min: 0.35, workers: 0, eval_batch: 64}
global_batch: 32
micro_batch: 16
optimizer: {name: sgd, lr: 0.2, momentum: 0.9}
schedule: {warmup_epochs: 1}
epochs: 6
eval: {every_epochs: 2}
checkpoint: {every_steps: 4}
target_top1: 40
engine: {threads: 1}  # bitwise repeats hold for one thread count: the SLURM script's OMP_NUM_THREADS must not change it
"""  # 30 steps, evaluations after steps 10, 20, 30, checkpoints every 4 steps and at 30


TENSORBOARD_RECIPE = """
model: {name: resnet8_cifar}  # bench's own: a killed run's process imports no timm
data: {dataset: folder, path: DATA, image_size: 24, crop_scale_min: 0.35, workers: 0, eval_batch: 64}
global_batch: 32
micro_batch: 16
optimizer: {name: lars, lr: 0.2}
schedule: {warmup_epochs: 1}
epochs: 3
eval: {every_epochs: 1}
checkpoint: {every_steps: 4}
target_top1: 40
"""  # 160 training images: 15 steps, evaluations after steps 5, 10, 15, checkpoints at 4, 8, 12, 15


def only_run(results_dir):
    [run] = list((results_dir / "tb").iterdir())
    return run


# The tests' LaTeX documents: bare article, letter paper (550 pt of text height: LATEX_TEXT_HEIGHT_PT), two columns or
# one at NeurIPS's 5.5 in (LATEX_PAGE_PT)
LAYOUTS = {
    "two-column": "\\documentclass[twocolumn]{article}",
    "one-column 5.5 in": "\\documentclass{article}\\setlength{\\textwidth}{397pt}",
}
needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None, reason="no pdflatex here (apt-get install texlive-latex-base)"
)


def compile_latex(folder, name: str, layout: str, body: str):
    """`body` in a bare article (`layout`, one of LAYOUTS) compiled by plain pdflatex in `folder`: no error, no
    missing glyph, nothing wider than the page (Overfull \\hbox) or taller (Float too large: pdflatex drops the
    rows past the page's foot). Returns the PDF's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.tex").write_text(f"{layout}\n\\begin{{document}}\n{body}\\end{{document}}\n")
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and (folder / f"{name}.pdf").exists(), done.stdout[-2000:]
    log = (folder / f"{name}.log").read_text(errors="replace")
    for problem in ("Missing character", "Overfull \\hbox", "Float too large"):
        assert problem not in log, [line for line in log.splitlines() if problem in line][:5]
    return folder / f"{name}.pdf"
