"""bench.optim groups.py (AdaScale, SimiGrad's measuring optimizers) and the gradient-noise statistics
of every optimizer that keeps the groups apart: float64 references from the equations over several
steps, the limiting cases (identical groups, pure noise, identical halves), 2 ranks = 1 process."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from bench import optim
from tests.conftest import start_ranks
from tests.helpers import (
    LRS,
    TIGHT,
    RefLARS,
    RefSGD,
    assert_history,
    backward,
    gradients,
    run,
    run_steps,
    weights,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def ref_noise(groups):
    """(grad_var, grad_sqnorm) from the equations: unbiased E||g_d - G||^2 and |G|^2 over k groups."""
    k = len(groups)
    flat = [torch.cat([g.flatten() for g in grads]) for grads in groups]
    local = sum(float(f @ f) for f in flat) / k
    mean = torch.stack(flat).mean(0)
    total = float(mean @ mean)
    var = (local - total) * k / (k - 1)
    return var, total - var / k


def ref_cosine(groups):
    """cos between the mean gradients of the groups with even and with odd index."""
    flat = [torch.cat([g.flatten() for g in grads]) for grads in groups]
    even, odd = torch.stack(flat[0::2]).mean(0), torch.stack(flat[1::2]).mean(0)
    return float(even @ odd / (even.norm() * odd.norm()))


class RefAdaScale:
    """AdaScale from the equations (algorithms.md): gain from smoothed var and sqr, lr x gain."""

    def __init__(self, base, smoothing):
        self.base, self.theta = base, smoothing
        self.var = self.sqr = self.weight = 0.0
        self.gains = []

    def run(self, steps, lrs):
        history = []
        for lr, groups in zip(lrs, steps):
            k = len(groups)
            var, sqr = (max(x, 0.0) for x in ref_noise(groups))
            self.var = self.theta * self.var + (1 - self.theta) * var
            self.sqr = self.theta * self.sqr + (1 - self.theta) * sqr
            self.weight = self.theta * self.weight + (1 - self.theta)
            v, s = self.var / self.weight, self.sqr / self.weight
            gain = min(max((v + s) / (v / k + s), 1.0), k)
            self.gains.append(gain)
            self.base.step([torch.stack(g).mean(0) for g in zip(*groups)], lr * gain)
            history.append([w.clone() for w in self.base.w])
        return history


@pytest.mark.parametrize("name,hparams,make_base", [
    ("adascale_sgd", dict(weight_decay=0.1, smoothing=0.5), lambda ws: RefSGD(ws, 0.1)),
    ("adascale_sgd", dict(weight_decay=0.1, nesterov=True, smoothing=0.0), lambda ws: RefSGD(ws, 0.1, nesterov=True)),
    ("adascale_lars", dict(weight_decay=0.1, eta=0.05, smoothing=0.9), lambda ws: RefLARS(ws, 0.1, eta=0.05)),
    ("adascale_lars", dict(weight_decay=0.1, eta=0.05, nesterov=True, smoothing=0.9),
     lambda ws: RefLARS(ws, 0.1, eta=0.05, nesterov=True)),
])  # fmt: skip
def test_adascale_matches_float64_reference(name, hparams, make_base):
    ws, steps = weights(), gradients(len(LRS), k=4)
    # a shared component makes the gradient's signal comparable to its noise: 1 < gain < k
    for groups in steps:
        for grads in groups[1:]:
            for g, g0 in zip(grads, groups[0]):
                g.mul_(0.5).add_(g0)
    ours, opt = run(name, ws, steps, LRS, **hparams)
    ref = RefAdaScale(make_base(ws), hparams["smoothing"])
    assert_history(ours, ref.run(steps, LRS), **TIGHT)
    diag = opt.diagnostics()
    assert diag["gain"] == pytest.approx(ref.gains[-1], rel=1e-10)
    assert 1.0 < min(ref.gains) and max(ref.gains) < 4.0
    var, sqr = ref_noise(steps[-1])
    assert (diag["grad_var"], diag["grad_sqnorm"]) == pytest.approx((var, sqr), rel=1e-10)


class RefAdaScalePerGroup:
    """fairscale's AdaScale, transcribed: per param group j (here: the tensors with ndim > 1, and the
    excluded rest), var_j and sqr_j of the group's tensors only, clamped at 0 (fairscale floors var at
    1e-6), each smoothed and debiased; the group's lr times gain_j = (v + s) / (v / S + s) in [1, S]; the
    reported gain from the summed averages (fairscale's gain() of all groups)."""

    def __init__(self, base, smoothing, ws):
        self.base, self.theta = base, smoothing
        self.group_of = [0 if w.ndim > 1 else 1 for w in ws]
        self.var, self.sqr, self.weight = [0.0, 0.0], [0.0, 0.0], 0.0
        self.gains, self.group_gains = [], []

    def run(self, steps, lrs):
        history = []
        for lr, groups in zip(lrs, steps):
            k = len(groups)
            self.weight = self.theta * self.weight + (1 - self.theta)
            for j in (0, 1):
                var, sqr = (
                    max(x, 0.0)
                    for x in ref_noise([[g for g, of in zip(grads, self.group_of) if of == j] for grads in groups])
                )
                self.var[j] = self.theta * self.var[j] + (1 - self.theta) * var
                self.sqr[j] = self.theta * self.sqr[j] + (1 - self.theta) * sqr

            def gain(v, s):
                v, s = v / self.weight, s / self.weight
                return min(max((v + s) / (v / k + s), 1.0), k)

            self.group_gains.append([gain(self.var[j], self.sqr[j]) for j in (0, 1)])
            self.gains.append(gain(sum(self.var), sum(self.sqr)))
            self.base.step(
                [torch.stack(g).mean(0) for g in zip(*groups)], [lr * self.group_gains[-1][j] for j in self.group_of]
            )
            history.append([w.clone() for w in self.base.w])
        return history


@pytest.mark.parametrize("name,hparams,make_base", [
    ("adascale_sgd", dict(weight_decay=0.1, smoothing=0.5), lambda ws: RefSGD(ws, 0.1)),
    ("adascale_lars", dict(weight_decay=0.1, eta=0.05, smoothing=0.0), lambda ws: RefLARS(ws, 0.1, eta=0.05)),
])  # fmt: skip
def test_adascale_per_group_gains_match_fairscales_formulas_in_float64(name, hparams, make_base):
    ws, steps = weights(), gradients(len(LRS), k=4)
    for groups in steps:  # signal in the weights' gradients, mostly noise in the excluded tensors'
        for grads in groups[1:]:
            for g, g0, w in zip(grads, groups[0], ws):
                if w.ndim > 1:
                    g.mul_(0.3).add_(g0)
    ours, opt = run(name, ws, steps, LRS, gain_scope="per_group", **hparams)
    ref = RefAdaScalePerGroup(make_base(ws), hparams["smoothing"], ws)
    assert_history(ours, ref.run(steps, LRS), **TIGHT)
    assert opt.gains == pytest.approx(ref.group_gains[-1], rel=1e-10)
    assert opt.diagnostics()["gain"] == pytest.approx(ref.gains[-1], rel=1e-10)
    first, second = ref.group_gains[-1]
    assert 1.0 < first < second <= 4.0 and abs(second / first - 1) > 0.3  # the groups' gains differ
    shared, _ = run(name, ws, steps, LRS, **hparams)  # gain="global": not the same steps
    assert not torch.allclose(shared[-1][0], ours[-1][0])


def test_adascale_per_group_state_resumes_and_old_checkpoints_load():
    ws, steps = weights(), gradients(4, k=4)
    whole, _ = run("adascale_sgd", ws, steps, LRS[:4], gain_scope="per_group", smoothing=0.5)
    params = [nn.Parameter(w.clone()) for w in ws]
    first = optim.create(params, "adascale_sgd", lr=LRS[0], gain_scope="per_group", smoothing=0.5)
    second = optim.create(params, "adascale_sgd", lr=LRS[0], gain_scope="per_group", smoothing=0.5)
    for i, (lr, groups) in enumerate(zip(LRS[:4], steps)):
        opt = first if i < 2 else second
        if i == 2:
            second.load_state_dict(first.state_dict())
        for group in opt.param_groups:
            group["lr"] = lr
        for grads in groups:
            backward(params, grads)
            opt.observe()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert_history([[p.detach() for p in params]], [whole[-1]], **TIGHT)
    old = optim.create([nn.Parameter(w.clone()) for w in ws], "adascale_sgd", lr=0.1)
    state = old.state_dict()
    state["adascale"] = {"var": 1.0, "sqr": 2.0, "weight": 0.5, "gain": 1.5}  # as saved before per_group
    old.load_state_dict(state)
    assert old.averages == {"var": [1.0], "sqr": [2.0], "weight": 0.5} and old.gain == 1.5


def test_adascale_multiplies_the_lr_it_is_handed_by_each_groups_gain_of_the_same_step(monkeypatch):
    """AdaScale's gain enters the lr in one place, AdaScale._lr: each param group's base update (LARS: its step and
    its trust ratio's LARC bound) applies the lr it was handed (group["lr"], which the step never rewrites) times
    that group's gain measured in the same step."""
    from bench.optim.lars import LARS

    seen = []  # per base update: (group index, group["lr"] during the update, the lr it applies, the step's gains)
    update = LARS._update

    def spied(self, group, params, grads, trust_grads=None):
        index = next(i for i, g in enumerate(self.param_groups) if g is group)
        seen.append((index, group["lr"], self._lr(group), list(self.gains)))
        update(self, group, params, grads, trust_grads)

    monkeypatch.setattr(LARS, "_update", spied)
    ws, steps = weights(), gradients(3, k=4)
    _, opt = run("adascale_lars", ws, steps, LRS[:3], gain_scope="per_group", smoothing=0.5)
    assert [(i, lr) for i, lr, _, _ in seen] == [(i, lr) for lr in LRS[:3] for i in range(2)]
    assert all(applied == lr * gains[i] for i, lr, applied, gains in seen)
    assert seen[-1][3][0] != seen[-1][3][1] and seen[0][3] != seen[-1][3]  # the groups' gains differ, and change
    assert [g["lr"] for g in opt.param_groups] == [LRS[2]] * 2


def test_adascale_default_smoothing_is_fairscales():
    """theta = max(1 - k/1000, 0): with k = 4 groups, 0.996."""
    ws, steps = weights(), gradients(3, k=4)
    ours, opt = run("adascale_sgd", ws, steps, LRS[:3])
    ref = RefAdaScale(RefSGD(ws, 0.0), 0.996)
    assert_history(ours, ref.run(steps, LRS[:3]), **TIGHT)


@pytest.mark.parametrize("k", [2, 8])
def test_adascale_gain_is_one_for_identical_groups_and_near_k_for_pure_noise(k):
    ws = weights()
    same = [gradients(1)[0][0]] * k
    _, opt = run("adascale_sgd", ws, [same], [0.1], smoothing=0.0)
    assert opt.gain == pytest.approx(1.0, abs=1e-9)
    # zero-mean noise in 20,000 coordinates: |G|^2 is estimated as ~0, so the gain is ~k
    gen = torch.Generator().manual_seed(3)
    noise = [[torch.randn(20_000, generator=gen, dtype=torch.float64)] for _ in range(k)]
    mean = torch.stack([g[0] for g in noise]).mean(0)
    noise = [[g[0] - mean] for g in noise]  # exactly zero mean: |G|^2 = 0
    params = [nn.Parameter(torch.ones(20_000, dtype=torch.float64))]
    opt = optim.create(params, "adascale_sgd", lr=0.1, smoothing=0.0, exclude=None)
    for grads in noise:
        backward(params, grads)
        opt.observe()
    opt.step()
    assert opt.gain == pytest.approx(k, rel=1e-6)


@pytest.mark.parametrize("name,base,hparams", [
    ("simigrad_sgd", "sgd", dict(weight_decay=0.1)),
    ("simigrad_lars", "lars", dict(weight_decay=0.1, eta=0.05)),
    ("simigrad_sgd", "sgd", dict(weight_decay=0.1, nesterov=True)),   # the base is tested against float64 with it
    ("simigrad_lars", "lars", dict(weight_decay=0.1, eta=0.05, nesterov=True)),
    ("simigrad_lamb", "lamb", dict(weight_decay=0.1)),
])  # fmt: skip
def test_simigrad_optimizers_step_as_their_base_and_measure_the_halves(name, base, hparams):
    ws, steps = weights(), gradients(len(LRS), k=5)
    ours, opt = run(name, ws, steps, LRS, **hparams)
    plain, _ = run(base, ws, steps, LRS, **hparams)
    assert_history(ours, plain, **TIGHT)
    diag = opt.diagnostics()
    assert diag["similarity"] == pytest.approx(ref_cosine(steps[-1]), rel=1e-9)
    assert (diag["grad_var"], diag["grad_sqnorm"]) == pytest.approx(ref_noise(steps[-1]), rel=1e-10)
    assert opt.reduces_gradients is True


@pytest.mark.parametrize("name,base", [("simigrad_lars", "lars"), ("simigrad_lamb", "lamb")])
def test_measuring_the_halves_changes_no_bit_of_the_fp32_steps(name, base):
    """The update takes the whole sum, summed in the order every optimizer sums (the halves are extra
    buffers): in fp32 the steps equal the base optimizer's bit for bit, so adding SimiGrad's measurement
    (or making it exact) moves no committed figure."""
    ws, steps = (
        [w.float() for w in weights()],
        [[[g.float() for g in gs] for gs in groups] for groups in gradients(len(LRS), k=5)],
    )
    ours, _ = run(name, ws, steps, LRS, weight_decay=0.1)
    plain, _ = run(base, ws, steps, LRS, weight_decay=0.1)
    assert_history(ours, plain, rtol=0, atol=0)


def test_similarity_is_one_for_identical_halves_and_minus_one_for_opposite_ones():
    ws, g = weights(), gradients(1)[0][0]
    _, opt = run("simigrad_sgd", ws, [[g, g, g, g]], [0.1])
    assert opt.diagnostics()["similarity"] == pytest.approx(1.0, abs=1e-9)
    _, opt = run("simigrad_sgd", ws, [[g, [-x for x in g]]], [0.1])
    assert opt.diagnostics()["similarity"] == pytest.approx(-1.0, abs=1e-9)


@pytest.mark.parametrize("name", ["vrgd_lars", "vrgd_adam"])
def test_vrgd_reports_the_same_noise_statistics(name):
    ws, steps = weights(), gradients(3, k=6)
    _, opt = run(name, ws, steps, LRS[:3])
    diag = opt.diagnostics()
    assert (diag["grad_var"], diag["grad_sqnorm"]) == pytest.approx(ref_noise(steps[-1]), rel=1e-9)


def test_noise_statistics_are_unbiased_on_average():
    """Groups g_d = G + noise of known variance: E[grad_var] = tr(noise cov), E[grad_sqnorm] = |G|^2."""
    gen = torch.Generator().manual_seed(7)
    G = torch.randn(50, generator=gen, dtype=torch.float64)
    sigma, k, trials = 0.5, 4, 4000
    vs, ss = [], []
    for _ in range(trials):
        groups = G + sigma * torch.randn(k, 50, generator=gen, dtype=torch.float64)
        var, sqr = optim.base.noise((groups**2).sum(), groups.mean(0) @ groups.mean(0), k)
        vs.append(float(var))
        ss.append(float(sqr))
    assert sum(vs) / trials == pytest.approx(50 * sigma**2, rel=0.02)
    assert sum(ss) / trials == pytest.approx(float(G @ G), rel=0.02)


def test_group_optimizers_need_two_groups():
    params = [nn.Parameter(w.clone()) for w in weights()]
    opt = optim.create(params, "adascale_lars", lr=0.1)
    backward(params, gradients(1)[0][0])
    opt.observe()
    with pytest.raises(RuntimeError, match="at least 2 groups"):
        opt.step()


TWO_RANKS = ["adascale_lars", "simigrad_sgd"]


def _two_ranks(rank: int, folder: str, steps):
    """Each of TWO_RANKS on 2 gloo ranks of two groups each; one process group for all (a spawned process spends
    seconds importing)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=2)
    try:
        for name in TWO_RANKS:
            params = [nn.Parameter(w.clone()) for w in weights()]
            opt = optim.create(params, name, lr=0.1, weight_decay=0.1)
            for lr, groups in zip(LRS[:3], steps):
                for group in opt.param_groups:
                    group["lr"] = lr
                for i, grads in enumerate(groups[2 * rank : 2 * rank + 2]):
                    backward(params, grads)
                    opt.observe(index=2 * rank + i)
                opt.step()
                opt.zero_grad(set_to_none=True)
            torch.save(([p.detach() for p in params], opt.diagnostics()), f"{folder}/{name}-rank{rank}.pt")
        dist.barrier()  # neither rank tears gloo down while the other still talks to it (a rare SIGABRT in CI)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The gradients of 3 steps of 4 groups, and the folder where each rank saved what each optimizer reached."""
    folder, steps = tmp_path_factory.mktemp("two-ranks"), gradients(3, k=4)
    start_ranks(_two_ranks, (str(folder), steps), 2)
    return folder, steps


@pytest.mark.slow
@pytest.mark.parametrize("name", TWO_RANKS)
def test_two_ranks_of_two_groups_equal_one_process_of_four(two_ranks, name):
    folder, steps = two_ranks
    single, opt = run(name, weights(), steps, LRS[:3], weight_decay=0.1)
    for rank in (0, 1):
        final, diag = torch.load(folder / f"{name}-rank{rank}.pt")
        assert_history([final], [single[-1]], rtol=1e-12, atol=1e-14)
        assert diag == pytest.approx(opt.diagnostics(), rel=1e-10)


@pytest.mark.parametrize("ratio", [1.0, 1e3, 1e6])
def test_similarity_is_exact_when_one_half_is_much_smaller_than_the_other(ratio):
    """fp32 parameters, halves whose norms differ by `ratio`: the cosine against a float64 cosine of the
    explicitly formed halves (an fp32 sum of both halves, or dot products of it, would lose the small one)."""
    gen = torch.Generator().manual_seed(7)
    shapes = [(64, 48), (48,), (16, 8, 3, 3)]
    params = [nn.Parameter(torch.zeros(s)) for s in shapes]
    opt = optim.create(params, "simigrad_sgd", lr=0.1, exclude=None)
    shared = [torch.randn(s, generator=gen) for s in shapes]  # the halves share a direction: cosine near 0.8
    groups = [
        [(a + 0.5 * torch.randn(a.shape, generator=gen)) / (1.0 if i % 2 == 0 else ratio) for a in shared]
        for i in range(6)
    ]
    for i, grads in enumerate(groups):
        backward(params, grads)
        opt.observe(i)
    opt.step()
    even, odd = (
        torch.stack([torch.cat([x.double().flatten() for x in grads]) for grads in groups[h::2]]).sum(0) for h in (0, 1)
    )
    reference = float(even @ odd / (even.norm() * odd.norm()))
    assert 0.5 < reference < 0.95
    assert opt.similarity == pytest.approx(reference, abs=1e-6)


def ref_noise_first(groups, m: int = 1):
    """(grad_var, grad_sqnorm) from two batch sizes (McCandlish et al. 2018, app. A.1): the mean of the first m
    groups and the mean of all k; E||g_small||^2 = |G|^2 + V/m and E||g_bar||^2 = |G|^2 + V/k (V: one group's)."""
    k = len(groups)
    flat = [torch.cat([g.flatten() for g in grads]) for grads in groups]
    first, mean = torch.stack(flat[:m]).mean(0), torch.stack(flat).mean(0)
    small, big = float(first @ first), float(mean @ mean)
    var = (small - big) / (1 / m - 1 / k)
    return var, big - var / k


@pytest.mark.parametrize("name", ["sgd", "lars", "adamw"])
def test_plain_optimizers_log_the_noise_from_their_first_group_and_the_mean(name):
    """A plain optimizer keeps only the groups' sum, so its noise statistics come from the first group (p.grad
    before the second is added) and the mean: equal to the float64 equations at every step; one group: none."""
    ws, steps = weights(), gradients(steps=3, k=4)
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, name, lr=0.1)
    for groups in steps:
        run_steps(opt, params, [groups])
        diag = opt.diagnostics()
        assert (diag["grad_var"], diag["grad_sqnorm"]) == pytest.approx(ref_noise_first(groups), rel=1e-10)
    backward(params, gradients(steps=1, k=1)[0][0])
    opt.observe()
    opt.step()
    assert "grad_var" not in opt.diagnostics()


