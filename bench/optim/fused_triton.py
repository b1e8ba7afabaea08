"""VRGD's fused GPU kernels in Triton: the same two calls, arithmetic and results as csrc/vrgd_cpu.cpp.

Every kernel runs over one table of chunks of BLOCK elements covering all parameter tensors (tensor
index, start), so a VRGD-LARS step is three launches whatever the number of tensors:
    A: per chunk, the sums of r / k, mean^2, s2 and w^2       (per-tensor totals: index_add_)
    B: per chunk, ||g_vr||^2 (only for trust_grad "vr")
    C: the LARS update on g_vr with each tensor's lr x trust, s1 = mean, the clipped and dead counts
and the factors of the other variants two (A without w, then the factors into s2).
The trust ratios stay on the device, and the host's tables reach it by copies that do not wait (to_device):
no host synchronisation in a step or an observe().

NOT YET RUN ON A GPU: the tests run these kernels in Triton's interpreter (TRITON_INTERPRET=1, on
CPU tensors) against the eager optimizer; their speed and their compiled code are unverified, so
the optimizers use them only with `fused: true` (fused.py).
"""

import functools

import torch
import triton
import triton.language as tl

from .lars import trust_ratio

BLOCK = 4096


@triton.jit
def _chunk(chunk_tensor, chunk_start, numels, offsets, BLOCK: tl.constexpr):
    """This program's tensor, its element indices and mask, and their positions in the statistics."""
    c = tl.program_id(0)
    t = tl.load(chunk_tensor + c)
    idx = tl.load(chunk_start + c) + tl.arange(0, BLOCK).to(tl.int64)
    mask = idx < tl.load(numels + t)
    return c, t, idx, mask, tl.load(offsets + t) + idx


@triton.jit
def _ratio(s1, s2, inv_k, k, k_eps):
    """(r / k, mean) per coordinate, as ratio() in vrgd_cpu.cpp."""
    mean = s1 * inv_k
    return mean * mean / (tl.maximum(s2 - k * mean * mean, 0.0) + k_eps), mean


@triton.jit
def _store_counts(partial, c, r_k, r, mask, gamma):
    """The chunk's live coordinates clipped at gamma (r after normalising) and its dead ones (r_k == 0, before),
    as factor() in the .cpp."""
    tl.store(partial + 2 * c, tl.sum(tl.where(mask & (r < gamma) & (r_k > 0), 1.0, 0.0), axis=0))
    tl.store(partial + 2 * c + 1, tl.sum(tl.where(mask & (r_k == 0), 1.0, 0.0), axis=0))


@triton.jit
def _observe(stats, n, grads, chunk_tensor, chunk_start, numels, offsets, FIRST: tl.constexpr, BLOCK: tl.constexpr):
    _, t, idx, mask, at = _chunk(chunk_tensor, chunk_start, numels, offsets, BLOCK)
    g = tl.load(tl.load(grads + t).to(tl.pointer_type(tl.float32)) + idx, mask=mask)
    if FIRST:
        s1, s2 = g, g * g
    else:
        s1 = tl.load(stats + at, mask=mask) + g
        s2 = tl.load(stats + n + at, mask=mask) + g * g
    tl.store(stats + at, s1, mask=mask)
    tl.store(stats + n + at, s2, mask=mask)


