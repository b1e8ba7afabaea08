"""The group interface every bench optimizer shares, and the hyperparameter rules.

The runner drives every optimizer the same way. Per step, for each group (a
micro-batch, or the share of one device): forward, `loss.backward()` on the
mean loss of that group, `opt.observe()`; then `opt.step()`; then
`opt.zero_grad(set_to_none=True)`.

- `observe(index)` takes the group's position among all the step's groups, over
  all ranks in rank-major order (default: the count observed so far on this
  rank); only the optimizers that split the groups in halves (SimiGrad's) use it.
- Plain optimizers (`reduces_gradients = False`) let `p.grad` accumulate the sum
  of the groups' gradients; `observe()` only counts and `step()` divides `p.grad`
  by the count. Without any `observe()` call `p.grad` is used as it is, so they
  are ordinary `torch.optim` optimizers outside the suite. The runner lets DDP
  all-reduce `p.grad` on the last group.
- Optimizers that keep the groups apart (`reduces_gradients = True`: VRGD in
  vrgd.py, AdaScale and SimiGrad's in groups.py) need every group's gradient on
  its own and all-reduce their statistics themselves.

`step()` uses the gradient tensors it is given as scratch space (plain
optimizers: `p.grad`), as the runner zeroes them right after.

`observe()` and `step()` read nothing back to the host (no `.item()`, `float(t)`, `.tolist()`, no Python `if` on a
tensor's value): on a GPU each such read waits for every queued kernel. Per-tensor numbers (norms, trust ratios,
GSNR statistics) stay tensors on the device, zero-norm cases are `torch.where`s, and `diagnostics()` reads the
last step's afterwards. The exceptions are declared: AdaScale reads its gain (the step's lr and the schedule's
progress are host numbers), and under torch.distributed GroupGradients reads k, the groups over all ranks, after
its all-reduce. tests/test_optim_sync.py holds every bench optimizer to it on the CPU and on a GPU.

One step, and the hooks a subclass overrides (typed stubs on GroupOptimizer, in call order):

    observe(index)                  per group, after its backward: count it; GroupGradients adds it
                                    to the Statistics buffer
    step()
     └ _apply()                     every param group's update (VRGD-LARS' fused whole step overrides it)
        └ _gradients()              yields (group, params, grads): the mean gradient each update takes
           │ plain:                 p.grad / groups
           │ GroupGradients (groups.py):
           ├ _reduce() -> k         all-reduce the Statistics once; k groups over all ranks
           ├ _statistics(k)         the step's measurement: g_bar, grad_var, grad_sqnorm (SimiGrad:
           │                        the halves' cosine first; VRGD fused: the GSNR factors in one kernel)
           └ _combine(k, mean, total) -> {param: gradient}
                                    the step's adjustment of the gradient the base update takes
                                    (AdaScale: its gain; VRGD: g_vr = r * g_bar)
        └ _update(group, params, grads, trust_grads)
                                    the base optimizer's update of one param group (SGD, LARS, ...)
           └ _lr(group) -> lr       the lr that update applies (it never reads group["lr"] itself): the lr
                                    it was handed (group["lr"], the runner's from bench.schedule.lr_at)
                                    times the optimizer's own factor of the step (AdaScale: its gain)

What the runner reads is declared on the class, never guessed from its name: `reduces_gradients`,
`pace` ("fixed"; "scale_invariant": the schedule advances by `gain` per step, AdaScale;
"adaptive": the batch follows `similarity`, SimiGrad), and the values `gain` and `similarity`.
"""

from dataclasses import dataclass
from typing import Iterator, Literal

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from bench import catalog

RULES = catalog.RULES  # option -> (accepts(value), what is allowed): the catalog's, torch-free
validate = catalog.validate_options  # raises UserError for the first option whose value its rule rejects


def norms(tensors: list[Tensor]) -> Tensor:
    """L2 norm of each tensor, as one vector on their device (one multi-tensor kernel)."""
    return torch.stack(torch._foreach_norm(tensors))


CPU_RUN_BYTES = 2**21  # by_kind's runs on the CPU: the tensors of a run stay in cache from one foreach op to the next


def by_kind(*lists: list[Tensor]) -> list[tuple[list[Tensor], ...]]:
    """The lists cut into runs of one device and dtype (the first list's tensors'), each in its order: a foreach op is
    one multi-tensor kernel over tensors of one kind, as torch.optim groups them. On the CPU, where a foreach op is
    a loop over its tensors, a run also ends after CPU_RUN_BYTES of the first list, so the next op of an update finds
    the run's tensors still in cache (LARS' step on ResNet-50's tensors: about 1.2 x faster than in one run)."""
    runs, open_runs = [], {}  # (device, dtype) -> [positions, bytes] of its run being filled
    for i, t in enumerate(lists[0]):
        kind = (t.device, t.dtype)
        if kind not in open_runs or (t.device.type == "cpu" and open_runs[kind][1] >= CPU_RUN_BYTES):
            open_runs[kind] = [[], 0]
            runs.append(open_runs[kind][0])
        open_runs[kind][0].append(i)
        open_runs[kind][1] += t.numel() * t.element_size()
    return [tuple([items[i] for i in run] for items in lists) for run in runs]


