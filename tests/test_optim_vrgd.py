"""bench.optim VRGD family: the GSNR core against a float64 reference over k explicit group gradients,
gamma = 1, zero variance, the group interface, diagnostics, and 2 ranks x 2 groups = 1 process x 4 groups."""

import math

import pytest
import torch
import torch.distributed as dist
from torch import nn

from bench import optim
from bench.errors import UserError
from tests.conftest import start_ranks
from tests.helpers import (
    LRS,
    SHAPES,
    TIGHT,
    RefAdam,
    RefLARS,
    RefSGD,
    RefVRGD,
    assert_history,
    backward,
    gradients,
    run,
    weights,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


CASES = [  # registry name, hyperparameters, reference
    ("vrgd_sgd", dict(weight_decay=0.1), lambda ws: RefVRGD(RefSGD(ws, 0.1))),
    ("vrgd_sgd", dict(weight_decay=0.1, nesterov=True, gamma=0.3, beta3=0.5),
     lambda ws: RefVRGD(RefSGD(ws, 0.1, nesterov=True), gamma=0.3, beta3=0.5)),
    ("vrgd_lars", dict(weight_decay=0.1, eta=0.05), lambda ws: RefVRGD(RefLARS(ws, 0.1, eta=0.05))),
    ("vrgd_lars", dict(weight_decay=0.1, eta=0.05, trust_grad="mean", beta3=0.9, gsnr_bias_correction=False),
     lambda ws: RefVRGD(RefLARS(ws, 0.1, eta=0.05), trust_grad="mean", beta3=0.9, bias_correction=False)),
    ("vrgd_lars", dict(weight_decay=0.1, eta=0.05, nesterov=True), lambda ws: RefVRGD(RefLARS(ws, 0.1, eta=0.05,
                                                                                              nesterov=True))),
    ("vrgd_adam", dict(weight_decay=0.1), lambda ws: RefVRGD(RefAdam(ws, 0.1), beta3=0.9)),
    ("vrgd_adam", dict(weight_decay=0.1, gsnr_eps=0.5), lambda ws: RefVRGD(RefAdam(ws, 0.1), eps=0.5, beta3=0.9)),
    ("vrgd_lamb", dict(weight_decay=0.1), lambda ws: RefVRGD(RefAdam(ws, 0.1, eps=1e-6, lamb=True), beta3=0.9)),
]  # fmt: skip


@pytest.mark.parametrize("name,hparams,make_ref", CASES)
def test_vrgd_matches_float64_reference(name, hparams, make_ref):
    ws, steps = weights(), gradients(len(LRS), k=3)
    ours, opt = run(name, ws, steps, LRS, **hparams)
    ref = make_ref(ws)
    assert_history(ours, ref.run(steps, LRS), **TIGHT)
    diag = opt.diagnostics()
    assert diag["gsnr_clip_frac"] == pytest.approx(ref.clip_frac[-1], abs=1e-6)
    assert diag["gsnr_r_mean"] == pytest.approx(ref.r_mean[-1], rel=1e-4)
    assert 0 < diag["gsnr_clip_frac"] < 1
    assert opt.reduces_gradients is True


# Tensor 4 (a bias, ndim 1) sits in the excluded param group: a layer spans both groups.
NAMES = ["a.weight", "b.weight", "b.extra", "c.weight", "a.bias"]
NORMS = {"tensor": None, "layer": [0, 1, 1, 2, 0], "model": [0, 0, 0, 0, 0]}


@pytest.mark.parametrize("gsnr_norm", NORMS)
@pytest.mark.parametrize("name,hparams,make_ref", [CASES[2], CASES[5]])
def test_gsnr_norm_matches_float64_reference(gsnr_norm, name, hparams, make_ref):
    """The mean of r over each tensor, each module (weight and bias together) or the whole model; layer c's
    gradient is 0 (its factors stay 0), layer b holds the zero weight."""
    ws, steps = weights(), gradients(len(LRS), k=3)
    ours, opt = run(name, ws, steps, LRS, names=NAMES, gsnr_norm=gsnr_norm, **hparams)
    ref = make_ref(ws)
    ref.segments = NORMS[gsnr_norm] or ref.segments
    assert_history(ours, ref.run(steps, LRS), **TIGHT)
    assert opt.diagnostics()["gsnr_clip_frac"] == pytest.approx(ref.clip_frac[-1], abs=1e-6)
    assert (
        opt.diagnostics()["gsnr_dead_frac"] == pytest.approx(ref.dead_frac[-1]) == pytest.approx(10 / 165)
    )  # tensor 3


def test_gsnr_norm_variants_differ_and_layer_needs_names():
    ws, steps = weights(), gradients(2, k=3)
    finals = [run("vrgd_sgd", ws, steps, LRS[:2], names=NAMES, gsnr_norm=norm)[0][-1] for norm in NORMS]
    for a, b in [(0, 1), (1, 2), (0, 2)]:
        assert not torch.allclose(finals[a][0], finals[b][0])  # tensor 0 shares its layer with tensor 4
    with pytest.raises(UserError, match=r"gsnr_norm='layer' needs the parameters' names"):
        run("vrgd_sgd", ws, steps, LRS[:2], gsnr_norm="layer")
    with pytest.raises(UserError, match=r"gsnr_norm='model' \(the fused kernels normalise per tensor\)"):
        run("vrgd_lars", ws, steps, LRS[:2], gsnr_norm="model", fused=True)


@pytest.mark.parametrize("gsnr_norm", ["layer", "model"])
def test_gsnr_norm_keeps_observe_fused_and_the_factors_eager(gsnr_norm):
    """fused: null with layer/model normalisation: the fused observe() and the eager factors give the eager step."""
    ws, steps = weights(dtype=torch.float32), gradients(3, k=4, dtype=torch.float32)
    fused, opt = run("vrgd_lars", ws, steps, LRS[:3], names=NAMES, gsnr_norm=gsnr_norm, weight_decay=0.1)
    eager, _ = run("vrgd_lars", ws, steps, LRS[:3], names=NAMES, gsnr_norm=gsnr_norm, weight_decay=0.1, fused=False)
    assert (
        opt._kernels is not None
        and opt._step_unfused() == f"gsnr_norm={gsnr_norm!r} (the fused step normalises per tensor)"
    )
    assert_history(fused, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3, 16, 64])
