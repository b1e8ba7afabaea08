"""Optimizers that keep the gradient groups apart to measure how they spread, over any base update:

- the gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"),
- AdaScale SGD's gain (Johnson et al. 2020, "AdaScale SGD"; fairscale.optim.AdaScale),
- SimiGrad's similarity of two halves of the batch (Qin et al. 2021, "SimiGrad").

`GroupGradients` collects the statistics; `AdaScale` turns them into an lr gain; the SimiGrad
classes only measure (the runner's batch controller, bench/engine/pace.py, acts on them). Each is
a mixin before its base optimizer, as VRGD (vrgd.py): `AdaScaleLARS(AdaScale, LARS)`.
"""

import math

import torch
import torch.distributed as dist

from .base import GroupOptimizer, Statistics, noise, validate, views
from .lamb import LAMB
from .lars import LARS
from .sgd import SGD


class GroupGradients(GroupOptimizer):
    """Mixin: the base optimizer's update on the mean gradient, with the groups kept apart.

    observe() adds each group's p.grad into one flat buffer (base.Statistics: [sums = sum_d g_d |
    second | sq_norms = sum_d ||g_d||^2 | count = k]) and sets p.grad to None (a parameter without a
    gradient counts as zero in that group). `second` is what a subclass needs beside the sum:
    "squares", sum_d g_d^2 per coordinate (VRGD, vrgd.py; it also gives sum_d ||g_d||^2), or
    "halves", the sums of the groups with an even and with an odd index, each on its own
    (`observe(index)`; SimiGrad), or nothing. step() all-reduces the buffer once under
    torch.distributed (`reduces_gradients = True`: the runner keeps DDP from reducing), sets p.grad
    to g_bar = (1/k) sum_d g_d (a view of the buffer, valid until the next observe()), measures
    grad_var and grad_sqnorm (base.noise; diagnostics()), lets the subclass measure and pick the
    gradient (`_combine`), and applies the base update to it (the hooks: base.py's diagram).

    Sum-vs-mean semantics: each group's gradient is that of its own mean loss (the runner divides
    the loss by the micro-batches of a group), so g_bar is the gradient of the whole batch's mean
    loss under any accumulation, and the statistics are those of group-sized batches.
    Costs: one extra fp32 tensor per parameter (two with squares, three with halves), one pass per
    group (two with `second`), and the all-reduce of that buffer instead of the gradient's.
    """

    reduces_gradients = True
    second: str | None = None

    def __init__(self, params, **base):
        super().__init__(params, **base)
        self._stats: Statistics | None = None  # allocated by the first observe()

    def _allocate(self):
        params = [p for group in self.param_groups for p in group["params"]]
        n = sum(p.numel() for p in params)
        dtype = torch.promote_types(torch.float32, params[0].dtype)  # fp32, or fp64 for fp64 parameters
        self._n, self._sizes = n, [p.numel() for p in params]
        self._stats = Statistics.zeros(
            n, {None: 0, "squares": n, "halves": 2 * n}[self.second], dtype, params[0].device
        )
        self._sum = views(self._stats.sums, params)
        self._second = views(self._stats.second, params) if self.second == "squares" else {}
        halves = self._stats.second.split(n) if self.second == "halves" else ()
        self._halves = tuple(views(half, params) for half in halves)  # even-indexed groups' sum, odd ones

    @torch.no_grad()
    def observe(self, index=None):
        """Add every parameter's p.grad to the statistics as one group's gradient. `index`: the
        group's position among the step's groups over all ranks (default: the count on this rank)."""
        if self._stats is None:
            self._allocate()
        if self._groups == 0:
            self._own_gradients()
            self._stats.flat.zero_()
        index = self._groups if index is None else index
        params = [p for p in self._sum if p.grad is not None]
        grads = [p.grad for p in params]
        if grads:
            torch._foreach_add_([self._sum[p] for p in params], grads)  # sum += g_d
            if self.second == "halves":  # and into its half, each at its own magnitude (SimiGrad)
                torch._foreach_add_([self._halves[index % 2][p] for p in params], grads)
            if self.second == "squares":
                torch._foreach_addcmul_([self._second[p] for p in params], grads, grads)  # sumsq += g_d^2
            else:
                self._stats.sq_norms.add_(torch.stack(torch._foreach_norm(grads)).square().sum())  # ||g_d||^2
        for p in params:
            p.grad = None
        self._groups += 1

    def _own_gradients(self) -> None:
        """Give back p.grad its own memory where it still is the g_bar view of the last step: after
        zero_grad(set_to_none=False) backward adds into that view, which the statistics overwrite."""
        stats = self._stats.flat.untyped_storage().data_ptr()
        for p in self._sum:
            if p.grad is not None and p.grad.untyped_storage().data_ptr() == stats:
                p.grad = p.grad.clone(memory_format=torch.preserve_format)

    def _reduce(self) -> int:
        if self._stats is None:
            return self._groups
        self._stats.count.fill_(self._groups)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(self._stats.flat)
            return int(self._stats.count)  # k over all ranks: a multi-rank step's one read to the host
        return self._groups

    def _count(self) -> int:
        """k, the number of groups over all ranks (at least 2), after the all-reduce."""
        k = self._reduce()
        if k < 2:
            raise RuntimeError(
                f"{type(self).__name__}.step() needs the gradients of at least 2 groups, got {k}: "
                "call observe() after each group's backward"
            )
        return k

    def _gradients(self):
        grads = self._statistics(self._count())
        for group in self.param_groups:
            yield group, group["params"], [grads[p] for p in group["params"]]

    def _statistics(self, k: int) -> dict:
        mean = self._stats.sums.div_(k)  # g_bar
        squares = self._stats.second.sum() if self.second == "squares" else self._stats.sq_norms
        total = mean.dot(mean)  # ||g_bar||^2
        self._noise = noise(squares, total, k)
        self._mean_to_grads()
        return self._combine(k, mean, total)

    def _mean_to_grads(self) -> None:
        for p, g_bar in self._sum.items():
            p.grad = g_bar if g_bar.dtype == p.dtype else g_bar.to(p.dtype)


