"""VRGD: variance-reduced gradient descent from the gradient signal-to-noise ratio (GSNR).

Paper: "Accelerating Large Batch Training via Gradient Signal to Noise Ratio (GSNR)", arXiv 2309.13681.
No official code was published: the GSNR core is the paper's Algorithm 1 (`VRGD._factors`), the
variants follow its prose. VRGD is a mixin: `VRGDLARS(VRGD, LARS)` runs LARS's own update on the
variance-reduced gradient, so every variant shares its base optimizer's code.
"""

import torch

from bench.errors import UserError

from . import fused as fused_kernels
from .adamw import AdamW
from .base import noise, validate
from .groups import GroupGradients
from .lamb import LAMB
from .lars import LARS
from .merit import MERIT
from .sgd import SGD


class VRGD(GroupGradients):
    """Mixin that feeds a base optimizer the variance-reduced gradient of the k observed groups:

        g_bar = (1/k) sum_d g_d
        var   = (1/k) sum_d g_d^2 - g_bar^2                        population variance over the k groups
        r     = g_bar^2 / (var + gsnr_eps)
        r     = clip(r / mean(r over the tensor, layer or model: gsnr_norm), gamma, 1)
        r     = p_hat,  p = b3 * p + (1 - b3) * r,  p_hat = p / (1 - b3^t)           only when beta3 > 0
        g_vr  = r * g_bar                                          the base optimizer's gradient

    Group interface: GroupGradients (groups.py) with the sums of squares: observe() adds each p.grad
    into one flat fp32 buffer [sum_d g_d | sum_d g_d^2 | ...] (2 floats per parameter element; fp64
    for fp64 parameters) and sets p.grad to None; step() needs k >= 2 groups, all-reduces the buffer
    once under torch.distributed, sets p.grad to g_bar, applies the base update with g_vr, and
    starts new statistics. The same sums give the gradient-noise statistics (base.noise) at the
    cost of two reductions.

    Every tensor gets GSNR factors, including those excluded from weight decay and trust ratios.
    All parameters must be on one device. state_dict() holds the GSNR momentum and its step
    counter but not the statistics of a step in progress: save between steps.

    Args (the OPEN choices of the paper marked):
        gamma: lower clip of the factors (default 0.1, every experiment in the paper); 1 gives back
            the base optimizer.
        gsnr_eps: added to the variance (OPEN, the paper has none; default 1e-12: inert next to
            ResNet-50 gradient variances, ~1e-8 at 64 samples a group, and it keeps zero-variance
            coordinates finite). All groups identical: var is 0 up to the rounding of the sums
            (about 1e-7 of sum_d g_d^2 in fp32), so r is large but finite and the factors lie in
            [gamma, 1], no NaN or Inf; where eps exceeds that rounding (as for fp32 gradients below
            ~1e-3) r = g_bar^2 / eps and the factors are clip(g_bar^2 / mean(g_bar^2), gamma, 1).
        beta3: GSNR momentum (0 = off). Default 0.9 for VRGDAdam and VRGDLAMB (the paper), 0 for
            VRGDSGD and VRGDLARS (OPEN: the paper names it only for Adam and LAMB). It costs one
            more fp32 tensor per parameter, kept in the optimizer state.
        gsnr_bias_correction: divide the GSNR momentum by (1 - b3^t) (OPEN; default True). The state
            holds p_hat, updated as p_hat = lerp(p_hat, r, (1 - b3) / (1 - b3^t)).
        gsnr_norm: what the mean of r that normalises the factors runs over (OPEN: Algorithm 1 loops over
            "layers"). "tensor" (default): each parameter tensor, the unit LARS and LAMB call a layer in
            MLPerf's reference and timm, so VRGD-LARS/LAMB and their trust ratios agree on it. "layer": the
            tensors of one module together (its weight and bias; parameter names from a module or
            named_parameters(), layer = the name without its last part). "model": all tensors together.
            The fused kernels normalise per tensor: with "layer" or "model" observe() stays fused and
            the factors run in the eager code (fused=true is refused).
        fused: the fused kernels (fused.py; torch.optim's `fused` convention) for observe() and the
            GSNR factors of every variant, and VRGD-LARS' whole step: null (default) uses them where
            they apply (dense fp32 CPU parameters; on GPU the Triton kernels, not yet run on a GPU,
            only with true or where bench/defaults.json measured them faster on that GPU model),
            true requires them (an error where they cannot run), false keeps the
            eager code. Both compute the same update up to fp32 rounding.
        **base: the base optimizer's arguments.
    """

    second = "squares"

    def __init__(
        self,
        params,
        *,
        gamma=0.1,
        gsnr_eps=1e-12,
        beta3=0.0,
        gsnr_bias_correction=True,
        gsnr_norm="tensor",
        fused=None,
        **base,
    ):
        validate(
            dict(
                gamma=gamma,
                gsnr_eps=gsnr_eps,
                beta3=beta3,
                gsnr_bias_correction=gsnr_bias_correction,
                gsnr_norm=gsnr_norm,
                fused=fused,
            )
        )
        super().__init__(params, **base)
        self.gamma, self.gsnr_eps, self.beta3, self.gsnr_bias_correction = gamma, gsnr_eps, beta3, gsnr_bias_correction
        self.gsnr_norm = gsnr_norm
        self._segments = self._normalisation_segments()
        if fused and gsnr_norm != "tensor":
            fused_kernels.refuse(f"gsnr_norm={gsnr_norm!r} (the fused kernels normalise per tensor)")
        self.gsnr_step = 0
        self._gsnr = None  # (clip fraction of the live coordinates, mean r, dead fraction) of the last step
        self.fused = fused
        self._refuse_foreign_hooks(VRGD, "_combine")
        self._kernels = self._pick_kernels()  # again when the statistics are allocated: the model may have moved

    def _normalisation_segments(self) -> list[int]:
        """The segment of each parameter, in the order of the statistics, over which the mean of r runs."""
        count = sum(len(group["params"]) for group in self.param_groups)
        if self.gsnr_norm != "layer":
            return list(range(count)) if self.gsnr_norm == "tensor" else [0] * count
        if not all("param_names" in group for group in self.param_groups):
            raise UserError(
                "gsnr_norm='layer' needs the parameters' names: build the optimizer from a module "
                "or from model.named_parameters()."
            )
        ids = {}  # a module's tensors share one segment; a top-level parameter is its own
        return [
            ids.setdefault(name.rpartition(".")[0] or name, len(ids))
            for group in self.param_groups
            for name in group["param_names"]
        ]

    def _pick_kernels(self):
        return fused_kernels.kernels(self.fused, [p for group in self.param_groups for p in group["params"]])

    @torch.no_grad()
    def observe(self, index=None):
        """As GroupGradients.observe, in one fused pass (the step's first group overwrites the statistics)."""
        if self._stats is None:
            self._allocate()
        if self._kernels is None:
            return super().observe(index)
        params = [p for p in self._sum if p.grad is not None]
        if not all(
            p.grad.dtype == torch.float32 and p.grad.device == p.device and p.grad.stride() == p.stride()
            for p in params
        ):
            return super().observe(index)  # a gradient laid out unlike its parameter: the eager code reads any
        first = self._groups == 0 and len(params) == len(self._sum)
        if self._groups == 0:
            self._own_gradients()
            (self._stats.scalars if first else self._stats.flat).zero_()  # first: the kernel overwrites the rest
        if params:
            offsets = torch.tensor([self._offsets[p] for p in params], dtype=torch.int64)
            self._kernels.observe(self._stats.flat, [p.grad for p in params], offsets, first)
            torch.autograd.graph.increment_version(self._stats.flat)
        for p in params:
            p.grad = None
        self._groups += 1

    def _allocate(self):
        super()._allocate()
        self._kernels = self._pick_kernels()
        self._counts = sizes = torch.tensor(self._sizes, dtype=torch.int64)  # elements per parameter, on the host
        self._offsets = dict(zip(self._sum, (sizes.cumsum(0) - sizes).tolist()))  # each parameter's segment
        segments = torch.tensor(self._segments)
        numels = torch.zeros(max(self._segments) + 1, dtype=torch.float64).index_add_(0, segments, sizes.double())
        flat = self._stats.flat
        self._segment_of = segments.to(flat.device)  # the normalisation segment of each tensor (gsnr_norm)
        self._segment_numels = numels.to(flat.device, flat.dtype)

    def _statistics(self, k: int) -> dict:
        """GroupGradients._statistics, or the fused kernel's (vrgd_factors) where it runs, which computes
        _combine's g_vr itself (a class that overrides _combine runs the eager code: _foreign_hooks)."""
        if self._kernels is None or self.gsnr_norm != "tensor" or self._foreign_hooks(VRGD, "_combine"):
            return super()._statistics(k)
        stats = self._stats
        out = self._kernels.vrgd_factors(
            stats.flat, self._counts, k, self.gsnr_eps, self.gamma, not self.beta3
        )  # sums = g_bar; second = the factors, or g_vr without momentum
        torch.autograd.graph.increment_version(stats.flat)
        self._kernel_statistics(out, k)
        if self.beta3:
            self._gsnr_momentum()
            stats.second.mul_(stats.sums)  # g_vr = r * g_bar
        return self._second

    def _foreign_hooks(self, home: type, *hooks: str) -> list[str]:
        """Those of `hooks` that this class overrides beyond `home`: a fused path written for `home` skips
        them, so such a class gets the eager code, which calls every hook (and fused=true is refused)."""
        return [hook for hook in hooks if getattr(type(self), hook) is not getattr(home, hook)]

    def _refuse_foreign_hooks(self, home: type, *hooks: str) -> None:
        if self.fused and (foreign := self._foreign_hooks(home, *hooks)):
            fused_kernels.refuse(
                f"{type(self).__name__} overrides {', '.join(foreign)}, which the fused "
                f"path of {home.__name__} does not call"
            )

    def _kernel_statistics(self, out, k: int) -> None:
        """The statistics a fused kernel returned (per tensor: sum of r / k, ||g_bar||^2, sum of s2, live
        coordinates clipped, ..., dead coordinates last): noise, GSNR diagnostics, and p.grad = g_bar (which the
        kernel left in the sums)."""
        r_sum, mean_sq, squares, clipped = out[:, :4].unbind(1)
        dead = out[:, -1].sum()
        self._noise = noise(squares.sum(), mean_sq.sum(), k)
        self._gsnr = clipped.sum() / (self._n - dead), r_sum.sum() * (k / self._n), dead / self._n
        self._mean_to_grads()

    def _combine(self, k: int, mean, total) -> dict:
        """The GSNR factors in place of sum_d g_d^2, then g_vr = r * g_bar: the base update's gradient."""
        r = self._stats.second
        self._gsnr = self._factors(mean, r, k)
        if self.beta3:
            self._gsnr_momentum()
        r.mul_(mean)  # g_vr = r * g_bar
        return self._second

    def _gsnr_momentum(self) -> None:
        """The factors in the sums' second half become p_hat (beta3 > 0)."""
        self.gsnr_step += 1
        weight = (1 - self.beta3) / (1 - self.beta3**self.gsnr_step if self.gsnr_bias_correction else 1)
        momenta = self._state(list(self._second), "gsnr_momentum", self._stats.flat.dtype)
        factors = list(self._second.values())
        torch._foreach_lerp_(momenta, factors, weight)  # p = b3 * p + (1 - b3) * r, bias-corrected
        torch._foreach_copy_(factors, momenta)

    def _factors(self, mean, sumsq, k: int):
        """The GSNR core, in place on the flat buffers (every parameter tensor, one after another).

        mean: g_bar; sumsq: sum_d g_d^2, overwritten with the factors r. A tensor whose r is 0
        everywhere (g_bar == 0) keeps r = 0 before clipping. Returns (fraction of the live coordinates
        clipped at gamma, mean of r over all coordinates before normalising, fraction of dead coordinates:
        r = 0, a gradient of 0 in every group), 0-d tensors; a dead coordinate is clipped to gamma * 0 = 0
        whatever gamma, so counting it as clipped would say nothing about the noise. The fractions are
        counted on every s-th run of 16 coordinates, about 2^20 coordinates (exact for smaller models;
        ResNet-50: every 24th run, standard error about 0.001): counting all of them was the most
        expensive pass of the step on a CPU.
        """
        r = sumsq.addcmul_(mean, mean, value=-k)  # k * var = sum_d g_d^2 - k * g_bar^2
        r.clamp_(min=0).add_(k * self.gsnr_eps)  # k * (var + eps); rounding can make var slightly negative
        torch.div(mean, r, out=r).mul_(mean)  # r / k = g_bar^2 / (k * (var + eps))
        tensors = r.split(self._sizes)
        sums = torch.stack([tensor.sum() for tensor in tensors])
        segment_sums = sums.new_zeros(len(self._segment_numels)).index_add_(0, self._segment_of, sums)
        r_mean = (segment_sums / self._segment_numels)[self._segment_of]  # per tensor: its segment's mean of r
        scale = torch.where(r_mean > 0, 1 / r_mean, 0.0).clamp(max=torch.finfo(r.dtype).max)  # 0 * inf: NaN
        stride = r.numel() >> 20  # about 2^20 coordinates counted: all of them below that
        # every stride-th run of 16 (a 64-byte cache line of fp32): a strided single read would touch every line
        sample = r if stride <= 1 else r[: r.numel() // 16 * 16].view(-1, 16)[::stride]
        dead = torch.count_nonzero(sample == 0)  # before normalising: a tiny r may round to 0 there
        torch._foreach_mul_(tensors, scale.unbind(0))  # r / mean(r)
        clipped = torch.count_nonzero(sample < self.gamma) - dead  # r >= 0: the dead are below gamma too
        r.clamp_(self.gamma, 1.0)
        return clipped / (sample.numel() - dead), sums.sum() * (k / r.numel()), dead / sample.numel()

    def _diagnostic_tensors(self):
        """Base diagnostics plus gsnr_clip_frac (fraction of the live coordinates clipped at gamma: counted
        exactly by the fused step, on about 2^20 coordinates by the eager code, see _factors; NaN when none
        is live), gsnr_r_mean (mean GSNR r over all coordinates, before normalising and clipping) and
        gsnr_dead_frac (fraction of coordinates whose gradient was 0 in every group, r = 0)."""
        out = super()._diagnostic_tensors()
        if self._gsnr is not None:
            out.update(gsnr_clip_frac=self._gsnr[0], gsnr_r_mean=self._gsnr[1], gsnr_dead_frac=self._gsnr[2])
        return out

    def state_dict(self):
        return {**super().state_dict(), "gsnr_step": self.gsnr_step}

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        self.gsnr_step = state_dict.pop("gsnr_step", 0)  # 0: a checkpoint of the base optimizer
        super().load_state_dict(state_dict)


class VRGDSGD(VRGD, SGD):
    """VR-Momentum: momentum SGD (sgd.py) on the variance-reduced gradient. Options: VRGD's and SGD's."""


STEP_HOOKS = ("_gradients", "_statistics", "_combine", "_update")  # what VRGD-LARS' fused step replaces


class VRGDLARS(VRGD, LARS):
    """VR-LARS: LARS (lars.py) on the variance-reduced gradient. Options: VRGD's, LARS's and

    trust_grad: the gradient whose norm enters LARS' trust ratio (OPEN). "vr" (default): ||g_vr||;
        LARS sees only g_vr, so a layer's step keeps LARS' size (about lr * eta * ||w||) and VRGD
        redistributes it inside the layer. "mean": ||g_bar||; the layer's step also shrinks with
        its factors.
    """

    def __init__(self, params, *, trust_grad="vr", **kwargs):
        validate({"trust_grad": trust_grad})
        super().__init__(params, **kwargs)
        self.trust_grad = trust_grad
        if self.fused and (reason := self._step_unfused()):
            fused_kernels.refuse(reason)

    def _step_unfused(self) -> str | None:
        """Why the fused step (csrc/vrgd_cpu.cpp) cannot run now; None when it can."""
        if self._kernels is None:
            return "no kernels"
        if self.beta3:
            return "beta3 > 0 (the fused step has no GSNR momentum)"
        if self.gsnr_norm != "tensor":
            return f"gsnr_norm={self.gsnr_norm!r} (the fused step normalises per tensor)"
        if any(group["nesterov"] or not group["momentum"] for group in self.param_groups):
            return "nesterov or momentum 0 (the fused step is LARS with momentum)"
        if foreign := self._foreign_hooks(VRGDLARS, *STEP_HOOKS):
            return f"{type(self).__name__} overrides {', '.join(foreign)}, which the fused step does not call"
        return None

    def _apply(self):
        """The whole step in the fused kernel where it can run (vrgd_cpu.cpp), else the eager code."""
        if self._stats is None or self._step_unfused():
            return super()._apply()
        params = list(self._sum)  # every parameter, in the order of the statistics
        bufs = self._state(params, "momentum_buffer")
        if any(v.stride() != p.stride() for p, v in zip(params, bufs)):  # loaded from a model of another layout
            return super()._apply()
        k = self._count()
        hyper = torch.tensor(
            [
                [{**group, "lr": self._lr(group), "clip": self.clip}[key] for key in fused_kernels.HYPER]
                for group in self.param_groups
                for _ in group["params"]
            ],
            dtype=torch.float64,
        )
        out = self._kernels.vrgd_lars_step(
            self._stats.flat, params, bufs, hyper, k, self.gsnr_eps, self.gamma, self.trust_grad == "vr"
        )
        for written in (*params, *bufs, self._stats.flat):  # the kernel wrote through pointers: tell autograd
            torch.autograd.graph.increment_version(written)
        self._kernel_statistics(out, k)
        trust, first = out[:, 6], 0
        for group in self.param_groups:
            if group["adapt"] and group["params"]:
                self._trust.append(trust[first : first + len(group["params"])].float())
            first += len(group["params"])

    def _update(self, group, params, grads, trust_grads=None):
        trust_grads = [p.grad for p in params] if self.trust_grad == "mean" else grads  # p.grad is g_bar here
        super()._update(group, params, grads, trust_grads)


class VRGDAdam(VRGD, AdamW):
    """VR-Adam: AdamW (adamw.py) with p_hat * g_bar fed into the moments (GSNR before the moments,
    not on the final update). GSNR momentum on: beta3 = 0.9. Options: VRGD's and AdamW's."""

    def __init__(self, params, *, beta3=0.9, **kwargs):
        super().__init__(params, beta3=beta3, **kwargs)


class VRGDLAMB(VRGD, LAMB):
    """VR-LAMB: VR-Adam then LAMB's trust ratio (lamb.py). GSNR momentum on: beta3 = 0.9.
    Options: VRGD's and LAMB's."""

    def __init__(self, params, *, beta3=0.9, **kwargs):
        super().__init__(params, beta3=beta3, **kwargs)


class VRGDMERIT(VRGD, MERIT):
    """VR-MERIT: VR-Adam's gradient then MERIT's element-wise ratio (merit.py), composed as VR-LAMB is
    (OPEN: no paper pairs them). GSNR momentum on: beta3 = 0.9. Options: VRGD's and MERIT's."""

    def __init__(self, params, *, beta3=0.9, **kwargs):
        super().__init__(params, beta3=beta3, **kwargs)