@pytest.mark.parametrize("m", [2, 4])
def test_plain_optimizers_log_the_noise_when_one_pass_holds_several_groups(m):
    """A micro-batch of m ghost-BatchNorm groups is one backward (p.grad: the m groups' sum), observed once with
    groups=m: the noise comes from that first observation's mean and the step's, equal to the float64 equations
    for batch sizes m b and k b; the step's mean gradient is the same as m observations one by one give."""
    ws, steps = weights(), gradients(steps=3, k=8)
    params = [nn.Parameter(w.clone()) for w in ws]
    opt = optim.create(params, "lars", lr=0.1)
    for groups in steps:
        for start in range(0, len(groups), m):
            backward(params, [sum(g) for g in zip(*groups[start : start + m])])
            opt.observe(groups=m)
        opt.step()
        opt.zero_grad(set_to_none=True)
        diag = opt.diagnostics()
        assert (diag["grad_var"], diag["grad_sqnorm"]) == pytest.approx(ref_noise_first(groups, m), rel=1e-10)
    one_by_one = [nn.Parameter(w.clone()) for w in ws]
    reference = optim.create(one_by_one, "lars", lr=0.1)
    run_steps(reference, one_by_one, steps)
    for p, q in zip(params, one_by_one):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)


def test_noise_from_the_first_group_is_unbiased():
    """Over many steps of Gaussian groups (known |G|^2 and per-group noise V), the first-group estimate averages to
    both, as the all-groups estimate does (the two differ in variance only)."""
    gen = torch.Generator().manual_seed(3)
    n, k, sigma = 50, 8, 0.5
    true = torch.randn(n, generator=gen, dtype=torch.float64)
    p = nn.Parameter(torch.zeros(n, dtype=torch.float64))
    opt = optim.create([p], "sgd", lr=0.1)  # the gradients are given: where p moves changes none of them
    out = []
    for _ in range(2000):
        run_steps(opt, [p], [[[true + sigma * torch.randn(n, generator=gen, dtype=torch.float64)] for _ in range(k)]])
        out.append((opt.diagnostics()["grad_var"], opt.diagnostics()["grad_sqnorm"]))
    var, sqnorm = (sum(x) / len(out) for x in zip(*out))
    assert var == pytest.approx(n * sigma**2, rel=0.05)
    assert sqnorm == pytest.approx(float(true @ true), rel=0.05)
