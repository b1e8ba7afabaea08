"""The library records Muon (timm), Schedule-Free AdamW and SGD (schedulefree) and SOAP (pytorch-optimizer) against
float64 references written from their papers' equations, not from the libraries' code (test_optim_library.py holds
them to their libraries bit for bit). Where a paper leaves a choice open, the reference takes the library's and its
docstring says which; the libraries' sources were read for those conventions only."""

import functools
import math

import pytest
import torch

from tests.helpers import LRS, SHAPES, TIGHT, ZERO_G, ZERO_W, Ref, assert_history, gradients, run, weights

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

# ---- Muon ------------------------------------------------------------------------------------------------------------

# timm's "quintic" preset: one (a, b, c) per Newton-Schulz iteration (modded-nanogpt's train_gpt_medium), where
# Jordan et al. use (3.4445, -4.7750, 2.0315) for all five.
QUINTIC = [
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
]


def newton_schulz(m, coefficients=QUINTIC, eps=1e-7):
    """Jordan et al. 2024: X <- a X + (b A + c A^2) X with A = X X^T, from X = M / max(||M||_F, eps): an odd
    polynomial of M's singular values, U p(S) V^T, p(S) near 1. timm transposes a tall M to iterate on its wide side:
    the same polynomial, fewer flops."""
    x = m / m.norm().clamp(min=eps)
    for a, b, c in coefficients:
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x


def muon_matrix(shape) -> bool:
    """timm's routing as its docs state it: a weight whose (out, in * kernel) view has two sides >= 4, an aspect ratio
    <= 128 and no unit dimension first or second takes Muon; every other tensor (biases, small matrices) AdamW."""
    if len(shape) < 2 or shape[0] == 1 or shape[1] == 1:
        return False
    rows, cols = shape[0], math.prod(shape[1:])
    return min(rows, cols) >= 4 and max(rows, cols) / min(rows, cols) <= 128


