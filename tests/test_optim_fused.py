"""bench.optim fused CPU kernels (csrc/vrgd_cpu.cpp): the fused VRGD-LARS step and observe() against the
float64 reference from the equations and against the eager code, over several steps, with the edge
cases (w = 0, g = 0 everywhere, excluded tensors, a group without a gradient), and the fused option."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from bench import optim
from bench.errors import UserError
from bench.optim import fused as fused_kernels
from tests.helpers import (
    FP32,
    LRS,
    ZERO_G,
    RefLARS,
    RefVRGD,
    assert_history,
    backward,
    fp32,
    gradients,
    run,
    run_steps,
    weights,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def uses_the_fused_step(opt) -> bool:
    return opt._kernels is not None and opt._step_unfused() is None


@pytest.mark.parametrize("k", [3, 4, 16])
@pytest.mark.parametrize("hparams,ref_options", [
    (dict(weight_decay=0.1, eta=0.05), {}),
    (dict(weight_decay=0.1, eta=0.05, trust_grad="mean", gamma=0.3), dict(trust_grad="mean", gamma=0.3)),
    (dict(weight_decay=0.01, eta=0.2, momentum=0.8, eps=1e-3, gsnr_eps=1e-4), dict(eps=1e-4)),
])  # fmt: skip
def test_fused_vrgd_lars_matches_float64_reference(k, hparams, ref_options):
    ws, steps = weights(), gradients(len(LRS), k=k)
    ours, opt = run("vrgd_lars", [w.float() for w in ws], fp32(steps), LRS, **hparams)
    assert uses_the_fused_step(opt)
    base = RefLARS(
        ws,
        hparams["weight_decay"],
        momentum=hparams.get("momentum", 0.9),
        eta=hparams["eta"],
        eps=hparams.get("eps", 0.0),
    )
    ref = RefVRGD(base, **ref_options)
    assert_history(ours, [[w.float() for w in step] for step in ref.run(steps, LRS)], **FP32)
    diag = opt.diagnostics()
    assert diag["gsnr_clip_frac"] == pytest.approx(ref.clip_frac[-1], abs=1e-9)  # counted exactly
    assert diag["gsnr_r_mean"] == pytest.approx(ref.r_mean[-1], rel=1e-4)
    assert [diag["trust_min"], diag["trust_max"]] == pytest.approx(
        [min(base.trusts[-1]), max(base.trusts[-1])], rel=1e-4
    )


@pytest.mark.parametrize("name,hparams,kernel", [
    ("vrgd_lars", dict(weight_decay=0.1, eta=0.05), "vrgd_lars_step"),
    ("vrgd_lars", dict(weight_decay=0.1, eta=0.05, beta3=0.9), "vrgd_factors"),  # then momentum and LARS eager
    ("vrgd_sgd", dict(weight_decay=0.1), "vrgd_factors"),
    ("vrgd_adam", dict(weight_decay=0.1), "vrgd_factors"),
    ("vrgd_lamb", dict(weight_decay=0.1, gamma=0.3), "vrgd_factors"),
])  # fmt: skip
def test_fused_and_eager_code_agree(name, hparams, kernel, monkeypatch):
    module, _ = fused_kernels._build()
    calls = []

    def spy(function):
        original = getattr(module, function)

        def call(*args):
            calls.append(function)
            return original(*args)

        monkeypatch.setattr(module, function, call)

    spy("vrgd_lars_step")
    spy("vrgd_factors")
    ws, steps = [w.float() for w in weights()], fp32(gradients(len(LRS), k=4))
    fused, opt = run(name, ws, steps, LRS, **hparams)
    assert calls == [kernel] * len(LRS)
    eager, ref = run(name, ws, steps, LRS, fused=False, **hparams)
    assert opt._kernels is not None and ref._kernels is None and len(calls) == len(LRS)
    assert_history(fused, eager, rtol=1e-5, atol=1e-6)
    ours, theirs = opt.diagnostics(), ref.diagnostics()
    assert ours.keys() == theirs.keys()
    assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-7)


def test_fused_step_leaves_the_mean_gradient_and_the_noise_statistics():
    ws, (groups,) = [w.float() for w in weights()], fp32(gradients(1, k=3))
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, "vrgd_lars", lr=0.5, weight_decay=0.1)
    for grads in groups:
        backward(params, grads)
        opt.observe()
    opt.step()
    stacked = [torch.stack(g).double() for g in zip(*groups)]
    for p, g in zip(params, stacked):
        torch.testing.assert_close(p.grad, g.mean(0).float())
    local = sum(float((g**2).sum()) for g in stacked) / 3
    total = sum(float(g.mean(0).square().sum()) for g in stacked)
    var = (local - total) * 3 / 2
    diag = opt.diagnostics()
    assert [diag["grad_var"], diag["grad_sqnorm"]] == pytest.approx([var, total - var / 3], rel=1e-5)


def test_missing_gradients_and_foreign_layouts_take_the_right_path():
    """A parameter without a gradient counts as zero (also in the step's first group, which then cannot
    overwrite the statistics); a gradient laid out unlike its channels_last weight goes through the
    eager observe(); the step stays fused and equals the eager optimizer's."""
    ws = [w.float() for w in weights()]
    ws[0] = ws[0].contiguous(memory_format=torch.channels_last)
    (groups,) = fp32(gradients(1, k=3))
    results = []
    for fused in (None, False):
        params = [nn.Parameter(w.clone()) for w in ws]
        opt = optim.create(params, "vrgd_lars", lr=0.5, weight_decay=0.1, fused=fused)
        for d, grads in enumerate(groups):
            backward(params, grads)
            assert params[0].grad.is_contiguous() and not params[0].is_contiguous()  # layouts differ
            if d != 1:  # groups 0 and 2 through the kernel, group 1 through the eager code
                params[0].grad = params[0].grad.contiguous(memory_format=torch.channels_last)
            if d == 0:
                params[1].grad = None
            if d == 1:
                params[3].grad = None
            opt.observe()
        opt.step()
        results.append([p.detach().clone() for p in params])
        assert uses_the_fused_step(opt) == (fused is None)
    assert_history([results[0]], [results[1]], rtol=1e-5, atol=1e-6)


