"""The gradient groups of a micro-batch in one batched pass: torch.func.vmap over the groups of
grad(functional_call(model)), each group's gradient of its own mean loss, exactly.

With ghost BatchNorm (ghost_bn.py) each group is normalised over its own images only, so one group's loss
depends on its images alone and the vmapped gradient is the gradient the group would get as a micro-batch of its
own. BatchNorm's running statistics cannot be updated in place under vmap: the layers hand their chunk
statistics back (ghost_bn.deferred) and they are applied after the pass, group by group, as the sequential
micro-batches would apply them.

What it cannot do (the sequential path, group by group through the model, takes those): models that torch.func
refuses (a forward that reads a tensor's value into Python, data-dependent control flow, in-place updates of
buffers other than BatchNorm's), channels_last on CUDA (torch 2.11's cuDNN backward asks for a channels_last copy,
which vmap refuses), and a torch.compile'd forward (the pass calls the bare module; under DDP that is right, as
the optimizers that need the groups reduce their own statistics). `engine.group_pass: batched` there is one
sentence, exit 2.

Measured slower than the groups one by one wherever it ran, so `engine.group_pass: auto` keeps them one by one
(docs/performance.md): on the 2-core CPU (resnet8_cifar, 8 groups of 8: 1/1.14 at 1 thread) and on an H200
(ResNet-50 at 224 px, bf16, 8 groups of 32: 830 img/s at 39.7 GiB against 1,474 img/s at 3.1 GiB one by one).
It stays for the equality tests, and for the models and devices where it may yet pay (`batched`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from bench.engine import ghost_bn


class BatchedGroups:
    """Per-group gradients of `model` (training mode) under cross-entropy with `label_smoothing`."""

    def __init__(self, model: torch.nn.Module, label_smoothing: float):
        self.model = model
        self.params = {name: p for name, p in model.named_parameters() if p.requires_grad}

        def loss(params, buffers, images, labels):
            with ghost_bn.deferred(model) as collected:
                logits = functional_call(model, (params, buffers), (images,))
            value = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
            stats = {key: [tuple(s) for s in calls] for key, calls in collected.items() if calls}
            return value, (value.detach(), stats)

        self._pass = vmap(grad(loss, has_aux=True), in_dims=(None, None, 0, 0))

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, groups: int):
        """(gradients {parameter: (groups, *shape)}, each group's loss (groups,)); applies the running statistics."""
        params = {name: p.detach() for name, p in self.params.items()}
        buffers = dict(self.model.named_buffers())
        grads, (losses, stats) = self._pass(params, buffers, images.unflatten(0, (groups, -1)), labels.view(groups, -1))
        ghost_bn.apply_deferred(self.model, stats)
        return {self.params[name]: g for name, g in grads.items()}, losses