@triton.jit
def _pass_a(
    stats,
    n,
    weights,
    chunk_tensor,
    chunk_start,
    numels,
    offsets,
    partial,
    inv_k,
    k,
    k_eps,
    WEIGHTS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    c, t, idx, mask, at = _chunk(chunk_tensor, chunk_start, numels, offsets, BLOCK)
    s2 = tl.load(stats + n + at, mask=mask, other=0.0)
    r, mean = _ratio(tl.load(stats + at, mask=mask, other=0.0), s2, inv_k, k, k_eps)  # 0 where masked
    tl.store(partial + 4 * c, tl.sum(r, axis=0))
    tl.store(partial + 4 * c + 1, tl.sum(mean * mean, axis=0))
    tl.store(partial + 4 * c + 2, tl.sum(s2, axis=0))
    if WEIGHTS:
        w = tl.load(tl.load(weights + t).to(tl.pointer_type(tl.float32)) + idx, mask=mask, other=0.0)
        tl.store(partial + 4 * c + 3, tl.sum(w * w, axis=0))
    else:
        tl.store(partial + 4 * c + 3, 0.0)


@triton.jit
def _pass_factors(
    stats,
    n,
    chunk_tensor,
    chunk_start,
    numels,
    offsets,
    scales,
    partial,
    inv_k,
    k,
    k_eps,
    gamma,
    TIMES_MEAN: tl.constexpr,
    BLOCK: tl.constexpr,
):
    c, t, idx, mask, at = _chunk(chunk_tensor, chunk_start, numels, offsets, BLOCK)
    r, mean = _ratio(
        tl.load(stats + at, mask=mask, other=0.0), tl.load(stats + n + at, mask=mask, other=0.0), inv_k, k, k_eps
    )
    r_k, r = r, r * tl.load(scales + t)
    factor = tl.minimum(tl.maximum(r, gamma), 1.0)
    if TIMES_MEAN:
        factor = factor * mean
    tl.store(stats + at, mean, mask=mask)
    tl.store(stats + n + at, factor, mask=mask)
    _store_counts(partial, c, r_k, r, mask, gamma)


@triton.jit
def _pass_b(
    stats, n, chunk_tensor, chunk_start, numels, offsets, scales, partial, inv_k, k, k_eps, gamma, BLOCK: tl.constexpr
):
    c, t, idx, mask, at = _chunk(chunk_tensor, chunk_start, numels, offsets, BLOCK)
    r, mean = _ratio(
        tl.load(stats + at, mask=mask, other=0.0), tl.load(stats + n + at, mask=mask, other=0.0), inv_k, k, k_eps
    )
    g = tl.minimum(tl.maximum(r * tl.load(scales + t), gamma), 1.0) * mean
    tl.store(partial + c, tl.sum(g * g, axis=0))


@triton.jit
def _pass_c(
    stats,
    n,
    weights,
    buffers,
    chunk_tensor,
    chunk_start,
    numels,
    offsets,
    scales,
    steps,
    decays,
    momenta,
    partial,
    inv_k,
    k,
    k_eps,
    gamma,
    BLOCK: tl.constexpr,
):
    c, t, idx, mask, at = _chunk(chunk_tensor, chunk_start, numels, offsets, BLOCK)
    r, mean = _ratio(
        tl.load(stats + at, mask=mask, other=0.0), tl.load(stats + n + at, mask=mask, other=0.0), inv_k, k, k_eps
    )
    r_k, r = r, r * tl.load(scales + t)
    g = tl.minimum(tl.maximum(r, gamma), 1.0) * mean
    w_at = tl.load(weights + t).to(tl.pointer_type(tl.float32)) + idx
    v_at = tl.load(buffers + t).to(tl.pointer_type(tl.float32)) + idx
    w = tl.load(w_at, mask=mask)
    v = tl.load(momenta + t) * tl.load(v_at, mask=mask) + tl.load(steps + t) * (g + tl.load(decays + t) * w)
    tl.store(v_at, v, mask=mask)
    tl.store(w_at, w - v, mask=mask)
    tl.store(stats + at, mean, mask=mask)
    _store_counts(partial, c, r_k, r, mask, gamma)


def to_device(values, device, dtype=torch.int64):
    """A host table (a list or a CPU tensor) on the device, copied without waiting for the device: CUDA stages a
    pageable copy before the call returns (torch.tensor(..., device=...) and a blocking .to() synchronise)."""
    table = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    return table.to(device, non_blocking=True)


@functools.lru_cache(maxsize=8)
def _chunks(numels: tuple, device: torch.device):
    """(chunk -> tensor index, chunk -> first element, numel per tensor) on the device."""
    tensor = [t for t, numel in enumerate(numels) for _ in range(0, numel, BLOCK)]
    start = [s for numel in numels for s in range(0, numel, BLOCK)]
    return to_device(tensor, device), to_device(start, device), to_device(list(numels), device)


def _pointers(tensors, device):
    return to_device([x.data_ptr() for x in tensors], device)


def observe(stats, grads, offsets, first: bool) -> None:
    """As observe() in vrgd_cpu.cpp: add one group's gradients (dense fp32, their parameter's layout)."""
    n = (stats.numel() - 2) // 2
    tensor, start, numels = _chunks(tuple(g.numel() for g in grads), stats.device)
    _observe[(len(tensor),)](
        stats,
        n,
        _pointers(grads, stats.device),
        tensor,
        start,
        numels,
        to_device(offsets, stats.device),
        FIRST=first,
        BLOCK=BLOCK,
    )


class _Layout:
    """The chunk table of a parameter list and the kernels' common arguments."""

    def __init__(self, stats, numel_list: tuple, k: int, eps: float):
        self.device, self.n, self.count = stats.device, (stats.numel() - 2) // 2, len(numel_list)
        self.tensor, start, self.numels = _chunks(numel_list, self.device)
        offsets = to_device(torch.tensor([0, *numel_list[:-1]], dtype=torch.int64).cumsum(0), self.device)
        self.grid, self.chunks = (len(self.tensor),), (self.tensor, start, self.numels, offsets)
        self.gsnr = dict(inv_k=1.0 / k, k=float(k), k_eps=k * eps)

    def partial(self, width: int):
        return torch.empty(len(self.tensor), width, device=self.device)

    def per_tensor(self, partial):
        """Chunk sums -> tensor sums, in float64."""
        zeros = torch.zeros(self.count, partial.shape[1], dtype=torch.float64, device=self.device)
        return zeros.index_add_(0, self.tensor, partial.double())

    def inverse_means(self, r_sum):
        """1 / mean(r / k) per tensor, 0 where r == 0, capped at the largest float (as inverse_mean in the .cpp)."""
        r_mean = r_sum / self.numels
        return torch.where(r_mean > 0, 1 / r_mean, 0.0).clamp(max=torch.finfo(torch.float32).max).float()


def vrgd_lars_step(stats, params, bufs, hyper, k: int, eps: float, gamma: float, trust_vr: bool):
    """As vrgd_lars_step() in vrgd_cpu.cpp (hyper[t] = lr, weight_decay, eta, eps, adapt, clip, momentum);
    returns the same per-tensor table, on the device."""
    at = _Layout(stats, tuple(p.numel() for p in params), k, eps)
    weights, buffers = _pointers(params, at.device), _pointers(bufs, at.device)
    partial = at.partial(4)
    _pass_a[at.grid](stats, at.n, weights, *at.chunks, partial, **at.gsnr, WEIGHTS=True, BLOCK=BLOCK)
    sums = at.per_tensor(partial)
    scales = at.inverse_means(sums[:, 0])
    vr_sq = sums[:, 1]
    if trust_vr:
        partial = at.partial(1)
        _pass_b[at.grid](stats, at.n, *at.chunks, scales, partial, **at.gsnr, gamma=gamma, BLOCK=BLOCK)
        vr_sq = at.per_tensor(partial)[:, 0]
    clip = bool(hyper[0, 5])  # LARC or LARS: one optimizer, one rule (hyper is the host's table: no device read)
    lr, wd, eta, trust_eps, adapt, _, momentum = to_device(hyper, at.device).unbind(1)
    trust = torch.where(adapt > 0, trust_ratio(sums[:, 3].sqrt(), vr_sq.sqrt(), lr, wd, eta, trust_eps, clip), 1.0)
    counts = at.partial(2)
    _pass_c[at.grid](
        stats,
        at.n,
        weights,
        buffers,
        *at.chunks,
        scales,
        (lr * trust).float(),
        wd.float(),
        momentum.float(),
        counts,
        **at.gsnr,
        gamma=gamma,
        BLOCK=BLOCK,
    )
    counts = at.per_tensor(counts)
    return torch.cat([sums[:, :3], counts[:, :1], sums[:, 3:], vr_sq[:, None], trust[:, None], counts[:, 1:]], dim=1)


def vrgd_factors(stats, counts, k: int, eps: float, gamma: float, times_mean: bool):
    """As vrgd_factors() in vrgd_cpu.cpp: s1 = mean, s2 = the factors (x mean when `times_mean`); returns
    per tensor (sum of r / k, ||mean||^2, sum of s2, live coordinates clipped, dead ones), on the device."""
    at = _Layout(stats, tuple(counts.tolist()), k, eps)
    partial = at.partial(4)
    _pass_a[at.grid](stats, at.n, stats, *at.chunks, partial, **at.gsnr, WEIGHTS=False, BLOCK=BLOCK)
    sums = at.per_tensor(partial)
    counts = at.partial(2)
    _pass_factors[at.grid](
        stats,
        at.n,
        *at.chunks,
        at.inverse_means(sums[:, 0]),
        counts,
        **at.gsnr,
        gamma=gamma,
        TIMES_MEAN=times_mean,
        BLOCK=BLOCK,
    )
    return torch.cat([sums[:, :3], at.per_tensor(counts)], dim=1)
