"""LARS and LARC: layer-wise adaptive rate scaling with the MLPerf ResNet-50 reference semantics.

Paper: You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks", arXiv 1708.03888.
Reference: MLPerf Training ResNet (TensorFlow) `lars_optimizer.py`; timm `timm/optim/lars.py`.
"""

import functools

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


def lars_update(params, grads, trust_grads, bufs, lr, weight_decay, momentum, nesterov, eta, eps, clip, adapt):
    """One param group's LARS update (LARS's docstring), per run of one device and dtype (by_kind): the trust
    ratios from the norms of `trust_grads` (1 without `adapt`), then momentum_step; returns each run's trust ratios.
    `bufs`: the momentum buffers, None without momentum. A pure function of its tensors, so that torch.compile can
    take it whole (compiled_update)."""
    trusts = []
    for w, g, t, v in by_kind(params, grads, trust_grads, bufs if momentum else [None] * len(params)):
        trust = trust_ratio(norms(w), norms(t), lr, weight_decay, eta, eps, clip) if adapt else w[0].new_ones(len(w))
        momentum_step(w, g, v if momentum else None, (lr * trust).unbind(0), weight_decay, momentum, nesterov)
        trusts.append(trust)
    return trusts


@functools.cache
def compiled_update():
    """lars_update under torch.compile (engine.optimizer_step: compiled), compiled at its first call per param group;
    the first change of the lr recompiles it once with the lr as an input (dynamo's automatic dynamic: measured on
    torch 2.14), and a schedule recompiles nothing after that."""
    return torch.compile(lars_update)


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
    use_step("compiled") runs the same update under torch.compile (lars_update; engine.optimizer_step).

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
    step_paths = ("eager", "compiled")

    def __init__(self, params, lr, weight_decay=0.0, momentum=0.9, eta=1e-3, eps=0.0, nesterov=False):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta, eps=eps, nesterov=nesterov)
        super().__init__(params, {**defaults, "adapt": True})

    def _update(self, group, params, grads, trust_grads=None):
        """trust_grads: the tensors whose norms enter the trust ratio (default: grads)."""
        m = group["momentum"]
        update = compiled_update() if self.step_path == "compiled" else lars_update
        trusts = update(
            params,
            grads,
            grads if trust_grads is None else trust_grads,
            self._state(params, "momentum_buffer") if m else None,
            self._lr(group),
            group["weight_decay"],
            m,
            group["nesterov"],
            group["eta"],
            group["eps"],
            self.clip,
            group["adapt"],
        )
        if group["adapt"]:
            self._trust += trusts


class LARC(LARS):
    """LARS with LARC trust clipping (NVIDIA apex LARC clip mode, timm `trust_clip`):

        trust = min(trust / lr, 1)      so lr * trust = min(trust_lars, lr): no tensor's step exceeds lr

    Everything else, and the options, as LARS.
    """

    clip = True
