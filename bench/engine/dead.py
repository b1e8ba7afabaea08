"""Structurally dead parameters: coordinates whose gradient is exactly zero whatever the images.

A model built for larger images than it is given has some: timm's ImageNet ResNet stem (7x7 stride-2
convolution, max-pool) on 28 px images leaves layer4 2x2 and 1x1 maps, and the 3x3 taps that only ever
cover padding never get a gradient (55% of the reshaped resnet18 of recipes/sweeps/base/fashion-mnist.yaml).

One probe finds them: a forward and backward pass of PROBE random images at the run's image size, with a
random gradient on the outputs, on a copy of the model in which every all-zero parameter except biases is
set to one. timm zero-initialises the last BatchNorm of each residual block (zero_init_last; layer scales and
some heads start at zero too): that silences a branch only until the parameter learns, so at step 0 the
Fashion-MNIST model shows 95% zero gradients of which 40 points are not dead. The global random state is
left as it was found (a private generator, fork_rng for what the model draws), as the memory probe does.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from unittest import mock

from bench.errors import UserError

PROBE = 2  # images: BatchNorm in training mode needs two on a 1x1 map
WARN_SHARE = 0.01  # above this share a run warns (or refuses: engine.dead_params)
SHOWN = 3  # the largest dead tensors a warning names


@dataclass(frozen=True)
class DeadParams:
    """Parameter coordinates (requires_grad only), those whose probe gradient is exactly zero, and the
    tensors holding the most of them (name, dead coordinates), largest first."""

    total: int
    dead: int
    largest: tuple[tuple[str, int], ...]

    @property
    def share(self) -> float:
        return self.dead / self.total if self.total else 0.0

    def as_dict(self) -> dict:
        """What the run's meta records (key dead_params)."""
        return {"share": self.share, "count": self.dead, "total": self.total}

    def summary(self, model: str, image_size: int) -> str:
        """One sentence: the share, the largest dead tensors, the likely cause and the way out."""
        tensors = ", ".join(f"{name} {count:,}" for name, count in self.largest[:SHOWN])
        return (
            f"{self.share:.0%} of {model}'s parameters ({self.dead:,} of {self.total:,}) get exactly zero "
            f"gradient at {image_size} px whatever the images (largest: {tensors}): feature maps smaller than "
            "the kernel see only padding, a stem built for larger images; use a small-image model such as "
            "resnet20_cifar, or a larger data.image_size"
        )


def _leaky_relu(x, inplace=False):
    """ReLU for the probe, leaky: a channel that happens to be negative on every probe image (likely on 2x2 maps
    of 2 images) is not taken for dead, while the network stays nonlinear (with the identity, a bias before
    1x1 convolutions and BatchNorm would look dead: BatchNorm removes a constant shift). Dead taps are a matter
    of the graph, not of the signs."""
    import torch.nn.functional as F

    return F.leaky_relu(x, 0.1)


def probe(model, image_size: int) -> DeadParams:
    """The structurally dead coordinates of `model` on PROBE random images of image_size px (3 channels, as
    every loader gives), on the model's device and dtype; `model` itself is left untouched."""
    import torch

    first = next(model.parameters())
    device, dtype = first.device, first.dtype
    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # dropout, drop-path
        twin = copy.deepcopy(model)
        with torch.no_grad():
            for name, p in twin.named_parameters():
                if p.requires_grad and not name.endswith("bias") and p.numel() and not p.any():
                    p.fill_(1.0)  # a silenced branch (zero-initialised norm weight, layer scale) speaks again
        twin.train()
        twin.zero_grad(set_to_none=True)
        images = torch.randn(PROBE, 3, image_size, image_size, generator=gen).to(device, dtype)
        with mock.patch("torch.nn.functional.relu", _leaky_relu):
            out = twin(images)
        out = out if isinstance(out, torch.Tensor) else out[0]  # models that also return auxiliary outputs
        out.backward(torch.randn(out.shape, generator=gen).to(out.device, out.dtype))
    total, dead = 0, {}
    for name, p in twin.named_parameters():
        if not p.requires_grad:
            continue
        total += p.numel()
        zeros = p.numel() if p.grad is None else int((p.grad == 0).sum())  # no gradient at all: unused
        if zeros:
            dead[name] = zeros
    largest = tuple(sorted(dead.items(), key=lambda item: -item[1]))
    return DeadParams(total, sum(dead.values()), largest)


def verdict(found: DeadParams, recipe) -> str | None:
    """The warning for a recipe's probe above WARN_SHARE (None below it); with engine.dead_params: refuse, a
    UserError saying the same instead."""
    if found.share <= WARN_SHARE:
        return None
    said = found.summary(recipe.model.name, recipe.data.image_size)
    if recipe.engine.dead_params == "refuse":
        raise UserError(f"key 'engine.dead_params' is refuse and {said} (warn runs it anyway)")
    return said


_probed: dict[tuple, DeadParams] = {}  # bench validate --models: recipes of one study share a few models


def recipe_probe(recipe, num_classes: int) -> DeadParams:
    """The probe of a recipe's model, built on the CPU with num_classes outputs (bench validate --models), once
    per model, keywords, image size and classes; the model's initialisation draws nothing from the global
    random state."""
    import torch

    from bench.models import create_model

    key = (recipe.model.name, json.dumps(recipe.model.kwargs, sort_keys=True), recipe.data.image_size, num_classes)
    if key not in _probed:
        with torch.random.fork_rng(devices=[]):
            model = create_model(recipe.model.name, recipe.model.kwargs, num_classes)
        _probed[key] = probe(model, recipe.data.image_size)
    return _probed[key]
