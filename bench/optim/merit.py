"""MERIT: Maximum-normalized Element-wise Ratio (Luo, Zheng, Qin, Zhu, Liu, You, "MERIT: Maximum-normalized
Element-wise Ratio for Language Model Large-batch Training", 2025); reference: the authors' code,
NUS-HPC-AI-Lab/MERIT optim/merit.py, which this follows by default."""

import torch

from .adamw import adam_moments
from .base import GroupOptimizer, validate


class MERIT(GroupOptimizer):
    """LAMB's layer-wise trust ratio made element-wise and built from max-norms:

        m = b1 * m + (1 - b1) * g;   v = b2 * v + (1 - b2) * g^2     (no bias correction: the authors' code)
        u = m / (sqrt(v) + eps) + wd * w
        tensors with 2 or more dimensions (matrices, convolution kernels):
            ratio     = max(max|w| / max|u| along dim 1,  max|w| / max|u| along dim 0)   other dims kept
            ratio     = max(ratio, max|w| / max|u| over the whole tensor)                 the floor
            ratio     = 1 where any of the four row or column maxima is 0
        one-dimensional tensors: ratio = max|w| / max|u| over the tensor, 1 where either is 0
        w = w - lr * clip(ratio * u, -1, 1)                                              element-wise

    Where bench follows the authors' code and not (necessarily) the paper's algorithm: no bias
    correction of the moments (the code comments it out; `bias_correction=True` restores Adam's);
    eps added to sqrt(v), default 1e-6; weight decay added to u before the ratio, as LAMB; the ratio
    applies to every tensor, also those create() excludes (adapt=False: there they get no weight
    decay but keep the ratio, as in the code, which has no exclusion). The trust diagnostics report
    the whole-tensor ratio max|w| / max|u| per tensor.

    Args:
        params: tensors or param-group dicts.
        lr: learning rate.
        weight_decay: wd, added to u before the ratio (default 0).
        betas: (b1, b2) (default (0.9, 0.999)).
        eps: added to sqrt(v) (default 1e-6, the authors').
        bias_correction: Adam's bias correction of m and v (default False, the authors' code).
    """

    def __init__(self, params, lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-6, bias_correction=False):
        validate({"bias_correction": bias_correction})
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.bias_correction = bias_correction

    def _update(self, group, params, grads, trust_grads=None):
        wd = group["weight_decay"]
        exp_avgs, denom = adam_moments(self, group, params, grads, self.bias_correction)
        update = torch._foreach_div(exp_avgs, denom)  # u = m / (sqrt(v) + eps) + wd * w
        if wd:
            torch._foreach_add_(update, params, alpha=wd)
        whole = []
        for w, u in zip(params, update):
            ratio, tensor_ratio = _ratio(w.abs(), u.abs())
            u.mul_(ratio).clamp_(-1.0, 1.0)
            whole.append(tensor_ratio)
        self._trust.append(torch.stack(whole))
        torch._foreach_add_(params, update, alpha=-self._lr(group))


def _ratio(w_abs: torch.Tensor, u_abs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise ratio (a tensor broadcastable to w) and the whole tensor's max|w| / max|u|."""
    w_max, u_max = w_abs.amax(), u_abs.amax()
    whole = torch.where((w_max > 0) & (u_max > 0), w_max / u_max, 1.0)
    if w_abs.ndim < 2:
        return whole, whole
    rows_w, rows_u = w_abs.amax(dim=1, keepdim=True), u_abs.amax(dim=1, keepdim=True)
    cols_w, cols_u = w_abs.amax(dim=0, keepdim=True), u_abs.amax(dim=0, keepdim=True)
    zero = (rows_w == 0) | (rows_u == 0) | (cols_w == 0) | (cols_u == 0)  # broadcast to w's shape
    ratio = torch.maximum(rows_w / rows_u, cols_w / cols_u).clamp(min=whole)
    return torch.where(zero, 1.0, ratio), whole