def laid_out_like(w: Tensor, g: Tensor) -> Tensor:
    """g with the strides of w (a copy only when they differ): torch's fused kernels walk memory, not indices."""
    return g if g.stride() == w.stride() else torch.empty_like(w).copy_(g)


def views(flat, params) -> dict:
    """One view of `flat` per parameter, with its shape and strides (parameters are dense tensors)."""
    views, offset = {}, 0
    for p in params:
        views[p] = flat[offset : offset + p.numel()].as_strided(p.shape, p.stride())
        offset += p.numel()
    return views


def noise(sq_norms_sum: Tensor, mean_sq_norm: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Unbiased gradient-noise statistics of k groups (McCandlish et al. 2018; AdaScale's `var`, `sqr`):

        local       = (1/k) sum_d ||g_d||^2,   total = ||g_bar||^2
        grad_var    = (local - total) * k / (k - 1)     E||g_d - G||^2: the noise of one group's gradient
        grad_sqnorm = total - grad_var / k              |G|^2 of the true gradient

    `sq_norms_sum` = sum_d ||g_d||^2 and `mean_sq_norm` = ||g_bar||^2 as 0-d tensors; returns 0-d
    fp64 tensors (the subtraction cancels: fp32 would keep few digits). With b samples per group,
    the per-sample noise trace is tr(Sigma) = b * grad_var and the simple noise scale
    B_simple = b * grad_var / grad_sqnorm (the runner logs both)."""
    local, total = sq_norms_sum.double() / k, mean_sq_norm.double()
    var = (local - total) * (k / (k - 1))
    return var, total - var / k


@dataclass
class Statistics:
    """Named views over the one flat buffer that observe() fills and step() all-reduces once:
    [sums | second | sq_norms | count], fp32 (fp64 for fp64 parameters)."""

    flat: Tensor
    sums: Tensor  # sum_d g_d
    second: (
        Tensor  # sum_d g_d^2 per coordinate (VRGD: then its factors), [even groups' sum | odd's] (SimiGrad), or empty
    )
    scalars: Tensor  # [sq_norms, count], the two below
    sq_norms: Tensor  # 0-d: sum_d ||g_d||^2
    count: Tensor  # 0-d: k, the number of groups (written before the all-reduce)

    @classmethod
    def zeros(cls, n: int, second: int, dtype: torch.dtype, device) -> "Statistics":
        """n: the parameters' elements; second: the length of `second` (0, n or 2n)."""
        flat = torch.zeros(n + second + 2, dtype=dtype, device=device)
        scalars = flat[-2:]
        return cls(flat, flat[:n], flat[n : n + second], scalars, scalars[0], scalars[1])


class GroupOptimizer(Optimizer):
    """Base class: the group interface (observe, step, diagnostics) and the hooks of one step (module
    docstring). A base optimizer implements `_update`; a mixin (groups.py, vrgd.py) the others."""

    reduces_gradients = False  # keeps the groups apart and all-reduces its own statistics (the runner's DDP does not)
    swaps_weights = False  # evaluates other weights than it trains: eval() / train() swap them (Schedule-Free)
    pace: Literal["fixed", "scale_invariant", "adaptive"] = "fixed"  # how the runner advances the schedule
    gain = 1.0  # schedule progress of the last step ("scale_invariant": AdaScale's gain)
    similarity = None  # the last step's similarity of the two halves ("adaptive": SimiGrad), None before one
    step_paths: tuple[str, ...] = ("eager",)  # how its update can run (use_step): LARS has a "compiled" one too
    step_path = "eager"

    def __init__(self, params, defaults: dict):
        validate(defaults)
        super().__init__(params, defaults)
        self._groups = 0  # groups observed since the last step
        self._trust: list[Tensor] = []  # per-tensor trust ratios of the last step (LARS, LAMB)
        self._noise: tuple[Tensor, Tensor] | None = None  # (grad_var, grad_sqnorm) of the last step, see noise()
        self._first_sq: Tensor | None = None  # ||g_1||^2 of the step's first observation (plain optimizers' noise)
        self._first_groups = 1  # the groups in that observation

    def use_step(self, path: str) -> None:
        """Run the update as `path`, one of step_paths (the runner's engine.optimizer_step): "eager", the code as
        written; "compiled", the same under torch.compile (LARS). The same mathematics, rounded differently."""
        if path not in self.step_paths:
            raise ValueError(f"{type(self).__name__} has no {path} step (it has: {', '.join(self.step_paths)})")
        self.step_path = path

    def observe(self, index: int | None = None, groups: int = 1) -> None:
        """Count `groups` groups (a micro-batch of several, one pass: ghost BatchNorm); p.grad keeps accumulating
        their sum (`index` is not needed here). The first observation's mean ||g||^2 is kept for the noise scale
        (_statistics): p.grad holds that observation alone now."""
        if self._groups == 0:
            grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
            self._first_sq = norms(grads).double().square().sum() / groups**2 if grads else None
            self._first_groups = groups
        self._groups += groups

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._trust = []
        self._apply()
        self._groups = 0
        return loss

    def _apply(self) -> None:
        """Called by step(): the update of every param group (a fused whole step overrides this)."""
        for group, params, grads in self._gradients():
            if params:
                self._update(group, params, grads)

    def _gradients(self) -> Iterator[tuple[dict, list[Tensor], list[Tensor]]]:
        """Called by _apply(): yields (group, params, mean gradients) per param group, the gradients the
        hooks below give: _statistics(_reduce())."""
        grads = self._statistics(self._reduce())
        for group in self.param_groups:
            params = [p for p in group["params"] if p in grads]
            yield group, params, [grads[p] for p in params]

    def _update(
        self, group: dict, params: list[Tensor], grads: list[Tensor], trust_grads: list[Tensor] | None = None
    ) -> None:
        """Called by _apply() per param group: one step of `params` from the mean gradients `grads` (scratch
        space); `trust_grads`, where a trust ratio reads other gradients' norms (VRGD-LARS), else grads."""
        raise NotImplementedError

    def _lr(self, group: dict) -> float:
        """Called by _update(): the lr of this step's update of `group`, the lr it was handed (group["lr"], which
        the runner sets every step from bench.schedule.lr_at, or any torch scheduler outside the suite) times the
        optimizer's own factor, measured in this step: 1 here, AdaScale's gain in groups.py. group["lr"] is never
        changed by the step."""
        return group["lr"]

    # The hooks a plain optimizer leaves as they are (it implements _update only) and GroupGradients (groups.py),
    # which keeps the groups apart, overrides; declared here so the whole step reads from one place.
    def _reduce(self) -> int:
        """Called by _gradients() first: returns k, the groups over all ranks. Here: this rank's observed
        groups, nothing to reduce (DDP all-reduced p.grad). GroupGradients: all-reduces the Statistics once."""
        return self._groups

    def _statistics(self, k: int) -> dict[Tensor, Tensor]:
        """Called by _gradients() after _reduce: the step's measurement, returning _combine's gradient per
        parameter. Here: the mean gradient, p.grad (the sum of k groups) divided by k in place.
        GroupGradients: g_bar into the sums and p.grad, grad_var and grad_sqnorm."""
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        self._noise = None
        if k > 1 and grads:
            torch._foreach_div_(grads, k)
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        chunks = k * world / self._first_groups  # the step's batch in units of the first observation's m groups
        if chunks > 1 and grads and self._first_sq is not None:
            # The noise from two batch sizes (McCandlish et al. 2018, app. A.1): this rank's first observation (its
            # own under DDP's no_sync) of m groups and the mean of all groups over all ranks; noise() over chunks
            # of m groups gives a chunk's noise, m times smaller than one group's.
            var, sqnorm = noise(self._first_sq * chunks, norms(grads).double().square().sum(), chunks)
            self._noise = (var * self._first_groups, sqnorm)
        return self._combine(k, None, None)

    def _combine(self, k: int, mean: Tensor | None, total: Tensor | None) -> dict[Tensor, Tensor]:
        """Called by _statistics (mean: g_bar flat, total: ||g_bar||^2; None for a plain optimizer): returns the
        gradient the base update takes per parameter. Here and in GroupGradients: p.grad as it is; AdaScale
        sets its gain here, VRGD its factors."""
        return {p: p.grad for group in self.param_groups for p in group["params"] if p.grad is not None}

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
        """Scalars about the last step (_diagnostic_tensors), read here (not during step) so a step never waits on
        the device, and in one transfer: a logged step waits for the device once more, not once a scalar."""
        tensors = self._diagnostic_tensors()
        if not tensors:
            return {}
        values = torch.stack([t.detach().reshape(()).to(torch.float64) for t in tensors.values()]).tolist()
        return dict(zip(tensors, values))

    def _diagnostic_tensors(self) -> dict[str, Tensor]:
        """The last step's scalars on the device: trust_min/median/max (LARS, LAMB; median = the lower middle value
        for an even count) and grad_var, grad_sqnorm (optimizers that keep the groups apart, see noise())."""
        out = {}
        if self._trust:
            trust = torch.cat(self._trust)
            out.update(trust_min=trust.min(), trust_median=trust.median(), trust_max=trust.max())
        if self._noise is not None:
            out.update(grad_var=self._noise[0], grad_sqnorm=self._noise[1])
        return out
