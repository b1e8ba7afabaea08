"""AdamW (Loshchilov and Hutter 2019) and the Adam moments that LAMB shares."""

import torch

from .base import GroupOptimizer, laid_out_like


def adam_moments(optimizer: GroupOptimizer, group: dict, params, grads, bias_correction: bool = True):
    """Advance the group's step and Adam's moments with `grads`; return (m, denom) with

        m / denom = m_hat / (sqrt(v_hat) + eps),   m_hat = m / (1 - b1^t),  v_hat = v / (1 - b2^t)

    (m / (sqrt(v) + eps) without bias_correction). `denom` is a new list of tensors (scratch).
    """
    beta1, beta2 = group["betas"]
    group["step"] = step = group.get("step", 0) + 1
    bc1, bc2 = (1 - beta1**step, 1 - beta2**step) if bias_correction else (1.0, 1.0)
    exp_avgs, exp_avg_sqs = optimizer._state(params, "exp_avg"), optimizer._state(params, "exp_avg_sq")
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)  # m = b1 * m + (1 - b1) * g
    torch._foreach_mul_(exp_avg_sqs, beta2)  # v = b2 * v + (1 - b2) * g^2
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    denom = torch._foreach_sqrt(exp_avg_sqs)  # bc1 * (sqrt(v_hat) + eps)
    torch._foreach_mul_(denom, bc1 / bc2**0.5)
    torch._foreach_add_(denom, bc1 * group["eps"])
    return exp_avgs, denom


class AdamW(GroupOptimizer):
    """Adam with decoupled weight decay (torch.optim.AdamW semantics):

        m = b1 * m + (1 - b1) * g;   v = b2 * v + (1 - b2) * g^2;   bias-corrected m_hat, v_hat
        w = w * (1 - lr * wd)
        w = w - lr * m_hat / (sqrt(v_hat) + eps)

    The step counter t lives in each param group ("step") and is saved with state_dict().

    Args:
        params: tensors or param-group dicts.
        lr: learning rate.
        weight_decay: decoupled weight decay (default 0).
        betas: (b1, b2) (default (0.9, 0.999)).
        eps: added to sqrt(v_hat) (default 1e-8).
    """

    def __init__(self, params, lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    def _update(self, group, params, grads, trust_grads=None):
        """torch's fused AdamW kernel (that of torch.optim.AdamW(fused=True)): one pass per tensor."""
        (beta1, beta2), lr, wd = group["betas"], self._lr(group), group["weight_decay"]
        group["step"] = group.get("step", 0) + 1
        # the kernel reads t, never advances it; filled on the device (torch.tensor would copy it there and wait)
        step = torch.full((), float(group["step"]), device=params[0].device)
        grads = [laid_out_like(w, g) for w, g in zip(params, grads)]
        torch._fused_adamw_(
            params,
            grads,
            self._state(params, "exp_avg"),
            self._state(params, "exp_avg_sq"),
            [],
            [step] * len(params),
            amsgrad=False,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            weight_decay=wd,
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
