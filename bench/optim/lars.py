"""LARS and LARC: layer-wise adaptive rate scaling with the MLPerf ResNet-50 reference semantics.

Paper: You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks", arXiv 1708.03888.
Reference: MLPerf Training ResNet (TensorFlow) `lars_optimizer.py`; timm `timm/optim/lars.py`.
"""

import torch

from .base import GroupOptimizer, by_kind, norms


def trust_ratio(w_norm, g_norm, lr, weight_decay, eta, eps, clip: bool):
    """LARS' trust ratios from the tensors' norms (the hyperparameters: numbers, or one per tensor):
    eta ||w|| / (||g|| + wd ||w|| + eps), 1 where a norm is 0; LARC: min(trust / lr, 1)."""
    trust = eta * w_norm / (g_norm + weight_decay * w_norm + eps)
    trust = torch.where((w_norm > 0) & (g_norm > 0), trust, 1.0)
    return torch.clamp(trust / lr, max=1.0) if clip else trust


def momentum_step(params, grads, bufs, scales, weight_decay: float, momentum: float, nesterov: bool) -> None:
    """LARS' update with one step size s per tensor, a 0-d tensor on the parameters' device (`scales`):

        v = m * v + s * (g + wd * w)
        w = w - v                           nesterov: w = w - (m * v + s * (g + wd * w))
                                            momentum 0 (bufs None): w = w - s * (g + wd * w)

    Foreach ops, nothing read to the host: over tensors of one device and dtype (the caller's base.by_kind), each is
    one multi-tensor kernel on a GPU (torch's addcmul reads a list of 0-d tensors in its fast path since early 2026,
    2.14 has it; older torch loops over the tensors, same result). `grads` is scratch: it ends as g + wd * w."""
    if weight_decay:
        torch._foreach_add_(grads, params, alpha=weight_decay)  # d = g + wd * w
    if not momentum:
        torch._foreach_addcmul_(params, grads, scales, value=-1.0)
        return
    torch._foreach_mul_(bufs, momentum)
    torch._foreach_addcmul_(bufs, grads, scales)  # v = m * v + s * d
    if nesterov:
        torch._foreach_addcmul_(params, grads, scales, value=-1.0)
        torch._foreach_add_(params, bufs, alpha=-momentum)
    else:
        torch._foreach_sub_(params, bufs)


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

    The step stays on the device: the norms in one multi-tensor kernel each (torch._foreach_norm), the
    trust ratios as a tensor, and the update in foreach ops that take them as 0-d tensors (momentum_step),
    per device and dtype; nothing is read to the host, so on a GPU a step never waits for the device.

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
        m, lr = group["momentum"], self._lr(group)
        for w, g, t in by_kind(params, grads, grads if trust_grads is None else trust_grads):
            trust = self._trust_ratio(group, w, t, lr) if group["adapt"] else w[0].new_ones(len(w))
            bufs = self._state(w, "momentum_buffer") if m else None
            momentum_step(w, g, bufs, (lr * trust).unbind(0), group["weight_decay"], m, group["nesterov"])

    def _trust_ratio(self, group, params, grads, lr):
        trust = trust_ratio(
            norms(params), norms(grads), lr, group["weight_decay"], group["eta"], group["eps"], self.clip
        )
        self._trust.append(trust)
        return trust


class LARC(LARS):
    """LARS with LARC trust clipping (NVIDIA apex LARC clip mode, timm `trust_clip`):

        trust = min(trust / lr, 1)      so lr * trust = min(trust_lars, lr): no tensor's step exceeds lr

    Everything else, and the options, as LARS.
    """

    clip = True
