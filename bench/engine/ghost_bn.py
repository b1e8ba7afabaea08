"""Ghost BatchNorm (Hoffer et al. 2017; Goyal et al. 2017's 32 images a worker): `model.bn_batch`.

In training, each BatchNorm layer normalises the images of every consecutive `bn_batch` images of the model's
input with their own statistics, as if each were a micro-batch of its own; evaluation is unchanged (the running
statistics). The model interleaves its input's chunks (arrange), so that each layer's input, as it lies in memory,
is one BatchNorm input with a channel for each (chunk, channel): the fused kernel normalises all chunks in one
call without a copy (the layer costs what plain BatchNorm costs: docs/performance.md). A channels_last input is
not such a BatchNorm input (its channel for (chunk, channel) has no single stride), so it takes a forward and
backward of its own on a free view of its memory (_GhostNorm): no layout copy there either.

Two implementations, `engine.ghost_bn` (the layers' `impl`: input layout -> which): batch_norm, torch's kernel on
that view (a channels_last input copied to it and the output back), and custom, _GhostNorm on a free view of
either layout. auto, unmeasured, is the choice above per layout (bench/defaults.py: a GPU model's measured
default may differ). Both are the same mathematics (tests/test_ghost_bn.py, against F.batch_norm chunk by chunk).

Running statistics rule: a layer's input of n = j x bn_batch images updates the running statistics exactly as
j sequential micro-batches of bn_batch images would, in order: with momentum m, chunk statistics (mean_i,
unbiased var_i), i = 1..j,

    running = (1 - m)^j running + sum_i m (1 - m)^(j - i) stat_i,       num_batches_tracked += j

(momentum None, the cumulative average, steps through the chunks one by one). So a step's BatchNorm state is
that of the sequential micro-batches whatever the micro-batch (equal up to rounding: tests/test_ghost_bn.py).

A layer's input of at most bn_batch images is one ghost batch: plain BatchNorm (bitwise today's path).

Supported: torch.nn.BatchNorm2d and its subclasses whose forward is BatchNorm's (timm's BatchNormAct2d, whose
activation follows). Other normalisation layers (GroupNorm, LayerNorm, frozen or synchronised BatchNorm) are
refused in one sentence.

The batched groups pass (group_pass.py) runs the model under torch.func.vmap, where a buffer cannot be updated
in place: `deferred(model)` makes the layers hand their chunk statistics back instead, and `apply_deferred`
applies them afterwards in the order a sequential pass would have.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from bench.defaults import TODAY
from bench.models import ghost_layers


class GhostMixin:
    """The training forward of ghost BatchNorm over a BatchNorm2d class (see convert)."""

    bn_batch: int
    impl: dict  # input layout ("channels_last" | "contiguous") -> "batch_norm" | "custom" (engine.ghost_bn)
    _arranged: list  # [the model's input batch as arranged by its pre-hook (arrange), or None], shared by its layers
    _deferred: list | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        if not self.training or (n <= self.bn_batch and self._deferred is None):
            return super().forward(x)
        if n % self.bn_batch:
            raise ValueError(f"ghost BatchNorm: a batch of {n} images is not a multiple of bn_batch {self.bn_batch}")
        if self._arranged[0] != n:
            raise ValueError(
                f"ghost BatchNorm: a layer saw {n} images, its model's input {self._arranged[0]}: the "
                "chunks are arranged at the model's input, so every layer must see the model's batch"
            )
        y, stats = ghost_normalize(self, x, self._deferred is not None)
        if stats is not None:
            if self._deferred is not None:
                self._deferred.append(stats)
            else:
                update_running(self, *stats)
        if hasattr(self, "act"):  # timm's BatchNormAct2d: its dropout and activation follow the normalisation
            y = self.act(self.drop(y))
        return y


def ghost_normalize(bn: GhostMixin, x: torch.Tensor, in_vmap: bool = False):
    """Training-mode BatchNorm of each of the j = N/g chunks of x (N, C, ...) on its own, in one call of the fused
    kernel, and the chunks' (means, unbiased variances) (j, C) each, or None without running statistics.

    x comes arranged (arrange): chunk i is the images i, i + j, i + 2j, ..., so x is (g, j*C, ...) as it lies in
    memory, each (chunk, channel) a channel of its own: no copy. The kernel's running update at momentum 1 into fresh
    buffers gives the chunk statistics without another pass. A channels_last 4-D input, which that view copies (and
    the output back), goes to _GhostNorm by default: the same mathematics on a free view, no layout copy; bn.impl
    chooses per input layout (engine.ghost_bn).

    `in_vmap` (the batched groups pass, group_pass.py): buffers cannot be written in place under vmap, so the
    statistics take a pass of their own; and it works around two refusals of torch.func (torch 2.14, found
    rehearsing the GPU check on the CPU): the backward of batch_norm with a bf16 input and float32 weights under
    autocast ("expected scalar type BFloat16 but found Float"), so the input is normalised in the weights' dtype and
    cast back, as the mixed kernel computes it; and a channels_last copy, so the output keeps the layout it falls in."""
    n, c, *rest = x.shape
    g = bn.bn_batch
    j = n // g
    tracked = bn.track_running_stats and bn.running_mean is not None
    nhwc = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    custom = x.dim() == 4 and (nhwc or x.is_contiguous()) and bn.impl[_layout(nhwc)] == "custom"
    if custom and not in_vmap:
        y, mean, var = _GhostNorm.apply(x, bn.weight, bn.bias, g, bn.eps)
        return y, ((mean, var) if tracked else None)
    grouped = x.reshape(g, j * c, *rest)
    w = None if bn.weight is None else bn.weight.repeat(j)
    b = None if bn.bias is None else bn.bias.repeat(j)
    dtype = x.dtype if bn.weight is None else bn.weight.dtype
    mean = var = None
    if tracked and not in_vmap:
        mean, var = torch.zeros(j * c, dtype=dtype, device=x.device), torch.ones(j * c, dtype=dtype, device=x.device)
    mixed = in_vmap and grouped.dtype != dtype
    y = F.batch_norm(grouped.to(dtype) if mixed else grouped, mean, var, w, b, True, 1.0, bn.eps).to(x.dtype)
    y = y.reshape(x.shape)
    if nhwc and not in_vmap:  # the layout the next layer expects (the view copied it to contiguous)
        y = y.contiguous(memory_format=torch.channels_last)
    if not tracked:
        return y, None
    if in_vmap:
        with torch.no_grad():
            var, mean = torch.var_mean(grouped.detach(), dim=[0, *range(2, grouped.dim())], correction=1)
    return y, (mean.view(j, c), var.view(j, c))


def _layout(nhwc: bool) -> str:
    return "channels_last" if nhwc else "contiguous"


def _chunks(t: torch.Tensor, g: int, nhwc: bool) -> torch.Tensor:
    """An arranged (N, C, H, W), channels_last or contiguous, as the free view (g, j, H*W, C): chunk i of position
    a at [a, i] (channels_last: a contiguous view; contiguous: one with H*W innermost)."""
    n, c, h, w = t.shape
    if nhwc:
        return t.permute(0, 2, 3, 1).view(g, n // g, h * w, c)
    return t.view(g, n // g, c, h * w).transpose(2, 3)


def _images(v: torch.Tensor, shape: torch.Size, nhwc: bool) -> torch.Tensor:
    """_chunks' inverse: a (g, j, H*W, C) laid out as _chunks gives it, as the (N, C, H, W) it lies as."""
    n, c, h, w = shape
    return v.view(n, h, w, c).permute(0, 3, 1, 2) if nhwc else v.transpose(2, 3).view(n, c, h, w)


