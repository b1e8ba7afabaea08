"""Momentum SGD (PyTorch and TensorFlow semantics), the baseline every large-batch method is compared with."""

import torch

from .base import GroupOptimizer


class SGD(GroupOptimizer):
    """Momentum SGD, lr outside the momentum buffer (torch.optim.SGD, TF MomentumOptimizer):

        v = m * v + (g + wd * w)
        w = w - lr * v                          nesterov: w = w - lr * (g + wd * w + m * v)

    The buffer starts at zero, so step 1 is v = g + wd * w (as torch.optim.SGD with dampening 0).

    Args:
        params: tensors or param-group dicts.
        lr: learning rate.
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum: momentum factor m (default 0.9, the ImageNet standard; torch's default is 0).
        nesterov: Nesterov momentum (default False).
    """

    def __init__(self, params, lr, weight_decay=0.0, momentum=0.9, nesterov=False):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov))

    def _update(self, group, params, grads, trust_grads=None):
        lr, wd, m = self._lr(group), group["weight_decay"], group["momentum"]
        bufs = self._state(params, "momentum_buffer")
        torch._foreach_mul_(bufs, m)  # v = m * v + g + wd * w
        torch._foreach_add_(bufs, grads)
        if wd:
            torch._foreach_add_(bufs, params, alpha=wd)
        if group["nesterov"]:  # w = w - lr * (g + wd * w + m * v)
            if wd:
                torch._foreach_mul_(params, 1 - lr * wd)
            torch._foreach_add_(params, grads, alpha=-lr)
            torch._foreach_add_(params, bufs, alpha=-lr * m)
        else:  # w = w - lr * v
            torch._foreach_add_(params, bufs, alpha=-lr)