def test_fused_option_is_validated_and_honoured():
    params64 = [nn.Parameter(w.clone()) for w in weights()]
    params32 = [nn.Parameter(w.float()) for w in weights()]
    assert optim.create(params64, "vrgd_lars", lr=1.0)._kernels is None  # fp64: eager, no error
    assert optim.create(params32, "vrgd_lars", lr=1.0, fused=False)._kernels is None
    assert uses_the_fused_step(optim.create(params32, "vrgd_lars", lr=1.0, fused=True))
    refusals = [
        (params64, {}, r"a torch.float64 parameter on cpu \(the fused kernels take dense fp32 CPU or CUDA tensors\)"),
        (params32, {"beta3": 0.9}, r"beta3 > 0"),
        (params32, {"nesterov": True}, r"nesterov or momentum 0"),
        (params32, {"momentum": 0.0}, r"nesterov or momentum 0"),
    ]
    for params, hparams, reason in refusals:
        with pytest.raises(UserError, match=r"^optimizer hyperparameter fused=true cannot be honoured: " + reason):
            optim.create(params, "vrgd_lars", lr=1.0, fused=True, **hparams)
    assert optim.create(params32, "vrgd_sgd", lr=1.0, fused=True)._kernels is not None  # observe() only
    with pytest.raises(UserError, match=r"fused=1 is invalid: it must be null, true or false\."):
        optim.check("vrgd_lars", {"fused": 1})
    assert "fused" in optim.hyperparameters(optim.VRGDAdam)


def test_fused_zero_variance_gives_finite_factors_in_range():
    """All groups identical: var is 0 up to rounding, the factors stay finite and in [gamma, 1]."""
    ws, grads = [w.float() for w in weights()], [g.float() for g in gradients(1)[0][0]]
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, "vrgd_lars", lr=1.0, exclude=None, eta=1.0)
    for _ in range(4):
        backward(params, grads)
        opt.observe()
    opt.step()
    assert uses_the_fused_step(opt)
    assert all(torch.isfinite(p).all() for p in params)
    assert all(map(torch.isfinite, torch.tensor(list(opt.diagnostics().values()))))
    assert not params[ZERO_G].grad.any()  # the all-zero gradient's mean


