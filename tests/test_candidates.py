"""The candidates behind engine.optimizer_step (LARS's update eager or under torch.compile) against the float64
references of tests/helpers.py, and the runner's refusal of a step an optimizer lacks. Ghost BatchNorm's candidates:
tests/test_ghost_bn.py; the defaults that choose among them: tests/test_defaults.py."""

import pytest
import torch
from torch import nn

from bench import optim
from bench import recipe as recipes
from bench.engine.distributed import Dist
from bench.engine.train import Trainer
from bench.errors import UserError
from tests.conftest import write_recipe
from tests.helpers import FP32, LRS, RefLARS, RefVRGD, assert_history, fp32, gradients, run, weights

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


@pytest.mark.slow  # torch.compile on the CPU: about 30 s on 2 loaded cores
def test_compiled_larc_step_with_nesterov_matches_the_float64_reference():
    """LARC's clipping and Nesterov's momentum under torch.compile, in float64, through an lr schedule (its first
    change recompiles once): the reference's weights to float64's rounding, and its trust ratios."""
    ws, steps = weights(), gradients(len(LRS))
    ours, opt = run("larc", ws, steps, LRS, step_path="compiled", weight_decay=0.1, eta=0.2, nesterov=True)
    ref = RefLARS(ws, 0.1, eta=0.2, clip=True, nesterov=True)
    assert_history(ours, ref.run(steps, LRS), rtol=1e-12, atol=1e-14)
    trust = torch.tensor(ref.trusts[-1], dtype=torch.float64)
    assert opt.diagnostics() == pytest.approx(
        dict(trust_min=trust.min().item(), trust_median=trust.median().item(), trust_max=trust.max().item()), rel=1e-9
    )


@pytest.mark.slow  # torch.compile on the CPU
def test_compiled_vrgd_lars_step_in_float32_matches_the_float64_reference_within_fp32_margins():
    """VRGD-LARS's eager GSNR factors (fused=False) with LARS's update under torch.compile, 4 groups a step in
    float32: the float64 reference within float32's margins (helpers.FP32)."""
    ws, steps = weights(), gradients(len(LRS), k=4)
    ours, opt = run("vrgd_lars", [w.float() for w in ws], fp32(steps), LRS, step_path="compiled", weight_decay=0.1,
                    eta=0.05, fused=False)  # fmt: skip
    assert opt.step_path == "compiled" and opt._kernels is None
    ref = RefVRGD(RefLARS(ws, 0.1, eta=0.05))
    assert_history(ours, [[w.float() for w in step] for step in ref.run(steps, LRS)], **FP32)


def test_only_the_lars_family_has_a_compiled_step(tmp_path, tiny_dataset):
    """use_step refuses a path the optimizer lacks; the runner says so of a recipe's engine.optimizer_step in one
    sentence naming the key, and `auto` keeps such an optimizer's eager step."""
    sgd = optim.create([nn.Parameter(torch.zeros(2))], "sgd", lr=0.1)
    with pytest.raises(ValueError, match="SGD has no compiled step"):
        sgd.use_step("compiled")
    assert optim.create([nn.Parameter(torch.zeros(2))], "vrgd_lars", lr=0.1).step_paths == ("eager", "compiled")
    path = write_recipe(
        tmp_path / "sgd.yaml",
        f"model: {{name: resnet8_cifar}}\ndata: {{dataset: folder, path: {tiny_dataset}, image_size: 8, workers: 0}}\n"
        "global_batch: 8\noptimizer: {name: sgd, lr: 0.1}\nepochs: 1\ntarget_top1: 50\n",
    )
    dist = Dist(0, 1, 0, torch.device("cpu"))
    with pytest.raises(UserError, match=r"^key 'engine.optimizer_step': compiled, but sgd has no compiled step"):
        Trainer(recipes.load(path, ["engine.optimizer_step=compiled"]), dist)
    trainer = Trainer(recipes.load(path), dist)  # auto
    assert trainer.opt.step_path == "eager" and trainer.chosen.optimizer_step == "eager"
