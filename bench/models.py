"""The CIFAR ResNets of He et al. 2016 (section 4.2), registered with timm so recipes name them like any timm model.

    resnet8_cifar, resnet14_cifar, resnet20_cifar, resnet32_cifar, resnet44_cifar, resnet56_cifar, resnet110_cifar   (depth 6n + 2)

For 32 px images: a 3x3 convolution to 16 channels, three stages of n basic blocks (two 3x3 convolutions
each) with 16, 32 and 64 channels on 32, 16 and 8 px maps (the first block of stages 2 and 3 has stride 2),
global average pooling and a linear classifier. ResNet-56 has 0.85M parameters, as the paper's Table 6.

Shortcuts are the paper's option A, the one it uses on CIFAR-10: identity, and where the shape changes
the input subsampled by 2 and zero-padded to the new width (no parameters), so the parameter counts
match the paper's. Option B (1x1 projections where the shape changes) is `shortcut="B"`. Weights are
initialised as He et al. (Kaiming normal, fan out); BatchNorm starts at weight 1, bias 0.

Every model a run trains is built here (create_model), with the dtype of its weights (param_dtype) and the
autocast its forward passes run under, as timm keeps create_model beside its registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from timm.models import register_model
from torch import nn

from bench.errors import UserError

if TYPE_CHECKING:
    from bench.recipe import Recipe

WIDTHS = (16, 32, 64)


class _Block(nn.Module):
    """Two 3x3 convolutions with BatchNorm and ReLU, and the shortcut added before the last ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, shortcut: str):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = 0
        self.project = None
        if stride != 1 or cin != cout:
            if shortcut == "A":  # subsample, then zero channels on both sides of the input's
                self.pad, self.stride = (cout - cin) // 2, stride
            else:
                self.project = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.project is not None:
            x = self.project(x)
        elif self.pad:
            x = F.pad(x[:, :, :: self.stride, :: self.stride], (0, 0, 0, 0, self.pad, self.pad))
        return F.relu(out + x)


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet of depth 6 * blocks + 2 (see the module docstring)."""

    def __init__(self, blocks: int, num_classes: int = 10, in_chans: int = 3, shortcut: str = "A"):
        if shortcut not in ("A", "B"):
            raise ValueError(f"shortcut must be 'A' or 'B', not {shortcut!r}")
        super().__init__()
        self.num_classes = num_classes
        self.conv1 = nn.Conv2d(in_chans, WIDTHS[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTHS[0])
        stages, cin = [], WIDTHS[0]
        for i, cout in enumerate(WIDTHS):
            stride = 1 if i == 0 else 2
            stages.append(
                nn.Sequential(
                    *(_Block(cin if j == 0 else cout, cout, stride if j == 0 else 1, shortcut) for j in range(blocks))
                )
            )
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(WIDTHS[-1], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _create(blocks: int, pretrained: bool, **kwargs) -> CifarResNet:
    if pretrained:
        raise ValueError("the CIFAR ResNets have no pretrained weights")
    for timm_own in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):  # what timm passes every model
        kwargs.pop(timm_own, None)
    return CifarResNet(blocks, **kwargs)


@register_model
def resnet8_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-8 for CIFAR: 1 block per stage, 0.08M parameters (a budget-sized member of the family)."""
    return _create(1, pretrained, **kwargs)


@register_model
def resnet14_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-14 for CIFAR: 2 blocks per stage, 0.17M parameters."""
    return _create(2, pretrained, **kwargs)


@register_model
def resnet20_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-20 for CIFAR (He et al. 2016): 3 blocks per stage, 0.27M parameters."""
    return _create(3, pretrained, **kwargs)


@register_model
def resnet32_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-32 for CIFAR: 5 blocks per stage, 0.46M parameters."""
    return _create(5, pretrained, **kwargs)


@register_model
def resnet44_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-44 for CIFAR: 7 blocks per stage, 0.66M parameters."""
    return _create(7, pretrained, **kwargs)


@register_model
def resnet56_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-56 for CIFAR: 9 blocks per stage, 0.85M parameters (the VRGD paper's CIFAR-10 model)."""
    return _create(9, pretrained, **kwargs)


@register_model
def resnet110_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-110 for CIFAR: 18 blocks per stage, 1.7M parameters."""
    return _create(18, pretrained, **kwargs)


def timm_models():
    """timm, with bench's own models (the CIFAR ResNets above) registered in it: importing this module registers
    them."""
    import timm

    return timm


def create_model(recipe: Recipe, num_classes: int) -> torch.nn.Module:
    kwargs = dict(recipe.model.kwargs)
    given = kwargs.setdefault("num_classes", num_classes)
    if given != num_classes:
        raise UserError(f"key 'model.kwargs.num_classes' is {given} but the dataset has {num_classes} classes")
    return timm_models().create_model(recipe.model.name, **kwargs)


def autocast(recipe: Recipe, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=recipe.engine.precision == "bf16")


def param_dtype(recipe: Recipe) -> torch.dtype:
    """The dtype of the weights and the images fed to them (bf16 autocasts inside fp32 weights)."""
    return torch.float64 if recipe.engine.precision == "fp64" else torch.float32
