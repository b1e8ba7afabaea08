"""bench.optim.merit (MERIT and VR-MERIT) against a float64 reference written element by element from
the equations of MERIT's docstring (the authors' code, NUS-HPC-AI-Lab/MERIT optim/merit.py), over
several steps from the first, with 4-D, 2-D and 1-D tensors, a zero row, a zero column, a zero tensor
and a tensor whose gradient is always zero."""

import itertools
import math

import pytest
import torch

from bench import optim
from tests.helpers import (
    LRS,
    TIGHT,
    RefVRGD,
    assert_history,
    gradients,
    run,
    weights,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def merit_weights():
    ws = weights()
    ws[0][:, 1].zero_()  # a conv kernel with a zero input channel: zero maxima along dimension 0
    ws[1][2].zero_()  # a linear weight with a zero row: zero maxima along dimension 1
    return ws


class RefMERIT:
    """Element by element: for w[i, j, rest], the max along dimension 1 runs over j (i and rest fixed),
    along dimension 0 over i (j and rest fixed). create() excludes 1-D tensors from weight decay only."""

    def __init__(self, ws, weight_decay, betas=(0.9, 0.999), eps=1e-6, bias_correction=False):
        self.w = [w.clone() for w in ws]
        self.wd = [weight_decay if w.ndim > 1 else 0.0 for w in ws]
        self.betas, self.eps, self.bias_correction, self.t = betas, eps, bias_correction, 0
        self.m, self.v = [torch.zeros_like(w) for w in ws], [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        b1, b2 = self.betas
        self.t += 1
        for i, g in enumerate(grads):
            self.m[i] = b1 * self.m[i] + (1 - b1) * g
            self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
            m, v = self.m[i], self.v[i]
            if self.bias_correction:
                m, v = m / (1 - b1**self.t), v / (1 - b2**self.t)
            u = m / (v.sqrt() + self.eps) + self.wd[i] * self.w[i]
            ratio = self.ratio(self.w[i].abs(), u.abs())
            self.w[i] = self.w[i] - lr * (ratio * u).clamp(-1.0, 1.0)

    @staticmethod
    def ratio(w, u):
        w_max, u_max = float(w.max()), float(u.max())
        whole = w_max / u_max if w_max > 0 and u_max > 0 else 1.0
        if w.ndim < 2:
            return torch.full_like(w, whole)
        out = torch.empty_like(w)
        for index in itertools.product(*map(range, w.shape)):
            a, b, rest = index[0], index[1], index[2:]
            along1 = [(a, j, *rest) for j in range(w.shape[1])]
            along0 = [(i, b, *rest) for i in range(w.shape[0])]
            maxima = [max(float(x[k]) for k in ks) for x in (w, u) for ks in (along1, along0)]
            row_w, col_w, row_u, col_u = maxima
            out[index] = 1.0 if 0.0 in maxima else max(row_w / row_u, col_w / col_u, whole)
        return out

    def run(self, steps, lrs):
        history = []
        for lr, groups in zip(lrs, steps):
            self.step([torch.stack(g).mean(0) for g in zip(*groups)], lr)
            history.append([w.clone() for w in self.w])
        return history


@pytest.mark.parametrize("hparams", [
    dict(weight_decay=0.1),
    dict(weight_decay=0.0, betas=(0.8, 0.99), eps=1e-8),
    dict(weight_decay=0.01, bias_correction=True),
])  # fmt: skip
def test_merit_matches_float64_reference(hparams):
    ws, steps = merit_weights(), gradients(len(LRS))
    lrs = [lr / 20 for lr in LRS]
    ours, opt = run("merit", ws, steps, lrs, **hparams)
    assert_history(ours, RefMERIT(ws, **hparams).run(steps, lrs), **TIGHT)
    diag = opt.diagnostics()
    assert diag["trust_min"] <= diag["trust_median"] <= diag["trust_max"] and math.isfinite(diag["trust_max"])


def test_the_ratio_is_elementwise_floored_clipped_and_one_at_zero_maxima():
    w = torch.tensor([[4.0, 0.0, 1.0], [0.0, 0.0, 0.0], [2.0, 0.0, 8.0]], dtype=torch.float64)
    u = torch.tensor([[1.0, 2.0, 0.5], [1.0, 1.0, 1.0], [0.25, 3.0, 2.0]], dtype=torch.float64)
    ours, _ = optim.merit._ratio(w.abs(), u.abs())
    torch.testing.assert_close(ours, RefMERIT.ratio(w.abs(), u.abs()), rtol=0, atol=0)
    assert ours[1].tolist() == [1.0, 1.0, 1.0] and ours[:, 1].tolist() == [1.0, 1.0, 1.0]  # a zero row, column
    # w[0, 0]: row 4 / 2 = 2, column 4 / 1 = 4, whole 8 / 3: 4
    assert ours[0, 0] == 4.0 and ours[2, 2] == max(8 / 3, 8 / 2, 8 / 3)
    params = [torch.nn.Parameter(torch.ones(3, 3, dtype=torch.float64))]
    opt = optim.create(params, "merit", lr=1.0)
    params[0].grad = torch.full((3, 3), 5.0, dtype=torch.float64)
    opt.step()  # u = m / (sqrt(v) + eps) ~ 3.16 with ratio 1 / 3.16: w - lr * 1
    assert params[0].detach().allclose(torch.zeros(3, 3, dtype=torch.float64), atol=1e-5)


def test_the_steps_are_clipped_to_one():
    ws, steps = merit_weights(), gradients(2)
    ours, _ = run("merit", ws, steps, [10.0, 10.0], weight_decay=0.1)
    for before, after in zip([ws] + ours[:-1], ours):
        for w0, w1 in zip(before, after):
            assert float((w1 - w0).abs().max()) <= 10.0 + 1e-12
    assert any(float((a - b).abs().max()) == pytest.approx(10.0) for a, b in zip(ours[0], ws))


def test_vrgd_merit_is_vr_adams_gradient_into_merit():
    ws, steps = merit_weights(), gradients(len(LRS), k=3)
    lrs = [lr / 20 for lr in LRS]
    ours, opt = run("vrgd_merit", ws, steps, lrs, weight_decay=0.1)
    ref = RefVRGD(RefMERIT(ws, 0.1), beta3=0.9)
    assert_history(ours, ref.run(steps, lrs), **TIGHT)
    assert opt.reduces_gradients is True and 0 < opt.diagnostics()["gsnr_clip_frac"] < 1
