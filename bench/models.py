"""The CIFAR ResNets of He et al. 2016 (section 4.2), named in recipes like any timm model.

    resnet8_cifar, resnet14_cifar, resnet20_cifar, resnet32_cifar, resnet44_cifar, resnet56_cifar, resnet110_cifar   (depth 6n + 2)

For 32 px images: a 3x3 convolution to 16 channels, three stages of n basic blocks (two 3x3 convolutions
each) with 16, 32 and 64 channels on 32, 16 and 8 px maps (the first block of stages 2 and 3 has stride 2),
global average pooling and a linear classifier. ResNet-56 has 0.85M parameters, as the paper's Table 6.

Shortcuts are the paper's option A, the one it uses on CIFAR-10: identity, and where the shape changes
the input subsampled by 2 and zero-padded to the new width (no parameters), so the parameter counts
match the paper's. Option B (1x1 projections where the shape changes) is `shortcut="B"`. Weights are
initialised as He et al. (Kaiming normal, fan out); BatchNorm starts at weight 1, bias 0.

Every model a run trains is built here (create_model), with the dtype of its weights (param_dtype) and the
autocast its forward passes run under, as timm keeps create_model beside its registry; and a recipe's model
section is checked here (check: the name, the keywords, pretrained weights, ghost BatchNorm's layers), from names
alone, so this module sits below the recipe schema that calls it.
"""

from __future__ import annotations

import difflib
import re
import socket
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import UserError

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


OWN: dict = {}  # bench's own models by name: built without importing timm and torchvision (1.5 s a run on 2 cores)


def _own(fn):
    OWN[fn.__name__] = fn
    return fn


def _create(blocks: int, pretrained: bool, **kwargs) -> CifarResNet:
    if pretrained:
        raise ValueError("the CIFAR ResNets have no pretrained weights")
    for timm_own in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):  # what timm passes every model
        kwargs.pop(timm_own, None)
    return CifarResNet(blocks, **kwargs)


@_own
def resnet8_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-8 for CIFAR: 1 block per stage, 0.08M parameters (a budget-sized member of the family)."""
    return _create(1, pretrained, **kwargs)


@_own
def resnet14_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-14 for CIFAR: 2 blocks per stage, 0.17M parameters."""
    return _create(2, pretrained, **kwargs)


@_own
def resnet20_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-20 for CIFAR (He et al. 2016): 3 blocks per stage, 0.27M parameters."""
    return _create(3, pretrained, **kwargs)


@_own
def resnet32_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-32 for CIFAR: 5 blocks per stage, 0.46M parameters."""
    return _create(5, pretrained, **kwargs)


@_own
def resnet44_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-44 for CIFAR: 7 blocks per stage, 0.66M parameters."""
    return _create(7, pretrained, **kwargs)


@_own
def resnet56_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-56 for CIFAR: 9 blocks per stage, 0.85M parameters (the VRGD paper's CIFAR-10 model)."""
    return _create(9, pretrained, **kwargs)


@_own
def resnet110_cifar(pretrained: bool = False, **kwargs) -> CifarResNet:
    """ResNet-110 for CIFAR: 18 blocks per stage, 1.7M parameters."""
    return _create(18, pretrained, **kwargs)


def timm_models():
    """timm, with bench's own models (the CIFAR ResNets above) registered in it (once), so that timm's functions
    know them too."""
    import timm
    from timm.models import register_model

    for name, fn in OWN.items():
        if not timm.is_model(name):
            register_model(fn)
    return timm


def _build(name: str, kwargs: dict) -> torch.nn.Module:
    """bench's own model, or timm's (imported only then: a run of a CIFAR ResNet never imports it)."""
    if name in OWN:
        return OWN[name](**kwargs)
    return timm_models().create_model(name, **kwargs)


def create_model(name: str, kwargs: dict, num_classes: int) -> torch.nn.Module:
    """A recipe's model (model.name, model.kwargs) for a dataset of `num_classes` classes."""
    kwargs = dict(kwargs)
    given = kwargs.setdefault("num_classes", num_classes)
    if given != num_classes:
        raise UserError(f"key 'model.kwargs.num_classes' is {given} but the dataset has {num_classes} classes")
    return _build(name, kwargs)


