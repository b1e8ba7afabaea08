"""The large-batch engine: batch plans, equivalence across ranks and micro-batches, launch."""

import json
import math
import os
import socket

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from bench import recipe as recipe_mod
from bench.engine import distributed
from bench.engine.plan import make_plan
from bench.engine.train import Trainer
from bench.errors import UserError
from tests.conftest import RECIPES, run_cli, write_recipe

PLANS = [
    # (global_batch, micro_batch, world, gsnr_groups, cap) -> (accum_steps, micro_batch, gsnr_groups)
    ((256, "auto", 1, None, 256), (1, 256, 1)),
    ((1024, "auto", 1, None, 256), (4, 256, 4)),
    ((1024, "auto", 8, None, 256), (1, 128, 8)),
    ((98304, "auto", 1, None, 256), (384, 256, 384)),
    ((98304, "auto", 512, None, 256), (1, 192, 512)),
    ((98304, 64, 8, 32, 256), (192, 64, 32)),
    ((2048, "auto", 1, 32, 256), (32, 64, 32)),   # 32 groups of 64 images: micro-batch capped by the group
    ((2048, "auto", 8, 64, 100), (8, 32, 64)),    # 8 groups of 32 images per rank
    ((2048, "auto", 8, 64, 16), (16, 16, 64)),    # ... each group 2 micro-batches under cap 16
    ((1000, "auto", 1, None, 256), (4, 250, 4)),  # largest divisor of 1000 not above 256
]


@pytest.mark.parametrize("args,want", PLANS)
def test_plan(args, want):
    plan = make_plan(*args)
    assert (plan.accum_steps, plan.micro_batch, plan.gsnr_groups) == want
    assert plan.world_size * plan.accum_steps * plan.micro_batch == plan.global_batch
    assert plan.gsnr_groups * plan.micro_per_group == plan.world_size * plan.accum_steps


@pytest.mark.parametrize("args,words", [
    ((100, "auto", 3, None, 256), ["global_batch 100", "3 ranks"]),
    ((96, 20, 1, None, 256), ["micro_batch 20", "per-rank batch 96"]),
    ((96, "auto", 4, 6, 256), ["gsnr_groups 6", "4 ranks"]),
    ((96, "auto", 2, 64, 256), ["gsnr_groups 64", "equal groups"]),
    ((96, 16, 1, 12, 256), ["micro_batch 16", "group of 8 images"]),
])
def test_impossible_plans_name_the_numbers(args, words):
    with pytest.raises(UserError) as e:
        make_plan(*args)
    assert all(w in str(e.value) for w in words)


EQUIV = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 24, workers: 0, eval_batch: 64}
global_batch: 32
micro_batch: 4
optimizer: {name: OPT, lr: LR, momentum: 0.9}
schedule: {warmup_epochs: 0.2}
epochs: 1
weight_decay: 1.0e-4
target_top1: 50
"""
STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_steps(rank: int, world: int, port: int, recipe_path: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist = distributed.init()
    try:
        trainer = Trainer(recipe_mod.load(recipe_path), dist)
        batches = trainer.data.train(0, STEPS)
        for step in range(STEPS):
            trainer.step(batches, lr=trainer.recipe.optimizer.lr * (step + 1) / STEPS)
        if rank == 0:
            torch.save({k: v.detach().clone() for k, v in trainer.model.named_parameters()}, out)
    finally:
        distributed.shutdown()


def _params_after(tmp_path, recipe_path, world: int):
    out = str(tmp_path / f"params-{world}.pt")
    if world == 1:
        _train_steps(0, 1, 0, str(recipe_path), out)
        os.environ.pop("WORLD_SIZE")  # leave no torchrun variables behind for other tests
        for k in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(k)
    else:
        mp.spawn(_train_steps, args=(world, _free_port(), str(recipe_path), out), nprocs=world)
    return torch.load(out)


@pytest.mark.parametrize("opt,lr", [("sgd", 0.2), ("lars", 2.0), ("vrgd_lars", 2.0), ("adascale_sgd", 0.005),
                                    ("simigrad_lars", 2.0)])
def test_same_parameters_for_1x8_2x4_4x2(tmp_path, tiny_dataset, opt, lr):
    """1 process x 8 micro-batches, 2 x 4 and 4 x 2 take the same steps (gloo, CPU). The lrs are small:
    at larger ones this net (BatchNorm over 4 images) amplifies the float-order differences of the sums
    to 1e-4 in 3 steps, whatever the optimizer (SGD at 0.3; AdaScale at 0.02, whose gain of about 6
    makes its first steps large)."""
    text = EQUIV.replace("DATA", str(tiny_dataset)).replace("OPT", opt).replace("LR", str(lr))
    path = write_recipe(tmp_path / "equiv.yaml", text)
    initial = Trainer(recipe_mod.load(path), distributed.Dist(0, 1, 0, torch.device("cpu"))).model
    reference = _params_after(tmp_path, path, 1)
    moved = max((reference[k] - p).abs().max().item() for k, p in initial.named_parameters())
    assert moved > 1e-3  # the steps did something
    for world in (2, 4):
        got = _params_after(tmp_path, path, world)
        for name, want in reference.items():
            torch.testing.assert_close(got[name], want, rtol=1e-4, atol=1e-5, msg=f"{name} at world {world}")


def test_submit_dry_run_prints_an_sbatch_script_calling_torchrun(tmp_path):
    done = run_cli("submit", "recipes/demo.yaml", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu",
                   "--set", "global_batch=32768", "--set", "micro_batch=auto", "--dry-run", cwd=RECIPES.parent)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu",
                 "--nnodes=4", "--nproc-per-node=8", "--rdzv-backend=c10d", "-m bench run recipes/demo.yaml",
                 "--set global_batch=32768"):
        assert line in script
    assert script.startswith("#!/bin/bash") and "srun " in script


def test_submit_bad_recipe_is_exit_2(tmp_path):
    done = run_cli("submit", str(tmp_path / "missing.yaml"), "--nodes", "1", "--gpus-per-node", "1", "--dry-run")
    assert done.returncode == 2 and "no such recipe file" in done.stderr


def test_global_batch_98304_runs_on_one_cpu_process_through_accumulation(tmp_path):
    """One step of a 96k batch: 24 micro-batches of 4096 small images, a small model."""
    text = """
model: {name: test_resnet}
data: {dataset: synthetic, loader: synthetic, image_size: 8, workers: 0,
       synth: {classes: 10, train_per_class: 20, val_per_class: 2, size: 16}}
global_batch: 98304
micro_batch: 4096
optimizer: {name: vrgd_lars, lr: 1.0}
epochs: 491.52
target_top1: 50
"""
    done = run_cli("run", str(write_recipe(tmp_path / "huge.yaml", text)), "--out", str(tmp_path), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "1 ranks x 24 micro-batches x 4096 images = global batch 98304; 24 gradient groups" in done.stdout
    [run] = (tmp_path / "huge").iterdir()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["total_steps"] == 1
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert len(events) == 1 and math.isfinite(events[0]["loss"]) and 0 <= events[0]["gsnr_clip_frac"] <= 1
    assert pd.read_csv(run / "metrics.csv")["images_seen"].tolist() == [98304]
