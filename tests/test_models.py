"""bench/models.py: He et al.'s CIFAR ResNets, registered with timm."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.models import timm_models

# He et al. 2016, Table 6: parameters of the CIFAR-10 ResNets (option A shortcuts, 10 classes)
PAPER = {
    "resnet20_cifar": 0.27e6,
    "resnet32_cifar": 0.46e6,
    "resnet44_cifar": 0.66e6,
    "resnet56_cifar": 0.85e6,
    "resnet110_cifar": 1.7e6,
}


@pytest.mark.parametrize("name", PAPER)
def test_cifar_resnets_have_the_papers_size_and_shape(name):
    timm = timm_models()
    assert timm.is_model(name)
    model = timm.create_model(name, num_classes=10)
    params = sum(p.numel() for p in model.parameters())
    assert params == pytest.approx(PAPER[name], rel=0.02)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    depth = len(convs) + 1  # + the classifier; option A adds no convolution
    assert depth == int(name.removeprefix("resnet").removesuffix("_cifar"))
    assert convs[0].kernel_size == (3, 3) and convs[0].out_channels == 16 and convs[0].stride == (1, 1)
    assert {c.out_channels for c in convs} == {16, 32, 64}
    model.eval()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_resnet56_feature_maps_and_option_b():
    timm = timm_models()
    model = timm.create_model("resnet56_cifar", num_classes=100)
    sizes = []
    for stage in model.stages:
        stage.register_forward_hook(lambda _m, _i, out: sizes.append(tuple(out.shape[1:])))
    model(torch.randn(1, 3, 32, 32))
    assert sizes == [(16, 32, 32), (32, 16, 16), (64, 8, 8)]  # 32, 16 and 8 px maps of 16/32/64 channels
    b = timm.create_model("resnet56_cifar", shortcut="B")
    extra = sum(p.numel() for p in b.parameters()) - sum(
        p.numel() for p in timm.create_model("resnet56_cifar").parameters()
    )
    assert extra == (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64)  # two 1x1 projections with their BatchNorms
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm.create_model("resnet56_cifar", pretrained=True)


@pytest.mark.parametrize("name, blocks", [("resnet8_cifar", 1), ("resnet14_cifar", 2)])
def test_the_budget_sized_cifar_resnets_have_their_depth(name, blocks):
    model = timm_models().create_model(name, num_classes=10, in_chans=1)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) + 1 == 6 * blocks + 2
    assert all(len(stage) == blocks for stage in model.stages)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.slow
def test_a_cifar_resnet_is_built_and_checked_without_importing_timm():
    """bench's own models need neither timm nor torchvision (1.5 s of every run's start on 2 cores: the ladder
    studies' runs); timm's own names still go through timm, with bench's registered in it."""
    code = (
        "import sys; from bench.models import check, create_model; "
        "check('resnet8_cifar', {'in_chans': 1}, 4); m = create_model('resnet8_cifar', {'in_chans': 1}, 10); "
        "assert m.fc.out_features == 10 and m.conv1.in_channels == 1; "
        "print(sorted(k for k in ('timm', 'torchvision') if k in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    timm = timm_models()
    assert timm.is_model("resnet8_cifar") and timm.is_model("resnet10t")


def test_engine_compile_takes_torchs_modes_and_refuses_others(monkeypatch):
    """engine.compile: false runs eager, true torch.compile's default mode, a string that mode; anything else is a
    recipe error naming the key."""
    import torch

    from bench import recipe as recipes
    from bench.errors import UserError
    from bench.models import compiled

    seen = []
    monkeypatch.setattr(torch, "compile", lambda net, mode: seen.append(mode) or net)
    net = torch.nn.Linear(2, 2)
    assert compiled(net, False) is net and seen == []
    compiled(net, True)
    compiled(net, "reduce-overhead")
    assert seen == ["default", "reduce-overhead"]
    demo = Path(__file__).parents[1] / "recipes" / "demo-sgd.yaml"
    assert recipes.load(demo, ["engine.compile=max-autotune"]).engine.compile == "max-autotune"
    with pytest.raises(UserError, match="engine.compile"):
        recipes.load(demo, ["engine.compile=fastest"])