def _sum(v: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """v (g, j, H*W, C) summed per (chunk, channel), (1, j, 1, C): over H*W, then g (the CPU's reduction over two
    dimensions at once took 0.63 ms at 64 x 16 x 28 x 28, these two 0.19)."""
    return v.sum(2, keepdim=True, dtype=dtype).sum(0, keepdim=True)


def _moments(v: torch.Tensor, dtype: torch.dtype, welford: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(biased variance, mean) of v (g, j, H*W, C) per (chunk, channel), (1, j, 1, C) each, in dtype. welford: one
    pass of torch.var_mean (a GPU's); else two passes, a mean then the squared deviations' (the CPU's var_mean is a
    scalar loop: 6-10 ms at 64 x 16 x 28 x 28, the two passes under 1 ms)."""
    m = v.shape[0] * v.shape[2]
    if welford:
        return torch.var_mean(v.to(dtype), dim=(0, 2), correction=0, keepdim=True)
    mean = _sum(v, dtype) / m
    return _sum(torch.sub(v, mean).square_()) / m, mean  # v - mean in dtype by type promotion: the cast is folded in


class _GhostNorm(torch.autograd.Function):
    """Ghost BatchNorm of an arranged x (N, C, H, W), channels_last or contiguous, in bn_batch g: each (chunk i,
    channel c) normalised over its M = g*H*W values of the free view (g, j, H*W, C), with BatchNorm's gradient;
    returns (y, chunk means (j, C), unbiased variances (j, C)). Statistics and per-channel terms in float32 at least
    (the weights' dtype), y and dx in x's dtype and layout, each one elementwise pass: addcmul, which computes in its
    operands' promoted dtype and casts on writing, always into out= (CUDA autocast's promote policy for addcmul would
    copy a bf16 operand to float32 first; it leaves the out= form alone). Eager torch has no fused reduction of a product nor an
    affine map of two tensors, so the backward materialises dy*x and dy*A + Cc: 3 reads and 2 writes of x's size
    more than torch's kernel; and it takes sum(dy*(x - mean)) as sum(dy*x - mean*sum(dy)/M), which loses
    ~|mean|/std of float32's precision to cancellation where the kernel does not. No double backward
    (once_differentiable)."""

    @staticmethod
    def forward(ctx, x, weight, bias, g: int, eps: float):
        nhwc = not x.is_contiguous()  # channels_last (ghost_normalize sends no other layout)
        v = _chunks(x, g, nhwc)
        m = v.shape[0] * v.shape[2]
        if m == 1:  # F.batch_norm's refusal, in its words
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {x.shape}")
        dtype = torch.promote_types(x.dtype, torch.float32)  # float32 at least, and the weights' dtype
        dtype = dtype if weight is None else torch.promote_types(dtype, weight.dtype)
        var, mean = _moments(v, dtype, welford=x.device.type != "cpu")
        rstd = (var + eps).rsqrt()
        scale = rstd if weight is None else rstd * weight.to(dtype)
        shift = -mean * scale if bias is None else bias.to(dtype) - mean * scale
        y = torch.addcmul(shift, v, scale, out=torch.empty_like(v))
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.g, ctx.nhwc, ctx.bias_dtype = g, nhwc, None if bias is None else bias.dtype
        stats = mean.view(v.shape[1], -1), (var * (m / (m - 1))).view(v.shape[1], -1)
        ctx.mark_non_differentiable(*stats)
        return _images(y, x.shape, nhwc), *stats

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, _mean, _var):
        x, weight, mean, rstd = ctx.saved_tensors
        fmt = torch.channels_last if ctx.nhwc else torch.contiguous_format
        v, dyv = _chunks(x, ctx.g, ctx.nhwc), _chunks(dy.contiguous(memory_format=fmt), ctx.g, ctx.nhwc)
        m = v.shape[0] * v.shape[2]
        sum_dy = _sum(dyv, mean.dtype)
        # dy*x in mean's dtype (a bf16 product is exact in float32) by addcmul's type promotion
        t = torch.addcmul(-mean * sum_dy / m, dyv, v, out=torch.empty_like(v, dtype=mean.dtype))
        sum_dy_xhat = rstd * _sum(t)
        dx = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # dx = dy*A + x*B + Cc, per (chunk, channel) A, B, Cc; t's memory reused
            a = rstd if weight is None else rstd * weight.to(mean.dtype)
            b = -a * rstd * sum_dy_xhat / m
            dxv = torch.addcmul(-a * sum_dy / m - b * mean, dyv, a, out=t)
            dxv = dxv.addcmul_(v, b) if dxv.dtype == x.dtype else torch.addcmul(dxv, v, b, out=torch.empty_like(v))
            dx = _images(dxv, x.shape, ctx.nhwc)
        if ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xhat.sum(dim=(0, 1, 2)).to(weight.dtype)  # over the chunks
        if ctx.needs_input_grad[2]:
            grad_bias = sum_dy.sum(dim=(0, 1, 2)).to(ctx.bias_dtype)
        return dx, grad_weight, grad_bias, None, None


def arrange(x: torch.Tensor, g: int) -> torch.Tensor:
    """The batch with its chunks of g consecutive images interleaved: image i*g + a moves to a*j + i (j = N/g)."""
    return x.unflatten(0, (-1, g)).transpose(0, 1).flatten(0, 1)


def unarrange(x: torch.Tensor, g: int) -> torch.Tensor:
    """arrange's inverse: the model's output back in the order of its input."""
    return x.unflatten(0, (g, -1)).transpose(0, 1).flatten(0, 1)


@torch.no_grad()
def update_running(bn: nn.modules.batchnorm._BatchNorm, means: torch.Tensor, variances: torch.Tensor) -> None:
    """The running statistics after the chunks (rows of means, variances) in order: the module docstring's rule."""
    j = means.shape[0]
    if bn.momentum is None:  # cumulative average: 1/t per chunk, t the chunks seen
        for mean, var in zip(means, variances):
            bn.num_batches_tracked.add_(1)
            f = 1.0 / float(bn.num_batches_tracked)
            bn.running_mean.mul_(1 - f).add_(mean, alpha=f)
            bn.running_var.mul_(1 - f).add_(var, alpha=f)
        return
    m = bn.momentum
    weights = torch.tensor([m * (1 - m) ** (j - 1 - i) for i in range(j)], dtype=means.dtype, device=means.device)
    bn.running_mean.mul_((1 - m) ** j).add_((weights @ means).to(bn.running_mean.dtype))
    bn.running_var.mul_((1 - m) ** j).add_((weights @ variances).to(bn.running_var.dtype))
    if bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(j)


_CLASSES: dict[type, type] = {}


def _ghost_class(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Ghost{cls.__name__}", (GhostMixin, cls), {"__module__": __name__})
    return _CLASSES[cls]


def convert(model: nn.Module, bn_batch: int, model_name: str, impl: dict | None = None) -> nn.Module:
    """Make every BatchNorm2d layer of `model` a ghost BatchNorm of `bn_batch` images (in place; state_dict keys
    and values unchanged), the model arranging its training input into interleaved chunks and its output back
    (hooks: a model's images meet only per-image operations before each BatchNorm); refuses other normalisation
    layers (check). `impl`: input layout -> implementation (defaults.resolve's ghost_bn; default: TODAY's)."""
    model._ghost_arranged = arranged = [None]  # an attribute, not a closure, so that a deepcopy shares its own
    for bn in ghost_layers(model, model_name):
        bn.__class__ = _ghost_class(type(bn))
        bn.bn_batch, bn._arranged, bn.impl = bn_batch, arranged, dict(impl or TODAY["engine.ghost_bn"])
    model._ghost_bn_batch = bn_batch
    model.register_forward_pre_hook(_arrange_input)
    model.register_forward_hook(_unarrange_output)
    return model


def _arranges(model: nn.Module) -> bool:
    n, g = model._ghost_arranged[0], model._ghost_bn_batch
    return model.training and n > g and n % g == 0


def _arrange_input(model: nn.Module, args: tuple):
    model._ghost_arranged[0] = args[0].shape[0]
    if _arranges(model):
        return (arrange(args[0], model._ghost_bn_batch), *args[1:])


def _unarrange_output(model: nn.Module, args: tuple, out: torch.Tensor):
    if _arranges(model):
        return unarrange(out, model._ghost_bn_batch)


def layers(model: nn.Module) -> list[GhostMixin]:
    return [m for m in model.modules() if isinstance(m, GhostMixin)]


@contextlib.contextmanager
def deferred(model: nn.Module):
    """Within: the ghost layers collect their chunk statistics (yielded: {layer index: [(means, vars), ...]})
    rather than updating their buffers, and normalise even a single chunk themselves (no in-place update)."""
    found = layers(model)
    collected = {}
    for i, layer in enumerate(found):
        layer._deferred = collected.setdefault(str(i), [])
    try:
        yield collected
    finally:
        for layer in found:
            layer._deferred = None


def apply_deferred(model: nn.Module, collected: dict) -> None:
    """Apply what `deferred` collected, with a leading groups dimension (vmap's): per layer, its calls' chunks
    (groups, chunks, C) in order, group by group, as the sequential pass would."""
    found = layers(model)
    for key, calls in collected.items():
        layer = found[int(key)]
        if len(calls) == 1:  # called once a group (no shared layer): one update over all chunks, group-major
            update_running(layer, calls[0][0].flatten(0, 1), calls[0][1].flatten(0, 1))
            continue
        for group in range(calls[0][0].shape[0]) if calls else ():
            for means, variances in calls:
                update_running(layer, means[group], variances[group])
