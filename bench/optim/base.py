"""The group interface every bench optimizer shares, and the hyperparameter rules.

The runner drives every optimizer the same way. Per step, for each group (a
micro-batch, or the share of one device): forward, `loss.backward()` on the
mean loss of that group, `opt.observe()`; then `opt.step()`; then
`opt.zero_grad(set_to_none=True)`.

- Plain optimizers (`reduces_gradients = False`) let `p.grad` accumulate the sum
  of the groups' gradients; `observe()` only counts and `step()` divides `p.grad`
  by the count. Without any `observe()` call `p.grad` is used as it is, so they
  are ordinary `torch.optim` optimizers outside the suite. The runner lets DDP
  all-reduce `p.grad` on the last group.
- VRGD optimizers (`reduces_gradients = True`, see vrgd.py) need every group's
  gradient on its own and all-reduce their statistics themselves.

`step()` uses the gradient tensors it is given as scratch space (plain
optimizers: `p.grad`), as the runner zeroes them right after.
"""

import math

import torch
from torch import Tensor
from torch.optim import Optimizer

from bench.errors import UserError


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _interval(lo: float, hi: float, lo_closed: bool = True, hi_closed: bool = False):
    def ok(value) -> bool:
        above = lo <= value if lo_closed else lo < value
        return _number(value) and above and (value <= hi if hi_closed else value < hi)

    return ok, f"a number in {'[' if lo_closed else '('}{lo}, {hi}{']' if hi_closed else ')'}"


_BOOL = (lambda value: isinstance(value, bool), "true or false")
_NON_NEGATIVE = _interval(0, math.inf)
_FRACTION = _interval(0, 1)  # [0, 1): momentum-like coefficients

# name -> (accepts(value), what is allowed); one table for check(), create() and every constructor.
RULES = {
    "lr": _NON_NEGATIVE,
    "weight_decay": _NON_NEGATIVE,
    "momentum": _FRACTION,
    "nesterov": _BOOL,
    "eta": _interval(0, math.inf, lo_closed=False),
    "eps": _NON_NEGATIVE,
    "betas": (
        lambda value: isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_FRACTION[0], value)),
        "two numbers in [0, 1)",
    ),
    "gamma": _interval(0, 1, lo_closed=False, hi_closed=True),
    "gsnr_eps": _interval(0, math.inf, lo_closed=False),
    "beta3": _FRACTION,
    "gsnr_bias_correction": _BOOL,
    "trust_grad": (lambda value: value in ("vr", "mean"), "'vr' or 'mean'"),
}


def validate(hparams: dict) -> None:
    """Raise UserError for the first hyperparameter whose value its rule rejects (unknown keys are not checked here)."""
    for key, value in hparams.items():
        accepts, allowed = RULES.get(key, (None, None))
        if accepts is not None and not accepts(value):
            raise UserError(f"optimizer hyperparameter {key}={value!r} is invalid: it must be {allowed}.")


def norms(tensors: list[Tensor]) -> Tensor:
    """L2 norm of each tensor, as one vector (one multi-tensor kernel)."""
    return torch.stack(torch._foreach_norm(tensors))


class GroupOptimizer(Optimizer):
    """Base class: the group interface (observe, step, diagnostics) over a per-param-group `_update`.

    Subclasses implement `_update(group, params, grads)`: apply one step to `params`
    given the mean gradients `grads` (scratch space, may be overwritten).
    """

    reduces_gradients = False

    def __init__(self, params, defaults: dict):
        validate(defaults)
        super().__init__(params, defaults)
        self._groups = 0  # groups observed since the last step
        self._trust: list[Tensor] = []  # per-tensor trust ratios of the last step (LARS, LAMB)

    def observe(self) -> None:
        """Count one group; p.grad keeps accumulating the groups' sum."""
        self._groups += 1

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._trust = []
        for group, params, grads in self._gradients():
            if params:
                self._update(group, params, grads)
        self._groups = 0
        return loss

    def _gradients(self):
        """Yield (group, params, mean gradients) per param group: p.grad divided by the number of observed groups."""
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            grads = [p.grad for p in params]
            if self._groups > 1 and grads:
                torch._foreach_div_(grads, self._groups)
            yield group, params, grads

    def _update(self, group: dict, params: list[Tensor], grads: list[Tensor]) -> None:
        raise NotImplementedError

    def _state(self, params: list[Tensor], key: str, dtype: torch.dtype | None = None) -> list[Tensor]:
        """The per-parameter state tensors named `key`, created as zeros on first use."""
        tensors = []
        for p in params:
            state = self.state[p]
            if key not in state:
                state[key] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
            tensors.append(state[key])
        return tensors

    def diagnostics(self) -> dict[str, float]:
        """Scalars about the last step, read here (not during step) so a step never waits on the device."""
        if not self._trust:
            return {}
        trust = torch.cat(self._trust)
        # median: the lower of the two middle values for an even count
        return {"trust_min": float(trust.min()), "trust_median": float(trust.median()), "trust_max": float(trust.max())}