def autocast(precision: str, device: torch.device):
    """The autocast of a recipe's forward passes (engine.precision)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's


def compiled(net: torch.nn.Module, setting: bool | str) -> torch.nn.Module:
    """The module a recipe's engine.compile runs: eager (false), torch.compile's default mode (true), or the named
    mode (reduce-overhead: CUDA graphs where torch finds them safe; max-autotune: searched kernels, slow to start)."""
    if not setting:
        return net
    return torch.compile(net, mode="default" if setting is True else setting)


def param_dtype(precision: str) -> torch.dtype:
    """The dtype of the weights and the images fed to them (bf16 autocasts inside fp32 weights)."""
    return torch.float64 if precision == "fp64" else torch.float32


# The checks of a recipe's model section (bench validate and every load of a recipe): one sentence each.

NORM_NAME = re.compile(r"(Batch|Group|Layer|Instance|RMS|Frozen\w*)Norm")


def check(name: str, kwargs: dict, bn_batch: int | None) -> None:
    """model.name, model.kwargs (built on the meta device: no memory, no weights) and model.bn_batch's layers."""
    check_name(name)
    if kwargs:
        check_kwargs(name, kwargs)
    if bn_batch:
        with torch.device("meta"):
            ghost_layers(_build(name, {**kwargs, "pretrained": False}), name)


def check_name(name: str, key: str = "key 'model.name'") -> None:
    """A timm model name, or one sentence with the closest names."""
    if name in OWN:
        return
    timm = timm_models()
    if not timm.is_model(name):
        # bench's small-image models first (resnet20 is more likely resnet20_cifar than timm's resnet200)
        own = [m for m in OWN if m.startswith(f"{name}_")]
        close = list(dict.fromkeys(own + difflib.get_close_matches(name, [*timm.list_models(), *OWN], n=3)))[:3]
        hint = f"; did you mean {', '.join(close)}?" if close else "; see timm.list_models()"
        raise UserError(f"{key}: unknown timm model '{name}'{hint}")


def check_kwargs(name: str, kwargs: dict) -> None:
    """Build the model on the meta device (no memory, no weights): a keyword timm's model does not take is one
    sentence here instead of a traceback in the run; pretrained weights are looked up (check_pretrained)."""
    try:
        with torch.device("meta"):
            _build(name, {**kwargs, "pretrained": False})
    except (TypeError, ValueError, AssertionError, KeyError) as e:
        raise UserError(f"key 'model.kwargs': timm model '{name}' does not take these arguments ({e})") from None
    if kwargs.get("pretrained"):
        check_pretrained(name)


def check_pretrained(name: str) -> None:
    """Pretrained weights come from the local cache, or from the Hugging Face Hub when it can be reached now:
    offline, a missing file is one sentence saying where to put it, not a minute of retries and a traceback."""
    import huggingface_hub
    from huggingface_hub import constants
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None or not (cfg.hf_hub_id or cfg.url or cfg.file):
        raise UserError(f"key 'model.kwargs.pretrained': timm has no pretrained weights for '{name}'")
    cached = [cfg.file] if cfg.file else []
    if cfg.hf_hub_id:
        hub = cfg.hf_hub_id.split("@")[0]
        for filename in filter(None, (cfg.hf_hub_filename, "model.safetensors", "pytorch_model.bin")):
            found = huggingface_hub.try_to_load_from_cache(hub, filename)
            cached.append(found if isinstance(found, str) else None)
    if cfg.url:
        cached.append(str(Path(torch.hub.get_dir()) / "checkpoints" / cfg.url.rsplit("/", 1)[-1]))
    if any(path and Path(path).is_file() for path in cached) or _hub_reachable():
        return
    where = (
        f"the Hugging Face cache ({constants.HF_HUB_CACHE}, repository {cfg.hf_hub_id})"
        if cfg.hf_hub_id
        else f"{Path(torch.hub.get_dir()) / 'checkpoints'}"
    )
    raise UserError(
        f"key 'model.kwargs.pretrained': the weights of timm model '{name}' are not cached here and the "
        f"Hugging Face Hub cannot be reached; download them where there is internet (timm.create_model("
        f"'{name}', pretrained=True)) and copy them into {where}, or set pretrained: false"
    )


def _hub_reachable() -> bool:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
        return True
    except OSError:
        return False


def ghost_layers(model: nn.Module, model_name: str) -> list[nn.BatchNorm2d]:
    """The model's BatchNorm2d layers, or one sentence naming a normalisation layer ghost BatchNorm cannot split."""
    layers = []
    for name, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d) and not isinstance(m, nn.SyncBatchNorm):
            layers.append(m)
        elif NORM_NAME.search(type(m).__name__):
            raise UserError(
                f"key 'model.bn_batch': {model_name} has a {type(m).__name__} layer ('{name}'); ghost BatchNorm "
                "splits torch.nn.BatchNorm2d layers (and timm's BatchNormAct2d) only: drop model.bn_batch"
            )
    if not layers:
        raise UserError(f"key 'model.bn_batch': {model_name} has no BatchNorm2d layer to split: drop model.bn_batch")
    return layers
