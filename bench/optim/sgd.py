"""Momentum SGD (PyTorch and TensorFlow semantics), the baseline every large-batch method is compared with."""

import torch

from .base import GroupOptimizer


def fused_sgd(params, grads, bufs, *, lr, weight_decay, momentum, dampening=0.0, nesterov=False):
    """torch's fused SGD kernel, one pass over each tensor (the kernel of torch.optim.SGD(fused=True)):

        v = m * v + (1 - dampening) * (g + wd * w)
        w = w - lr * v                          nesterov: w = w - lr * (g + wd * w + m * v)
                                                momentum 0: w = w - lr * (g + wd * w)

    The buffers start at zero (no first-step special case); without momentum there are none. All
    tensors share one dtype and device.
    """
    torch._fused_sgd_(params, grads, bufs if momentum else [], weight_decay=weight_decay, momentum=momentum, lr=lr,
                      dampening=dampening, nesterov=nesterov, maximize=False, is_first_step=False)


class SGD(GroupOptimizer):
    """Momentum SGD, lr outside the momentum buffer (torch.optim.SGD, TF MomentumOptimizer):

        v = m * v + (g + wd * w)
        w = w - lr * v                          nesterov: w = w - lr * (g + wd * w + m * v)

    The buffer starts at zero, so step 1 is v = g + wd * w (as torch.optim.SGD with dampening 0).

    Args:
        params: tensors or param-group dicts (the tensors of a group share one dtype and device).
        lr: learning rate.
        weight_decay: L2 penalty added to the gradient (default 0).
        momentum: momentum factor m (default 0.9, the ImageNet standard; torch's default is 0).
        nesterov: Nesterov momentum (default False).
    """

    def __init__(self, params, lr, weight_decay=0.0, momentum=0.9, nesterov=False):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov))

    def _update(self, group, params, grads):
        m = group["momentum"]
        bufs = self._state(params, "momentum_buffer") if m else []
        fused_sgd(params, grads, bufs, lr=group["lr"], weight_decay=group["weight_decay"], momentum=m,
                  nesterov=group["nesterov"])
