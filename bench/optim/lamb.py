"""LAMB: layer-wise adaptive moments (You et al., "Large Batch Optimization for Deep Learning:
Training BERT in 76 minutes", arXiv 1904.00962); reference: timm `timm/optim/lamb.py`."""

import torch

from .adamw import adam_moments
from .base import GroupOptimizer, norms


class LAMB(GroupOptimizer):
    """LAMB with bias-corrected moments and the weight decay added to the update before the trust ratio:

        m = b1 * m + (1 - b1) * g;   v = b2 * v + (1 - b2) * g^2;   bias-corrected m_hat, v_hat
        u     = m_hat / (sqrt(v_hat) + eps) + wd * w
        trust = ||w|| / ||u||             1 where either norm is 0
        w     = w - lr * trust * u

    Tensors of a group without `adapt` (create() puts ndim <= 1 tensors in a group with
    adapt=False and weight_decay=0) use trust = 1. No global gradient clipping.

    In timm's terms (timm.optim.Lamb): the weight decay is timm's default, decoupled_decay=False
    (wd * w joins u, so the trust ratio sees it); timm's decoupled_decay=True instead multiplies w by
    (1 - lr * wd) outside the trust ratio, which bench does not offer. bench's rule: the trust ratio
    applies to every tensor of an `adapt` group, also when weight_decay is 0 (timm's always_adapt=True;
    timm by default adapts only tensors with weight_decay != 0, so with wd = 0 it is Adam). timm also
    clips the global gradient norm at 1.0 by default (max_grad_norm); bench does not (recipes can't
    ask for it either). With always_adapt=True, max_grad_norm=None and the same eps, timm's Lamb and
    this agree in float64.

    Args:
        params: tensors or param-group dicts.
        lr: learning rate.
        weight_decay: wd, added to the update before the trust ratio (timm's decoupled_decay=False;
            default 0).
        betas: (b1, b2) (default (0.9, 0.999)).
        eps: added to sqrt(v_hat) (default 1e-6, the paper's).
    """

    def __init__(self, params, lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-6):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, adapt=True))

    def _update(self, group, params, grads, trust_grads=None):
        lr, wd = self._lr(group), group["weight_decay"]
        exp_avgs, denom = adam_moments(self, group, params, grads)
        update = torch._foreach_div(exp_avgs, denom)  # u = m_hat / (sqrt(v_hat) + eps) + wd * w
        if wd:
            torch._foreach_add_(update, params, alpha=wd)
        if group["adapt"]:  # trust = ||w|| / ||u||
            w_norm, u_norm = norms(params), norms(update)
            trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            self._trust.append(trust)
        else:
            trust = torch.ones(len(params), dtype=params[0].dtype, device=params[0].device)
        torch._foreach_addcmul_(params, update, trust.unbind(0), value=-lr)  # w = w - lr * trust * u