class AdaScale(GroupGradients):
    """Mixin: AdaScale (Johnson et al. 2020): the base update with lr multiplied by the gain ratio

        var, sqr = grad_var, grad_sqnorm of the k groups (base.noise), clamped at 0
        both smoothed:  avg = theta * avg + (1 - theta) * value, read as avg / (1 - theta^t)
        gain = (var + sqr) / (var / S + sqr)          in [1, S];  S = k

    The scale S is the number of groups k: AdaScale's base batch is one group (fairscale's
    convention, scale = world size x accumulation), so the recipe's lr is the lr for a batch of one
    group, and the runner drives the schedule by scale-invariant steps (each step advances it by
    the gain, bench/engine/pace.py). Identical groups give gain 1 (var = 0); pure noise gives S.

    gain_scope="global" (default): one gain from the statistics of all parameters, the paper's
    Algorithm 1 (its gain ratio is defined on the whole model's gradient). gain_scope="per_group":
    fairscale's AdaScale: var and sqr per param group (the flat gradient restricted to the
    group), each smoothed, each group's lr times its own gain; the schedule advances by the gain of
    the summed averages (fairscale's gain() of all groups). fairscale floors var at 1e-6, bench at 0.

    Args:
        smoothing: theta of the moving averages (default null = max(1 - k/1000, 0), fairscale's);
            the averages are debiased as fairscale's (avg / (1 - theta^t)).
        gain_scope: "global" or "per_group" (above; `gain`, its name before 2026-11-24, still works with a
            warning: it named both this choice and the gain itself).
        **base: the base optimizer's arguments.

    The gains are read to the host once per step (they scale the lr the base update takes). The
    moving averages are in state_dict(); the gain of the last step is `self.gain` (per group:
    `self.gains`).
    """

    pace = "scale_invariant"

    def __init__(self, params, *, smoothing=None, gain_scope="global", **base):
        validate({"smoothing": smoothing, "gain_scope": gain_scope})
        super().__init__(params, **base)
        self.smoothing, self.per_group = smoothing, gain_scope == "per_group"
        self.gain = 1.0
        self.gains = [1.0] * len(self.param_groups)
        groups = len(self.param_groups) if self.per_group else 1
        self.averages = {"var": [0.0] * groups, "sqr": [0.0] * groups, "weight": 0.0}  # biased sums, their weight
        self._group_squares = None  # per_group: sum_d ||g_d||^2 of each param group

    @torch.no_grad()
    def observe(self, index=None):
        if self.per_group:
            if self._group_squares is None or self._groups == 0:
                device = self.param_groups[0]["params"][0].device
                self._group_squares = torch.zeros(len(self.param_groups), dtype=torch.float64, device=device)
            for i, group in enumerate(self.param_groups):
                grads = [p.grad for p in group["params"] if p.grad is not None]
                if grads:
                    self._group_squares[i] += torch.stack(torch._foreach_norm(grads)).double().square().sum()
        super().observe(index)

    def _reduce(self) -> int:
        k = super()._reduce()
        if self.per_group and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(self._group_squares)
        return k

    def _combine(self, k: int, mean, total) -> dict:
        theta = self.smoothing if self.smoothing is not None else max(1.0 - k / 1000, 0.0)
        if self.per_group:
            ends = torch.tensor([sum(p.numel() for p in g["params"]) for g in self.param_groups]).cumsum(0).tolist()
            totals = [mean[a:b].dot(mean[a:b]) for a, b in zip([0] + ends[:-1], ends)]  # ||g_bar of the group||^2
            stats = [noise(squares, t, k) for squares, t in zip(self._group_squares, totals)]
        else:
            stats = [self._noise]
        avg = self.averages
        avg["weight"] = theta * avg["weight"] + (1 - theta)
        for i, (var, sqr) in enumerate(stats):
            avg["var"][i] = theta * avg["var"][i] + (1 - theta) * max(float(var), 0.0)
            avg["sqr"][i] = theta * avg["sqr"][i] + (1 - theta) * max(float(sqr), 0.0)
        w = avg["weight"]
        self.gain = _gain(sum(avg["var"]) / w, sum(avg["sqr"]) / w, k)  # the schedule advances by this one
        self.gains = (
            [_gain(v / w, q / w, k) for v, q in zip(avg["var"], avg["sqr"])]
            if self.per_group
            else [self.gain] * len(self.param_groups)
        )
        return super()._combine(k, mean, total)

    def _lr(self, group):
        """The lr handed to this step (group["lr"], bench.schedule.lr_at's) x the gain measured in it: the base
        update reads its lr here (base.GroupOptimizer._lr), so group["lr"] stays what it was handed."""
        return group["lr"] * self.gains[next(i for i, g in enumerate(self.param_groups) if g is group)]

    def diagnostics(self):
        return {**super().diagnostics(), "gain": self.gain}

    def state_dict(self):
        return {**super().state_dict(), "adascale": {**self.averages, "gain": self.gain, "gains": self.gains}}

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        saved = dict(state_dict.pop("adascale", {"var": 0.0, "sqr": 0.0, "weight": 0.0, "gain": 1.0}))
        self.gain = saved.pop("gain")
        self.gains = saved.pop("gains", [self.gain] * len(self.param_groups))
        # checkpoints from before gain="per_group" hold one number per average
        self.averages = {
            key: [value] if isinstance(value, float) and key != "weight" else value for key, value in saved.items()
        }
        super().load_state_dict(state_dict)