class RefMuon(Ref):
    """Muon (Jordan et al. 2024) with timm's conventions: an EMA momentum m <- b m + (1 - b) g (Nesterov: u = b m +
    (1 - b) g; else u = m); a conv weight flattened to (out, in * kh * kw); w <- w (1 - lr wd) - lr s NS(u) with
    s = 0.2 sqrt(max(rows, cols)) ("match_rms_adamw", Liu et al. 2025). The other tensors take AdamW at the same lr,
    betas (0.9, 0.95) and Muon's eps 1e-7, weight decay first, eps outside the root of the bias-corrected v; with
    Nesterov, NAdamW (the first moment looks ahead: b1 m + (1 - b1) g)."""

    def __init__(self, ws, weight_decay, momentum=0.95, nesterov=False, betas=(0.9, 0.95), eps=1e-7):
        super().__init__(ws, weight_decay)
        self.momentum, self.nesterov, self.betas, self.eps, self.t = momentum, nesterov, betas, eps, 0
        self.muon = [muon_matrix(w.shape) for w in ws]
        self.m, self.v = [torch.zeros_like(w) for w in ws], [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        (b1, b2), b, self.t = self.betas, self.momentum, self.t + 1
        for i, g in enumerate(grads):
            w = self.w[i] * (1 - lr * self.wd[i])
            if self.muon[i]:
                self.m[i] = b * self.m[i] + (1 - b) * g
                u = (b * self.m[i] + (1 - b) * g if self.nesterov else self.m[i]).reshape(g.shape[0], -1)
                scale = 0.2 * max(u.shape) ** 0.5
                self.w[i] = w - lr * scale * newton_schulz(u, eps=self.eps).reshape(g.shape)
            else:
                self.m[i] = b1 * self.m[i] + (1 - b1) * g
                self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
                m = b1 * self.m[i] + (1 - b1) * g if self.nesterov else self.m[i]
                self.w[i] = w - lr * (m / (1 - b1**self.t)) / ((self.v[i] / (1 - b2**self.t)).sqrt() + self.eps)


@pytest.fixture
def ns_in_float64(monkeypatch):
    """timm runs Newton-Schulz in bfloat16 whatever the parameters' dtype (zeropower_via_newtonschulz's dtype
    default, which Muon does not expose): the exact tests run it in float64 instead; the rest is timm's as it is."""
    import timm.optim.muon as timm_muon

    ns = functools.partial(timm_muon.zeropower_via_newtonschulz, dtype=torch.float64)
    monkeypatch.setattr(timm_muon, "zeropower_via_newtonschulz", ns)


@pytest.mark.usefixtures("ns_in_float64")
@pytest.mark.parametrize(
    "hparams", [dict(weight_decay=0.1), dict(weight_decay=0.0), dict(weight_decay=0.1, nesterov=True, momentum=0.9)]
)
def test_muon_matches_its_equations_over_five_steps(hparams):
    """Five steps with an lr change; weight decay on and off; Nesterov. The zero-gradient 5 x 2 tensor moves by
    weight decay alone; the zero weight moves by its gradient."""
    ws, steps = weights(), gradients(len(LRS))
    ours, _ = run("muon", ws, steps, LRS, **hparams)
    ref = RefMuon(ws, **hparams).run(steps, LRS)
    assert_history(ours, ref, **TIGHT)
    decay = math.prod(1 - lr * hparams["weight_decay"] for lr in LRS)
    torch.testing.assert_close(ours[-1][ZERO_G], ws[ZERO_G] * decay, **TIGHT)


@pytest.mark.usefixtures("ns_in_float64")
def test_muon_s_first_step_is_the_scaled_orthogonal_factor_of_the_gradient():
    """timm routes the conv weight (flattened to 4 x 27) and the 6 x 5 matrix to Muon, the 3 x 4 and 5 x 2 matrices
    (a side < 4: AdamW with weight decay) and the bias (AdamW without) to the fallback. Step 1: m = (1 - b) g and NS
    is scale-free, so w1 = w0 (1 - lr wd) - lr 0.2 sqrt(max side) NS(g), with NS(g) = U p(S) V^T in g's singular
    vectors, p(S) within 0.3 of 1 (the coefficients trade exactness for speed). A zero gradient: NS(0) = 0 (eps guards
    the division), weight decay alone."""
    ws, steps = weights(), gradients(1)
    lr, wd = 0.5, 0.1
    [ours], opt = run("muon", ws, steps, [lr], weight_decay=wd)
    routed = [opt.state[p]["use_muon"] for group in opt.param_groups for p in group["params"]]  # SHAPES' order
    assert routed == [muon_matrix(s) for s in SHAPES] == [True, True, False, False, False]
    for i in (0, 1):
        g = steps[0][0][i].reshape(SHAPES[i][0], -1)
        o = newton_schulz(g)
        step = ws[i] * (1 - lr * wd) - lr * 0.2 * max(g.shape) ** 0.5 * o.reshape(SHAPES[i])
        torch.testing.assert_close(ours[i], step, **TIGHT)
        u, _, vh = torch.linalg.svd(g, full_matrices=False)
        d = u.T @ o @ vh.T  # U^T NS(g) V = p(S), the quintic map of g's singular values
        torch.testing.assert_close(d, torch.diag(d.diagonal()), rtol=0, atol=1e-12)
        assert ((d.diagonal() - 1).abs() < 0.3).all(), d.diagonal()
    zero = [[[torch.zeros_like(g) if i == 1 else g for i, g in enumerate(steps[0][0])]]]  # the 6 x 5 matrix's
    [ours], _ = run("muon", ws, zero, [lr], weight_decay=wd)
    torch.testing.assert_close(ours[1], ws[1] * (1 - lr * wd), **TIGHT)


def test_muon_as_timm_runs_it_orthogonalizes_in_bfloat16():
    """Without the float64 patch: the Muon tensors' steps carry bfloat16's rounding (~5e-3 of the step), far beyond
    float64's, while the AdamW fallback stays float64-exact. A property of timm's Muon (Jordan's design: NS in
    bfloat16), recorded here so that a change of it shows."""
    ws, steps = weights(), gradients(3)
    ours, _ = run("muon", ws, steps, LRS[:3], weight_decay=0.1)
    ref = RefMuon(ws, 0.1).run(steps, LRS[:3])
    for i in range(len(SHAPES)):
        error = ((ours[-1][i] - ref[-1][i]).norm() / (ref[-1][i] - ws[i]).norm()).item()
        assert (1e-4 < error < 5e-2) if muon_matrix(SHAPES[i]) else error < 1e-12, (i, error)


# ---- Schedule-Free ---------------------------------------------------------------------------------------------------


class RefScheduleFree(Ref):
    """Schedule-Free AdamW / SGD (Defazio et al. 2024, Algorithm 1): y = (1 - b1) z + b1 x is where the gradient is
    taken (the parameters while training), z <- z - lr_t (d + wd y), x <- (1 - c) x + c z, with d = g / (sqrt(v /
    (1 - b2^t)) + eps), v <- b2 v + (1 - b2) g^2 (AdamW), or d = g (SGD); lr_t = lr min(1, t / warmup).
    c_{t+1} = w_t / sum_{i<=t} w_i, w_t = t^r max_{i<=t}(lr_i)^p (p = 2).

    The package's conventions (schedulefree >= 1.3, AdamWScheduleFree): the bias correction is inside the root, not
    Algorithm 1's lr_t = lr sqrt(1 - b2^t) min(1, t / warmup) with d = g / (sqrt(v) + eps) (the package keeps that
    form as AdamWScheduleFreePaper); so neither the decay nor the weights c carry sqrt(1 - b2^t). The weights take
    the largest lr so far, where Algorithm 1 writes lr_t^2: the same while the lr never decreases."""

    def __init__(self, ws, weight_decay, beta1=0.9, beta2=0.999, eps=1e-8, warmup=0, r=0.0, power=2.0, adam=True):
        super().__init__(ws, weight_decay)
        self.beta1, self.beta2, self.eps, self.warmup, self.r, self.power, self.adam = (
            beta1, beta2, eps, warmup, r, power, adam
        )  # fmt: skip
        self.x, self.z = [w.clone() for w in ws], [w.clone() for w in ws]
        self.v = [torch.zeros_like(w) for w in ws]
        self.t, self.lr_max, self.weight_sum, self.c = 0, 0.0, 0.0, []

    def step(self, grads, lr):
        self.t += 1
        lr = lr * min(1.0, self.t / self.warmup) if self.warmup else lr
        self.lr_max = max(self.lr_max, lr)
        weight = self.t**self.r * self.lr_max**self.power
        self.weight_sum += weight
        c = weight / self.weight_sum
        self.c.append(c)
        for i, g in enumerate(grads):
            y = self.w[i]
            if self.adam:
                self.v[i] = self.beta2 * self.v[i] + (1 - self.beta2) * g * g
                g = g / ((self.v[i] / (1 - self.beta2**self.t)).sqrt() + self.eps)
            self.z[i] = self.z[i] - lr * (g + self.wd[i] * y)
            self.x[i] = (1 - c) * self.x[i] + c * self.z[i]
            self.w[i] = (1 - self.beta1) * self.z[i] + self.beta1 * self.x[i]


SCHEDULE_FREE = [  # record, hyperparameters, reference
    ("schedulefree_adamw", dict(weight_decay=0.1), lambda ws: RefScheduleFree(ws, 0.1)),
    ("schedulefree_adamw", dict(weight_decay=0.0, warmup_steps=3, r=1.0, betas=(0.8, 0.99)),
     lambda ws: RefScheduleFree(ws, 0.0, 0.8, 0.99, warmup=3, r=1.0)),
    ("schedulefree_sgd", dict(weight_decay=0.1), lambda ws: RefScheduleFree(ws, 0.1, adam=False)),
    ("schedulefree_sgd", dict(weight_decay=0.1, warmup_steps=2, momentum=0.5),
     lambda ws: RefScheduleFree(ws, 0.1, 0.5, warmup=2, adam=False)),
]  # fmt: skip


@pytest.mark.parametrize("name,hparams,make_ref", SCHEDULE_FREE)
def test_schedule_free_matches_its_equations_over_five_steps_and_evaluates_x(name, hparams, make_ref):
    """Five steps of y (the training parameters) with an lr that rises, falls and rises (c follows its running
    maximum); a linear warm-up; polynomial weighting r = 1; then eval() gives x, the average the paper evaluates."""
    ws, steps = weights(), gradients(len(LRS))
    ours, opt = run(name, ws, steps, LRS, **hparams)
    ref = make_ref(ws)
    assert_history(ours, ref.run(steps, LRS), **TIGHT)
    opt.eval()
    x = [p.detach() for group in opt.param_groups for p in group["params"]]  # SHAPES' order: the bias is last
    assert_history([x], [ref.x], **TIGHT)


def test_schedule_free_adamw_s_first_step_is_a_sign_step_and_its_averages_are_warmup_weighted():
    """Step 1: x = y = z = w0 and c_2 = 1, so y1 = z1 = w0 - lr (g / (|g| + eps) + wd w0): a sign step of size lr
    (v-hat = g^2). With warm-up over 4 steps at a constant lr, c_{t+1} = t^2 / sum_{i<=t} i^2 = 1, 4/5, 9/14, 16/30,
    then 16/(30 + 16) once the lr is flat. A zero gradient gives d = 0: z moves by weight decay only."""
    ws, steps = weights(), gradients(1)
    [ours], _ = run("schedulefree_adamw", ws, steps, [0.5], weight_decay=0.1)
    g = steps[0][0]
    for i, (w, step) in enumerate(zip(ws, ours)):
        wd = 0.1 if w.ndim > 1 else 0.0
        torch.testing.assert_close(step, w - 0.5 * (g[i] / (g[i].abs() + 1e-8) + wd * w), **TIGHT)
    torch.testing.assert_close(ours[ZERO_G], ws[ZERO_G] * (1 - 0.5 * 0.1), **TIGHT)
    # the reference's averaging weights against their closed form (the five-step test above holds the library to
    # the reference under a warm-up)
    ref = RefScheduleFree(weights(), 0.1, warmup=4)
    ref.run(gradients(5), [0.5] * 5)
    assert ref.c == pytest.approx([1, 4 / 5, 9 / 14, 16 / 30, 16 / 46], rel=1e-14)


# ---- SOAP ------------------------------------------------------------------------------------------------------------


def rotate(x, qs, back=False):
    """x in the eigenbasis: the mode-d product with Q_d^T along each dimension d (back: with Q_d). No Q_d: as it is."""
    for d, q in enumerate(qs):
        x = torch.movedim(torch.tensordot(q if back else q.T, x, dims=([1], [d])), 0, d)
    return x


class RefSOAP(Ref):
    """SOAP (Vyas et al. 2024, Algorithm 3): Adam in the eigenbasis of Shampoo's statistics. Per dimension d of a
    tensor (a conv weight: all four, merge_dims off) L_d <- b_s L_d + (1 - b_s) G_(d) G_(d)^T, G_(d) the mode-d
    unfolding; Q_d its eigenvectors. m <- b1 m + (1 - b1) g (in the weights' basis), v <- b2 v + (1 - b2) (Q^T g)^2
    (in the eigenbasis), w <- w - lr sqrt(1 - b2^s) / (1 - b1^s) Q (Q^T m / (sqrt(v) + eps)), s Adam steps so far.
    1-D tensors: no rotation (precondition_1d off), plain Adam of SOAP's form.

    pytorch-optimizer's conventions: step 1 only gathers L and takes Q by an
    eigendecomposition, no Adam step, no decay; the eps is added to sqrt(v) before the bias corrections, which go
    to the step size; the decoupled decay w <- w (1 - lr wd) follows the step; L is updated after the step with that
    step's gradient; every `frequency` Adam steps Q is refreshed by one power iteration, Q_d <- QR(L_d Q_d), its
    columns first sorted by the estimated eigenvalues diag(Q_d^T L_d Q_d), descending, and v permuted alike.

    What is exact: the update is invariant to each eigenvector's sign and to the order of the eigenvectors, so the
    reference needs only the same eigenspaces. Those are unique where each L_d's eigenvalues are distinct: G_(d) of
    rank >= its rows - 1 (a zero gradient leaves L = 0, but then every update is 0 whatever Q). A wider null space
    (a 64 x 10 weight after one step) has no unique basis, and the update depends on the basis picked (see the
    two-rank test in test_optim_library.py). The library runs the QR of the refresh in float32 even for float64
    weights: after a refresh the steps agree to float32's precision only."""

    def __init__(self, ws, weight_decay, betas=(0.95, 0.95), shampoo_beta=None, eps=1e-8, frequency=10):
        super().__init__(ws, weight_decay)
        self.betas, self.shampoo_beta, self.eps, self.frequency, self.t = betas, shampoo_beta, eps, frequency, 0
        self.L = [[torch.zeros(n, n, dtype=w.dtype) for n in w.shape] if w.ndim > 1 else [] for w in ws]
        self.Q = [None] * len(ws)
        self.m, self.v = [torch.zeros_like(w) for w in ws], [torch.zeros_like(w) for w in ws]

    def step(self, grads, lr):
        (b1, b2), self.t = self.betas, self.t + 1
        bs, s = self.shampoo_beta or b2, self.t - 1
        for i, g in enumerate(grads):
            if s > 0:
                self.m[i] = b1 * self.m[i] + (1 - b1) * g
                self.v[i] = b2 * self.v[i] + (1 - b2) * rotate(g, self.Q[i]) ** 2
                n = rotate(rotate(self.m[i], self.Q[i]) / (self.v[i].sqrt() + self.eps), self.Q[i], back=True)
                self.w[i] = (self.w[i] - lr * (1 - b2**s) ** 0.5 / (1 - b1**s) * n) * (1 - lr * self.wd[i])
            for d in range(len(self.L[i])):
                unfold = g.movedim(d, 0).reshape(g.shape[d], -1)
                self.L[i][d] = bs * self.L[i][d] + (1 - bs) * unfold @ unfold.T
            if self.Q[i] is None:
                self.Q[i] = [torch.linalg.eigh(L).eigenvectors for L in self.L[i]]
            elif s % self.frequency == 0:
                for d, (L, q) in enumerate(zip(self.L[i], self.Q[i])):
                    order = torch.argsort((q * (L @ q)).sum(0), descending=True)
                    self.v[i] = self.v[i].index_select(d, order)
                    self.Q[i][d] = torch.linalg.qr(L @ q[:, order]).Q


def test_soap_matches_its_equations_between_preconditioner_refreshes():
    """Six steps at the record's frequency (10): step 1 gathers statistics only, steps 2-6 are Adam in the fixed
    eigenbasis of step 1's statistics: exact in float64. The conv weight takes four rotations, the 6 x 5 and 3 x 4
    matrices a null space of one dimension, the zero-gradient tensor decays only, the bias no rotation."""
    ws, steps, lrs = weights(), gradients(6), LRS + [0.4]
    ours, _ = run("soap", ws, steps, lrs, weight_decay=0.1)
    assert_history(ours, RefSOAP(ws, 0.1).run(steps, lrs), **TIGHT)
    decay = math.prod(1 - lr * 0.1 for lr in lrs[1:])
    torch.testing.assert_close(ours[-1][ZERO_G], ws[ZERO_G] * decay, **TIGHT)
    assert not torch.equal(ours[-1][ZERO_W], ws[ZERO_W])


def test_soap_s_first_two_steps():
    """Step 1 moves nothing (not even weight decay). Step 2 is the first Adam step, m = (1 - b1) g2 and v = (1 - b2)
    g2'^2 with g2' = U^T g2 V in the singular vectors of g1 (L = (1 - b) g1 g1^T, R = (1 - b) g1^T g1: the SVD, a
    routine other than the eigendecomposition): w2 = (w0 - lr U [g2' / (|g2'| + eps / sqrt(1 - b2))] V^T) (1 - lr wd),
    a sign step in g1's singular basis."""
    ws, steps = weights(), gradients(2)
    lr, wd, b2 = 0.3, 0.1, 0.95
    ours, _ = run("soap", ws, steps, [0.5, lr], weight_decay=wd)
    assert all(torch.equal(w, w1) for w, w1 in zip(ws, ours[0]))
    for i in (1, 2):  # the 6 x 5 matrix and the zero weight (3 x 4)
        u, _, vh = torch.linalg.svd(steps[0][0][i])
        g = u.T @ steps[1][0][i] @ vh.T
        want = (ws[i] - lr * u @ (g / (g.abs() + 1e-8 / (1 - b2) ** 0.5)) @ vh) * (1 - lr * wd)
        torch.testing.assert_close(ours[1][i], want, **TIGHT)


def test_soap_across_preconditioner_refreshes_to_float32_s_precision():
    """Frequency 2: the QR power iteration refreshes Q after steps 3 and 5 (Adam steps 2 and 4), sorting the basis
    and permuting v. The library's QR runs in float32, so from step 4 the steps agree within 1e-5, not 1e-10; the
    steps up to the first refresh stay exact. (Checked by hand: with that QR in float64 the library agrees with the
    reference within 2e-14 at every step; without the sorting or the permutation of v it misses by over 0.1.)"""
    ws, steps, lrs = weights(), gradients(6), LRS + [0.4]
    ours, _ = run("soap", ws, steps, lrs, weight_decay=0.1, precondition_frequency=2)
    ref = RefSOAP(ws, 0.1, frequency=2).run(steps, lrs)
    assert_history(ours[:3], ref[:3], **TIGHT)
    assert_history(ours, ref, rtol=1e-5, atol=1e-7)
