"""The GPU path. Each test needs a CUDA device and is skipped, with that reason, where torch sees none.

NOT YET RUN ON A GPU: no GPU was lent to the sessions that wrote these. On a machine with one:

    python -m pytest tests/test_gpu.py
    bench perf train --device cuda --model resnet50 --image-size 224 --batch 256 --precision bf16 --channels-last
    bench perf train --device cuda --model resnet50 --image-size 224 --batch 256 --precision bf16 --channels-last --compile
    bench perf optim --device cuda

The same code paths run on the CPU in the other test files (the Triton kernels in Triton's interpreter,
bf16 autocast and channels_last, `bench run --nproc`, evaluation counts, checkpoints and resume).
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from bench import optim
from bench import recipe as recipes
from tests.conftest import write_recipe
from tests.helpers import LRS, RefLARS, assert_history, backward, gradients, weights

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible to torch)")

TINY = """
name: tiny-gpu
model: {name: resnet10t}
data: {dataset: folder, path: %s, image_size: 32, workers: 2, loader: torchvision}
global_batch: 16
micro_batch: 8
optimizer: {name: lars, lr: 0.5}
epochs: 2
eval: {every_epochs: 1}
checkpoint: {every_steps: 5}
target_top1: 50
"""


def _bench(*args, cpu_only=False):
    env = dict(os.environ, PYTHONWARNINGS="ignore", **({"CUDA_VISIBLE_DEVICES": ""} if cpu_only else {}))
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, env=env)


def test_triton_kernels_compiled_on_the_gpu_match_the_eager_code():
    from tests.helpers import triton_in_the_interpreter

    triton_in_the_interpreter("cuda")


def test_lars_fused_sgd_kernel_on_the_gpu_matches_the_float64_reference():
    ws, steps = weights(), gradients(len(LRS))
    params = [nn.Parameter(w.float().cuda()) for w in ws]
    opt = optim.create(params, "lars", lr=LRS[0], weight_decay=0.1, eta=0.05)
    history = []
    for lr, (grads,) in zip(LRS, steps):
        for group in opt.param_groups:
            group["lr"] = lr
        backward(params, [g.float().cuda() for g in grads])
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append([p.detach().double().cpu() for p in params])
    assert_history(history, RefLARS(ws, 0.1, eta=0.05).run(steps, LRS), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compile", [False, True])
def test_resnet50_trains_in_bf16_channels_last_with_cudnn_benchmark(compile):
    from bench.engine.distributed import Dist
    from bench.engine.train import Trainer

    recipe = recipes.recipe_from_dict(
        "test",
        {
            "name": "r50",
            "model": {"name": "resnet50"},
            "data": {
                "dataset": "synthetic",
                "loader": "random",
                "image_size": 224,
                "synth": {"classes": 10, "train_per_class": 4, "val_per_class": 1, "size": 32},
            },
            "global_batch": 64,
            "micro_batch": 32,
            "optimizer": {"name": "lars", "lr": 1.0},
            "epochs": 10,
            "engine": {"precision": "bf16", "channels_last": True, "compile": compile},
            "target_top1": 50,
        },
    )
    trainer = Trainer(recipe, Dist(0, 1, 0, torch.device("cuda", 0)))
    assert torch.backends.cudnn.benchmark
    conv = trainer.model.conv1.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and conv.dtype == torch.float32
    batches = trainer.data.train(0, 3)
    losses = [float(trainer.step(batches, lr=0.1)) for _ in range(3)]
    assert all(map(torch.isfinite, torch.tensor(losses)))


def test_run_with_one_rank_on_the_gpu_counts_every_image_once(tiny_dataset, tmp_path):
    recipe = write_recipe(tmp_path / "tiny.yaml", TINY % tiny_dataset)
    done = _bench("run", str(recipe), "--nproc", "1", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(next((tmp_path / "out" / "tiny-gpu").glob("*/meta.json")).read_text())
    assert meta["status"] == "completed" and meta["device"].startswith("cuda")
    assert meta["evaluated_images"]["val"] == meta["val_size"]


def test_a_checkpoint_written_on_the_gpu_resumes_on_the_cpu_and_back(tiny_dataset, tmp_path):
    """Killed after step 6 on the GPU, resumed from step 5 on the CPU (CUDA hidden) and killed after step 11, then
    resumed from step 10 on the GPU to the end."""
    recipe = write_recipe(tmp_path / "tiny.yaml", (TINY % tiny_dataset).replace("epochs: 2", "epochs: 2.5"))
    out = str(tmp_path / "out")
    for hide_gpu, crash in ((False, "step:6"), (True, "step:11"), (False, None)):  # checkpoints at 5 and 10
        os.environ.pop("BENCH_CRASH_AT", None)
        if crash:
            os.environ["BENCH_CRASH_AT"] = crash
        try:
            done = _bench("run", str(recipe), "--out", out, cpu_only=hide_gpu)
        finally:
            os.environ.pop("BENCH_CRASH_AT", None)
        assert done.returncode == (-9 if crash else 0), done.stderr[-3000:]
    meta = json.loads(next((tmp_path / "out" / "tiny-gpu").glob("*/meta.json")).read_text())
    assert meta["status"] == "completed" and [r["step"] for r in meta["resumed"]] == [5, 10]


def test_batched_groups_on_the_gpu_equal_groups_one_by_one_in_float32(tiny_dataset, tmp_path):
    """engine.group_pass batched (one torch.func.vmap pass) against sequential (group by
    group), VRGD-LARS with ghost BatchNorm in float32 on the GPU, 2 steps: parameters and running statistics
    within float32 rounding, and every parameter moved far more than that."""
    from bench.engine import distributed
    from bench.engine.train import Trainer

    text = """
model: {name: resnet8_cifar, bn_batch: 4}
data: {dataset: folder, path: %s, image_size: 16, workers: 0}
global_batch: 32
micro_batch: 16
optimizer: {name: vrgd_lars, lr: 0.5, momentum: 0.9}
epochs: 1
target_top1: 50
engine: {group_pass: %s}
"""
    dist = distributed.Dist(0, 1, 0, torch.device("cuda"))
    states = []
    for how in ("batched", "sequential"):
        trainer = Trainer(recipes.load(write_recipe(tmp_path / f"{how}.yaml", text % (tiny_dataset, how))), dist)
        assert (trainer.batched is not None) == (how == "batched")
        initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        batches = trainer.data.train(0, 2)
        for _ in range(2):
            trainer.step(batches, lr=0.5)
        states.append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
    batched, sequential = states
    for key, want in sequential.items():
        if want.is_floating_point():
            torch.testing.assert_close(batched[key], want, rtol=1e-4, atol=1e-5, msg=key)
    assert (
        max((sequential[k] - initial[k]).abs().max().item() for k in initial if initial[k].is_floating_point()) > 1e-3
    )