def test_vrgd_lars_matches_reference_for_k_groups(k):
    ws, steps = weights(), gradients(3, k=k)
    ours, _ = run("vrgd_lars", ws, steps, LRS[:3], weight_decay=0.1, eta=0.05)
    assert_history(ours, RefVRGD(RefLARS(ws, 0.1, eta=0.05)).run(steps, LRS[:3]), **TIGHT)


@pytest.mark.parametrize(
    "name,base", [("vrgd_sgd", "sgd"), ("vrgd_lars", "lars"), ("vrgd_adam", "adamw"), ("vrgd_lamb", "lamb")]
)
def test_gamma_one_gives_back_the_base_optimizer(name, base):
    ws, steps = weights(dtype=torch.float32), gradients(4, k=4, dtype=torch.float32)
    ours, _ = run(name, ws, steps, LRS[:4], weight_decay=0.1, gamma=1.0)
    plain, _ = run(base, ws, steps, LRS[:4], weight_decay=0.1)
    assert_history(ours, plain, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [2, 5, 64])
@pytest.mark.parametrize("dtype,gsnr_eps", [(torch.float32, 1e-12), (torch.float64, 1e-6)])
def test_identical_groups_give_the_documented_factors(k, dtype, gsnr_eps):
    """Zero variance: finite factors in [gamma, 1]; clip(g^2 / mean(g^2), gamma, 1) where eps exceeds
    the rounding of the sums (fp64 sums round at ~1e-16 g^2 here; fp32 ones at ~1e-7 g^2, above 1e-12)."""
    ws, grads = weights(dtype=dtype), gradients(1, dtype=dtype)[0][0]
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, "vrgd_sgd", lr=1.0, momentum=0.0, gsnr_eps=gsnr_eps, exclude=None)
    for _ in range(k):
        backward(params, grads)
        opt.observe()
    opt.step()
    for p, w, g in zip(params, ws, grads):
        g_vr = w - p.detach()  # lr 1, no momentum, no weight decay: w -= g_vr
        torch.testing.assert_close(p.grad, g)  # p.grad holds the mean gradient after step()
        assert torch.isfinite(g_vr).all()
        if dtype == torch.float64:
            factors = (g**2 / (g**2).mean()).clamp(0.1, 1.0) if g.any() else torch.zeros_like(g)
            torch.testing.assert_close(g_vr, factors * g, rtol=1e-8, atol=1e-14)
        else:
            slack = 1e-5 * (1 + g.abs())  # fp32 rounding of the mean of k groups and of w - (w - g_vr)
            assert (g_vr.abs() >= 0.1 * g.abs() - slack).all() and (g_vr.abs() <= g.abs() + slack).all()
    assert all(map(torch.isfinite, torch.tensor(list(opt.diagnostics().values()))))


def test_observe_releases_p_grad_and_step_needs_two_groups():
    params = [nn.Parameter(w.clone()) for w in weights()]
    opt = optim.create(params, "vrgd_lars", lr=1.0)
    with pytest.raises(RuntimeError, match=r"needs the gradients of at least 2 groups, got 0"):
        opt.step()
    backward(params, gradients(1)[0][0])
    opt.observe()
    assert all(p.grad is None for p in params)
    with pytest.raises(RuntimeError, match=r"got 1: call observe\(\) after each group's backward"):
        opt.step()