def _gain(var: float, sqr: float, scale: int) -> float:
    """(var + sqr) / (var / S + sqr) within [1, S]; 1 where both are 0, S where it is not finite."""
    gain = (var + sqr) / (var / scale + sqr) if var + sqr > 0 else 1.0
    return min(max(gain, 1.0), float(scale)) if math.isfinite(gain) else float(scale)


class AdaScaleSGD(AdaScale, SGD):
    """AdaScale SGD (the paper's method): momentum SGD (sgd.py) with lr x gain. Options: AdaScale's and SGD's."""


class AdaScaleLARS(AdaScale, LARS):
    """LARS (lars.py) with lr x gain (lr sits inside LARS' momentum buffer, so the gain scales
    that step's update only). Options: AdaScale's and LARS'."""


class SimiGrad(GroupGradients):
    """Mixin: the base update unchanged, measuring SimiGrad's similarity of two halves of the
    batch for the runner's adaptive batch (recipe `adaptive_batch`): `similarity` in diagnostics(),
    the cosine between the mean gradients of the groups with even and with odd index
    (`observe(index)`: the runner numbers them over all ranks, so the halves interleave over the
    batch whatever the world size). Each half is summed on its own beside the whole sum (which the
    update takes, summed as for any optimizer) and its dot products accumulate in float64, so the
    cosine stays exact when one half is a million times the other."""

    second = "halves"
    pace = "adaptive"

    def __init__(self, params, **base):
        super().__init__(params, **base)
        self._similarity = None

    def _statistics(self, k: int) -> dict:
        even, odd = self._stats.second.split(self._n)  # observe() kept them apart
        ee, oo, eo = (torch.sum(a * b, dtype=torch.float64) for a, b in ((even, even), (odd, odd), (even, odd)))
        scale = (ee * oo).sqrt()
        self._similarity = torch.where(scale > 0, eo / scale, 0.0).clamp(-1.0, 1.0)  # 0: a half is zero
        return super()._statistics(k)

    @property
    def similarity(self) -> float | None:
        """The last step's similarity (read to the host here), None before the first step."""
        return None if self._similarity is None else float(self._similarity)

    def _diagnostic_tensors(self):
        out = super()._diagnostic_tensors()
        if self._similarity is not None:
            out["similarity"] = self._similarity
        return out


class SimiGradSGD(SimiGrad, SGD):
    """Momentum SGD (sgd.py) with SimiGrad's similarity. Options: SGD's."""


class SimiGradLARS(SimiGrad, LARS):
    """LARS (lars.py) with SimiGrad's similarity. Options: LARS'."""


class SimiGradLAMB(SimiGrad, LAMB):
    """LAMB (lamb.py; SimiGrad's own base) with SimiGrad's similarity. Options: LAMB's."""