def test_triton_kernels_match_the_eager_code_in_the_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = "from tests.helpers import triton_in_the_interpreter as check; check()"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "triton kernels agree" in done.stdout


def test_momentum_loaded_from_another_layout_steps_through_the_eager_code():
    """A checkpoint of a contiguous model loaded into a channels_last one: buffers and weights differ in
    layout, which the kernel cannot walk; the step falls back to the eager code and stays exact."""
    ws = [w.float() for w in weights()]
    (first, second) = fp32(gradients(2, k=3))
    saved = optim.create([nn.Parameter(w.clone()) for w in ws], "vrgd_lars", lr=0.5, weight_decay=0.1)
    for grads in first:
        backward(saved.param_groups[0]["params"] + saved.param_groups[1]["params"], grads)
        saved.observe()
    saved.step()
    results = []
    for fused in (None, False):
        params = [nn.Parameter(w.clone()) for w in ws]
        params[0] = nn.Parameter(ws[0].contiguous(memory_format=torch.channels_last))
        opt = optim.create(params, "vrgd_lars", lr=0.5, weight_decay=0.1, fused=fused)
        opt.load_state_dict(copy.deepcopy(saved.state_dict()))  # load_state_dict keeps the tensors it can
        assert opt.state[params[0]]["momentum_buffer"].stride() != params[0].stride()
        for grads in second:
            backward(params, grads)
            opt.observe()
        opt.step()
        results.append([p.detach().clone() for p in params])
    assert_history([results[0]], [results[1]], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fused", [None, False])
@pytest.mark.parametrize("rows", [10, 1000])
def test_a_layer_whose_mean_r_underflows_stays_finite(fused, rows):
    """One coordinate with a tiny mean gradient, the rest exactly 0: mean(r) ~ 1e-42 and 1 / mean(r)
    overflows fp32. The factors are capped instead of making 0 * inf = NaN."""
    p = nn.Parameter(torch.randn(rows, 4))
    opt = optim.create([p], "vrgd_lars", lr=0.5, weight_decay=0.1, fused=fused)
    for value in (1.0, -1.0, 3e-21):
        p.grad = torch.zeros(rows, 4)
        p.grad[0, 0] = value
        opt.observe()
    opt.step()
    assert torch.isfinite(p).all()
    assert opt.diagnostics()["gsnr_clip_frac"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("fused", [None, False])
def test_zero_grad_without_none_gives_the_same_steps(fused):
    """After step() p.grad is the g_bar view of the statistics; zero_grad(set_to_none=False) then
    backward adds into that view: observe() must still read the group's own gradient."""
    ws, steps = [w.float() for w in weights()], fp32(gradients(3, k=3))
    ref, _ = run("vrgd_lars", ws, steps, LRS[:3], weight_decay=0.1)
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, "vrgd_lars", lr=LRS[0], weight_decay=0.1, fused=fused)
    history = []
    for lr, groups in zip(LRS, steps):
        for group in opt.param_groups:
            group["lr"] = lr
        for grads in groups:
            for p, g in zip(params, grads):  # what backward does to a zeroed p.grad
                p.grad = g.clone() if p.grad is None else p.grad.add_(g)
            opt.observe()
        opt.step()
        opt.zero_grad(set_to_none=False)
        history.append([p.detach().clone() for p in params])
    assert_history(history, ref, rtol=1e-6, atol=1e-7)


class VRGDLARC(optim.VRGDLARS):
    clip = True


def test_large_tensors_several_groups_of_settings_and_larc_on_two_threads():
    """Tensors of several 16K-element chunks, three param groups with their own lr, momentum, eta and weight
    decay, LARC clipping, two threads: the fused step equals the eager one."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(130, 130), (64, 3, 7, 7), (40_000,), (7,)]
    ws = [torch.randn(s, generator=gen) for s in shapes]
    # 8 groups: a variance near 0 (an r from the heavy tail that dominates mean(r), where fp32 rounding of the
    # sums decides) is rare, so the comparison checks the kernel's plumbing rather than fp32 conditioning
    groups = [[torch.randn(s, generator=gen) * (i + 1) + 0.5 for i, s in enumerate(shapes)] for _ in range(8)]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    results = []
    try:
        for fused in (None, False):
            for cls in (optim.VRGDLARS, VRGDLARC):
                params = [nn.Parameter(w.clone()) for w in ws]
                opt = cls(
                    [
                        {"params": params[:2], "eta": 0.02, "momentum": 0.8},
                        {"params": params[2:3], "lr": 0.3, "weight_decay": 0.0, "adapt": False},
                        {"params": params[3:], "momentum": 0.5},
                    ],
                    lr=0.7,
                    weight_decay=0.01,
                    fused=fused,
                )
                for step in range(3):
                    for grads in groups:
                        backward(params, [g * (step + 1) for g in grads])
                        opt.observe()
                    opt.step()
                    opt.zero_grad()
                assert (opt._kernels is not None) == (fused is None)
                results.append(([p.detach().clone() for p in params], opt.diagnostics()))
    finally:
        torch.set_num_threads(threads)
    for (ours, diag), (eager, eager_diag) in zip(results[:2], results[2:]):
        for w, a, b in zip(ws, ours, eager):  # the updates agree up to the fp32 summation order of mean(r)
            assert (a - b).norm() <= 1e-5 * (b - w).norm()
        assert diag == pytest.approx(eager_diag, rel=1e-4)
    assert results[1][1]["trust_max"] <= 1.0 and not torch.equal(results[0][0][0], results[1][0][0])  # LARC


def test_a_model_moved_after_the_optimizer_was_built_runs_the_eager_code():
    model = nn.Linear(6, 3)
    opt = optim.create(model, "vrgd_lars", lr=0.5)
    assert opt._kernels is not None
    model.double()
    for _ in range(2):
        model(torch.randn(4, 6, dtype=torch.float64)).sum().backward()
        opt.observe()
    opt.step()
    assert opt._kernels is None and all(torch.isfinite(p).all() for p in model.parameters())


def test_an_empty_adapted_group_reports_the_other_groups():
    params = [nn.Parameter(w.float()) for w in weights()]
    opt = optim.VRGDLARS([{"params": []}, {"params": params, "adapt": False}], lr=0.5)
    for grads in fp32(gradients(1, k=2))[0]:
        backward(params, grads)
        opt.observe()
    opt.step()
    assert "trust_min" not in opt.diagnostics() and "gsnr_r_mean" in opt.diagnostics()


class Halved:
    """A mixin stacked on a VRGD variant through the declared hooks: halves the gradient the base update takes."""

    def _combine(self, k, mean, total):
        grads = super()._combine(k, mean, total)
        torch._foreach_mul_(list(grads.values()), 0.5)
        return grads


@pytest.mark.parametrize("base", [optim.VRGDLARS, optim.VRGDSGD])
def test_a_mixin_on_a_hook_the_fused_path_skips_gets_the_eager_code_or_a_refusal(base):
    """The fused paths compute _combine's gradient (and VRGD-LARS' whole step) themselves: a class that
    overrides such a hook runs the eager code with fused=null, which calls it, and is refused with fused=true."""
    stacked = type("Stacked", (Halved, base), {})
    ws, steps = [w.float() for w in weights()], fp32(gradients(3, k=3))

    def history(cls, fused):
        params = [nn.Parameter(w.clone()) for w in ws]
        opt = cls(optim.param_groups(params), lr=0.5, weight_decay=0.1, fused=fused)
        return run_steps(opt, params, steps), opt

    with pytest.raises(
        UserError,
        match=r"fused=true cannot be honoured: Stacked overrides _combine, which the "
        r"fused path of VRGD does not call",
    ):
        stacked(optim.param_groups([nn.Parameter(w.clone()) for w in ws]), lr=0.5, fused=True)
    ours, opt = history(stacked, None)
    assert opt._kernels is not None  # observe() stays fused: it is no hook of the step
    assert_history(ours, history(stacked, False)[0], rtol=1e-5, atol=1e-6)
    halved_lr = history(base, False)[0]
    with pytest.raises(AssertionError):  # the mixin's hook ran: the steps differ from the base's
        assert_history(ours, halved_lr, rtol=1e-3, atol=1e-4)