def test_a_parameter_without_gradient_in_a_group_counts_as_zero():
    ws, (groups,) = weights(), gradients(1, k=3)
    groups[1][0] = torch.zeros(SHAPES[0], dtype=torch.float64)
    ours, _ = run("vrgd_sgd", ws, [groups], LRS[:1])
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, "vrgd_sgd", lr=LRS[0])
    for d, grads in enumerate(groups):
        backward(params, grads)
        if d == 1:
            params[0].grad = None  # unused in this group
        opt.observe()
    opt.step()
    torch.testing.assert_close(params[0].detach(), ours[0][0])


def _two_ranks(rank: int, folder: str, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=2)
    try:
        rank_steps = [groups[2 * rank : 2 * rank + 2] for groups in steps]
        history, opt = run("vrgd_lars", weights(), rank_steps, LRS[:3], weight_decay=0.1, eta=0.05, beta3=0.9)
        torch.save((history[-1], opt.diagnostics()), f"{folder}/rank{rank}.pt")
        dist.barrier()  # neither rank tears gloo down while the other still talks to it
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_of_two_groups_equal_one_process_of_four(tmp_path):
    steps = gradients(3, k=4)
    start_ranks(_two_ranks, (str(tmp_path), steps), 2)
    single, opt = run("vrgd_lars", weights(), steps, LRS[:3], weight_decay=0.1, eta=0.05, beta3=0.9)
    for rank in (0, 1):
        final, diag = torch.load(tmp_path / f"rank{rank}.pt")
        assert_history([final], [single[-1]], rtol=1e-12, atol=1e-14)
        assert diag == pytest.approx(opt.diagnostics(), rel=1e-12)


def test_clip_fraction_of_a_large_model_is_a_close_estimate():
    """Above 2^20 coordinates the clipped fraction is counted on a stride: within 0.002 of the count."""
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(3_000_000, generator=gen))]
    opt = optim.create(params, "vrgd_sgd", lr=0.1, exclude=None)
    groups = [torch.randn(3_000_000, generator=gen) + 0.3 for _ in range(4)]
    for g in groups:
        params[0].grad = g.clone()
        opt.observe()
    opt.step()
    stacked = torch.stack(groups).double()
    r = stacked.mean(0) ** 2 / (stacked.var(0, unbiased=False) + 1e-12)
    exact = float(((r / r.mean()) < 0.1).double().mean())
    assert 0.05 < exact < 0.95
    assert opt.diagnostics()["gsnr_clip_frac"] == pytest.approx(exact, abs=0.002)


@pytest.mark.parametrize("k", [4, 8, 32])
def test_pure_noise_clips_the_share_docs_algorithms_states(k):
    """Gradients of true mean 0 (normal, k groups): the clipped share at gamma is P(|t_{k-1}| < sqrt(gamma (k-1) /
    (k-3))) (docs/algorithms.md: 38% at k = 4, 28% at 8, 25% at 32), the yardstick of the tuning table's column."""
    from scipy import stats

    gen = torch.Generator().manual_seed(k)
    p = nn.Parameter(torch.zeros(2**17))
    opt = optim.create([p], "vrgd_sgd", lr=0.1, gamma=0.1)
    for _ in range(k):
        p.grad = torch.randn(p.shape, generator=gen)
        opt.observe()
    opt.step()
    limit = math.sqrt(0.1 * (k - 1) / (k - 3))
    expected = stats.t.cdf(limit, k - 1) - stats.t.cdf(-limit, k - 1)
    assert opt.diagnostics()["gsnr_clip_frac"] == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("fused", [None, False])
def test_the_clipped_share_is_of_the_live_coordinates(fused):
    """Pure noise (k = 8) in a tensor of which 3/4 of the coordinates get a gradient of 0 in every group, as
    taps that see only padding do: those are the dead share, not clipped ones (counted as clipped, they made the
    share 79% here); the clipped share is over the live quarter, as counted from the groups in float64."""
    gen = torch.Generator().manual_seed(8)
    p = nn.Parameter(torch.zeros(4, 2**15))
    opt = optim.create([p], "vrgd_lars", lr=0.1, gamma=0.1, fused=fused)
    groups = []
    for _ in range(8):
        groups.append(torch.zeros(p.shape))
        groups[-1][0] = torch.randn(2**15, generator=gen)
        p.grad = groups[-1].clone()
        opt.observe()
    opt.step()
    stacked = torch.stack(groups).double()
    r = stacked.mean(0) ** 2 / (stacked.var(0, unbiased=False) + 1e-12)
    r = r / r.mean()  # the tensor's mean, dead coordinates included (VRGD's normalisation)
    clipped_live = int(((r < 0.1) & (r > 0)).sum())
    diag = opt.diagnostics()
    assert diag["gsnr_dead_frac"] == 0.75
    assert diag["gsnr_clip_frac"] == pytest.approx(clipped_live / 2**15, abs=1e-6)
    assert 0.1 < diag["gsnr_clip_frac"] < 0.2 and (clipped_live + 3 * 2**15) / r.numel() > 0.75
