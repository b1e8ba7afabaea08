"""LARS and LARC: layer-wise adaptive rate scaling with the MLPerf ResNet-50 reference semantics.

Paper: You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks", arXiv 1708.03888.
Reference: MLPerf Training ResNet (TensorFlow) `lars_optimizer.py`; timm `timm/optim/lars.py`.
"""

import torch

from .base import GroupOptimizer, laid_out_like, norms


def _fused_sgd(w, g, v, *, lr, weight_decay, momentum, dampening=0.0, nesterov=False):
    """One tensor through torch's fused SGD kernel (that of torch.optim.SGD(fused=True)), one pass:

    v = m * v + (1 - dampening) * (g + wd * w)
    w = w - lr * v                          nesterov: w = w - lr * (g + wd * w + m * v)
                                            momentum 0 (v is None): w = w - lr * (g + wd * w)
    """
    torch._fused_sgd_(
        [w],
        [laid_out_like(w, g)],
        [v] if momentum else [],
        weight_decay=weight_decay,
        momentum=momentum,
        lr=lr,
        dampening=dampening,
        nesterov=nesterov,
        maximize=False,
        is_first_step=False,
    )


def trust_ratio(w_norm, g_norm, lr, weight_decay, eta, eps, clip: bool):
    """LARS' trust ratios from the tensors' norms (the hyperparameters: numbers, or one per tensor):
    eta ||w|| / (||g|| + wd ||w|| + eps), 1 where a norm is 0; LARC: min(trust / lr, 1)."""
    trust = eta * w_norm / (g_norm + weight_decay * w_norm + eps)
    trust = torch.where((w_norm > 0) & (g_norm > 0), trust, 1.0)
    return torch.clamp(trust / lr, max=1.0) if clip else trust


class LARS(GroupOptimizer):
    """LARS as in the MLPerf ResNet-50 reference: lr and the trust ratio sit inside the momentum buffer.

    Per tensor of a group with `adapt` (the default; create() puts ndim <= 1 tensors in a group
    with adapt=False and weight_decay=0):

        trust = eta * ||w|| / (||g|| + wd * ||w|| + eps)
        trust = 1                 where ||w|| == 0 or ||g|| == 0
        v     = m * v + lr * trust * (g + wd * w)
        w     = w - v                             nesterov: w = w - (m * v + lr * trust * (g + wd * w))

    Tensors of a group without `adapt` use trust = 1.

    lr inside the buffer (MLPerf/TF) rather than outside (torch.optim.SGD, timm Lars: v = m*v + d;
    w -= lr*v): the two agree at constant lr and differ when lr changes between steps (warm-up,
    decay); inside, a step's lr scales only that step's gradient. The buffer starts at zero, so
    step 1 is v = lr * trust * (g + wd * w), as in the reference.

    The update is torch's fused SGD kernel, one pass per tensor, with 1 - dampening = lr * trust;
    the kernel takes scalars, so the trust ratios are read to the host once per step (on a GPU,
    one synchronisation per step).

    Args:
        params: tensors or param-group dicts.
        lr: learning rate.
        weight_decay: L2 penalty, added to the gradient inside the trust ratio (default 0).
        momentum: momentum factor m (default 0.9).
        eta: trust coefficient (default 1e-3, MLPerf).
        eps: added to the trust ratio's denominator (default 0, MLPerf; the zero-norm guard avoids 0/0).
        nesterov: Nesterov momentum as TF applies it (default False).
    """

    clip = False  # LARC

    def __init__(self, params, lr, weight_decay=0.0, momentum=0.9, eta=1e-3, eps=0.0, nesterov=False):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta, eps=eps, nesterov=nesterov)
        super().__init__(params, {**defaults, "adapt": True})

    def _update(self, group, params, grads, trust_grads=None):
        """trust_grads: the tensors whose norms enter the trust ratio (default: grads)."""
        lr, wd, m = group["lr"], group["weight_decay"], group["momentum"]
        if group["adapt"]:
            trust = self._trust_ratio(group, params, grads if trust_grads is None else trust_grads)
            scales = (lr * trust).tolist()  # one read of all ratios: the fused kernel takes scalars
        else:
            scales = [lr] * len(params)
        # v = m * v + lr * trust * (g + wd * w);  w = w - v   in one fused pass per tensor:
        bufs = self._state(params, "momentum_buffer") if m else [None] * len(params)
        for w, g, v, s in zip(params, grads, bufs, scales):
            if group["nesterov"]:  # w = w - (m * v + s * (g + wd * w)); the kernel adds g unscaled: scale it
                g.mul_(s)
                _fused_sgd(w, g, v, lr=1.0, weight_decay=s * wd, momentum=m, nesterov=True)
            else:  # (1 - dampening) = s scales the gradient inside the buffer; without momentum, lr does
                _fused_sgd(w, g, v, lr=1.0 if m else s, weight_decay=wd, momentum=m, dampening=1.0 - s)

    def _trust_ratio(self, group, params, grads):
        trust = trust_ratio(
            norms(params), norms(grads), group["lr"], group["weight_decay"], group["eta"], group["eps"], self.clip
        )
        self._trust.append(trust)
        return trust


class LARC(LARS):
    """LARS with LARC trust clipping (NVIDIA apex LARC clip mode, timm `trust_clip`):

        trust = min(trust / lr, 1)      so lr * trust = min(trust_lars, lr): no tensor's step exceeds lr

    Everything else, and the options, as LARS.
    """

    clip = True
