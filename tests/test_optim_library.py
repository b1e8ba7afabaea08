"""Library optimizers (bench/optim/library.py): each record's optimizer is the library's own, bit for bit; VRGD over
a library equals the equations in float64; Schedule-Free evaluates its evaluation weights; bad input is one sentence.
Every list here comes from the catalog: a new library record joins each test."""

import copy
import itertools

import pytest
import torch
from torch import nn

from bench import catalog, optim
from bench.engine.train import evaluate, evaluation_weights
from bench.errors import UserError
from bench.recipe import Recipe

LIBRARY = sorted(name for name, r in catalog.OPTIMIZERS.items() if r.library and not r.reduces_gradients)
VRGD_LIBRARY = sorted(name for name, r in catalog.OPTIMIZERS.items() if r.library and r.reduces_gradients)
SCHEDULE_FREE = sorted(name for name, r in catalog.OPTIMIZERS.items() if r.schedule_free)
LR = {"nesterov": 0.1, "nadamw": 1e-2, "muon": 0.02, "kron": 1e-3, "lion": 1e-3, "soap": 1e-2}  # default: 1e-2


def net(dtype=torch.float32, seed=0):
    """A conv layer (Muon's conv mode, SOAP's and Kron's 4-D preconditioners), BatchNorm and biases (the
    excluded group), a linear head."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(24, 5)
    ).to(dtype)


def grads_for(model, steps, groups, dtype, seed=1):
    """Fixed per-group gradients for every step: [step][group] -> one tensor per parameter."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda: [torch.randn(p.shape, generator=gen, dtype=torch.float64).to(dtype) for p in model.parameters()]
    return [[draw() for _ in range(groups)] for _ in range(steps)]


def direct(name, model, lr, wd, **options):
    """The library's class built directly over bench's exclusion groups, with the record's presets."""
    record = catalog.OPTIMIZERS[name]
    opt = record.load_library()(
        optim.param_groups(model), lr=lr, weight_decay=wd, **{**dict(record.presets), **options}
    )
    if record.schedule_free:
        opt.train()
    return opt


def same(a, b) -> bool:
    """Bitwise equal, through the lists and dicts an optimizer's state holds (Kron's preconditioners)."""
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """timm's Kron compiles its preconditioner updates (torch.compile): minutes on a loaded 2-core CPU per shape.
    The tests run them eagerly, bench's optimizer and the library's alike (the same functions)."""
    monkeypatch.setattr("timm.optim.kron.has_dynamo", False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", LIBRARY)
def test_each_library_record_is_the_library_s_own_optimizer_bitwise(name, dtype):
    """bench's optimizer and the library's, built directly over the same param groups (the excluded group
    included: weight decay 0), take bitwise the same steps and keep the same state over four steps."""
    ours, theirs = net(dtype), net(dtype)
    lr = LR.get(name, 1e-2)
    opt = optim.create(ours, name, lr=lr, weight_decay=0.1)
    ref = direct(name, theirs, lr, 0.1)
    assert [len(g["params"]) for g in opt.param_groups] == [2, 4]  # conv and linear weights; BN and biases
    assert opt.param_groups[1]["weight_decay"] == 0.0
    for step, [grads] in enumerate(grads_for(ours, 4, 1, dtype)):
        for model, o in ((ours, opt), (theirs, ref)):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            if o is opt:
                opt.observe()
            o.param_groups[0]["lr"] = o.param_groups[1]["lr"] = lr * (step + 1) / 4  # the runner's schedule
            o.step()
            o.zero_grad(set_to_none=True)
        for a, b in zip(ours.parameters(), theirs.parameters()):
            assert torch.equal(a, b), (name, step)
    assert same(opt.state_dict(), ref.state_dict())
    moved = [(a - b).abs().max().item() for a, b in zip(ours.parameters(), net(dtype).parameters())]
    assert min(moved) > 0, "every tensor moved, the excluded ones too"


def gsnr_reference(groups, gamma, eps):
    """VRGD's equations (docs/algorithms.md) in float64, per tensor: g_vr = clip(r / mean(r), gamma, 1) * g_bar,
    r = g_bar^2 / (var + eps), var the population variance over the k groups; mean(r) = 0 gives factors gamma."""
    out = []
    for tensors in zip(*groups):
        g = torch.stack(tensors)
        mean = g.mean(0)
        var = (g.square().mean(0) - mean.square()).clamp(min=0)
        r = mean.square() / (var + eps)
        r = r / r.mean() if r.mean() > 0 else torch.zeros_like(r)
        out.append(r.clamp(gamma, 1.0) * mean)
    return out


@pytest.mark.parametrize("name", VRGD_LIBRARY)
def test_vrgd_over_a_library_equals_gsnr_scaling_then_the_library_s_step_in_float64(name):
    """Four steps from the first of k = 3 groups: each is the library's step on the GSNR-scaled mean gradient.
    Edge cases: the conv bias's gradient is 0 in every group (g_bar = 0: it gets no step, its factors are
    gamma * 0), the BatchNorm bias's is the same whole numbers in every group (var = 0 exactly, no rounding of the
    sums: r = g^2 / eps, finite)."""
    record = catalog.OPTIMIZERS[name]
    ours, theirs = net(torch.float64), net(torch.float64)
    lr, gamma, eps = LR.get(record.base, 1e-2), 0.1, 1e-12
    opt = optim.create(ours, name, lr=lr, weight_decay=0.1, gamma=gamma)
    ref = direct(record.base, theirs, lr, 0.1)
    names = [n for n, _ in ours.named_parameters()]
    for step, groups in enumerate(grads_for(ours, 4, 3, torch.float64)):
        groups = [list(g) for g in groups]
        for g in groups:
            g[names.index("0.bias")] = torch.zeros_like(g[names.index("0.bias")])
            g[names.index("1.bias")] = torch.arange(1.0, 7.0, dtype=torch.float64) * (step + 1)  # exact: var = 0
        for g in groups:
            for p, grad in zip(ours.parameters(), g):
                p.grad = grad.clone()
            opt.observe()
        opt.step()
        opt.zero_grad(set_to_none=True)
        for p, grad in zip(theirs.parameters(), gsnr_reference(groups, gamma, eps)):
            p.grad = grad
        ref.step()
        ref.zero_grad(set_to_none=True)
        for n, a, b in zip(names, ours.parameters(), theirs.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=f"{name} step {step}: {n}")
    start = dict(net(torch.float64).named_parameters())
    assert torch.equal(dict(ours.named_parameters())["0.bias"], start["0.bias"])  # g_bar = 0: not moved
    assert not torch.equal(dict(ours.named_parameters())["1.bias"], start["1.bias"])  # var = 0: moved, finite
    plain = net(torch.float64)
    plain_opt = direct(record.base, plain, lr, 0.1)
    for groups in grads_for(plain, 4, 3, torch.float64):
        for p, *g in zip(plain.parameters(), *groups):
            p.grad = sum(g) / 3
        plain_opt.step()
    assert not torch.equal(plain[5].weight, ours[5].weight), "the GSNR factors changed the steps"


def bn_batches(n=4, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 3, 8, 8, generator=gen), torch.randint(0, 5, (8,), generator=gen)) for _ in range(n)]


@pytest.mark.parametrize("name", SCHEDULE_FREE)
def test_schedule_free_evaluates_its_evaluation_weights_as_the_package_documents(name):
    """bench's evaluation (engine.train.evaluation_weights) equals the schedulefree package's documented procedure
    (model.train(); optimizer.eval(); forward training batches without gradients; model.eval(); evaluate);
    evaluating the training iterate instead gives another number; afterwards the run is as it was, bit for bit."""
    recipe = Recipe.model_validate(
        {"name": "sf", "model": {"name": "x"}, "global_batch": 8, "optimizer": {"name": name, "lr": 0.5}}
        | {"epochs": 1, "target_top1": 50}
    )
    model = net()
    opt = optim.create(model, name, lr=0.05 if "adamw" in name else 0.5, weight_decay=1e-4)
    train, val = bn_batches(), bn_batches(2, seed=3)
    for images, labels in train * 3:
        nn.functional.cross_entropy(model(images), labels).backward()
        opt.observe()
        opt.step()
        opt.zero_grad(set_to_none=True)
    before = copy.deepcopy(model.state_dict())
    device = torch.device("cpu")
    with evaluation_weights(model, opt, lambda: (batch for batch in train), recipe, device):
        ours = evaluate(model, val, recipe, device)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "evaluation changed the training iterate"
    without = evaluate(model, val, recipe, device)

    package, package_opt = copy.deepcopy(model), None
    package_opt = direct(name, package, 0.5, 1e-4)
    package_opt.load_state_dict(opt.state_dict())
    package.train()
    package_opt.eval()
    with torch.no_grad():
        for images, _ in itertools.islice(train, 50):
            package(images)
    package.eval()
    documented = evaluate(package, val, recipe, device)
    assert ours == documented
    assert ours["loss"] != without["loss"]


def test_an_option_the_library_does_not_accept_is_one_sentence_naming_the_accepted_keys():
    with pytest.raises(UserError) as e:
        optim.check("muon", {"lr": 0.02, "ns_step": 5})
    said = str(e.value)
    assert "unknown hyperparameter 'ns_step' for optimizer 'muon' (did you mean 'ns_steps'?)" in said
    assert "conv_mode" in said and said.count("\n") == 0


def test_a_library_not_installed_is_one_sentence_naming_the_package(monkeypatch):
    import sys

    from bench.optim import library

    library._adapt.cache_clear()
    monkeypatch.delitem(optim.REGISTRY._built, "schedulefree_sgd", raising=False)  # built by an earlier test
    monkeypatch.setitem(sys.modules, "schedulefree", None)  # import schedulefree raises ModuleNotFoundError
    try:
        with pytest.raises(UserError, match=r"optimizer 'schedulefree_sgd' needs the schedulefree>=1.4.1 package"):
            optim.create(nn.Linear(2, 2), "schedulefree_sgd", lr=1.0)
    finally:
        library._adapt.cache_clear()


def test_vrgd_over_a_library_keeps_its_gsnr_momentum_apart_and_resumes_it():
    """beta3 > 0: the GSNR momentum is bench's state, saved beside the library's (which never sees the key)."""
    model = net()
    opt = optim.create(model, "vrgd_nadamw", lr=1e-2, beta3=0.9)
    for groups in grads_for(model, 2, 2, torch.float32):
        for g in groups:
            for p, grad in zip(model.parameters(), g):
                p.grad = grad.clone()
            opt.observe()
        opt.step()
    saved = opt.state_dict()
    assert set(saved["bench_state"]) == {"gsnr_momentum"} and "gsnr_momentum" not in saved["state"][0]
    again = optim.create(net(), "vrgd_nadamw", lr=1e-2, beta3=0.9)
    again.load_state_dict(saved)
    assert torch.equal(again._own["gsnr_momentum"][0], opt._own["gsnr_momentum"][0]) and again.gsnr_step == 2


# ---- through the runner: `bench run`, kill and resume, two ranks, the example sweep -------------------------------

RUN = """
model: {name: resnet8_cifar}
data: {dataset: folder, path: DATA, image_size: 16, workers: 0, eval_batch: 256}
global_batch: 32
micro_batch: 16
optimizer: {name: OPT, lr: LR}
schedule: {decay: constant}
epochs: EPOCHS
eval: {every_epochs: EVERY}
checkpoint: {every_steps: 2}
target_top1: 99
"""  # about 4 steps (the plan rounds the epochs up), two evaluations, checkpoints every 2 steps


@pytest.fixture(scope="module")
def digits_folder(tmp_path_factory):
    """The embedded dataset (scikit-learn's digits) as a folder, written once for the module."""
    from bench.cli import main

    root = tmp_path_factory.mktemp("digits") / "digits"
    assert main(["data", "digits", "--out", str(root), "--size", "16"]) == 0
    return root


@pytest.mark.slow
@pytest.mark.parametrize("name", LIBRARY + VRGD_LIBRARY)
def test_each_record_runs_through_bench_run_and_a_killed_run_resumes_bitwise(name, digits_folder, tmp_path, capsys):
    """The reference and the resumed run in this process (their bits compared in one process), the killed run in a
    fork of it (conftest.killed_at: BENCH_CRASH_AT kills its own process)."""
    import json

    import pandas as pd

    from bench.cli import main
    from tests.conftest import killed_at

    train = sum(1 for _ in (digits_folder / "train").rglob("*.png"))
    lr = LR.get(catalog.OPTIMIZERS[name].base, 1e-2)
    text = RUN.replace("DATA", str(digits_folder)).replace("OPT", name).replace("LR", str(lr))
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(text.replace("EPOCHS", f"{4 * 32 / train:.6f}").replace("EVERY", f"{2 * 32 / train:.6f}"))

    def outcome(results):
        [run] = [p for p in (results / name).iterdir() if p.is_dir()]
        final = torch.load(sorted(run.glob("ckpt-*.pt"))[-1], weights_only=False)
        meta = json.loads((run / "meta.json").read_text())
        return pd.read_csv(run / "metrics.csv").drop(columns=["train_time_s"]), final, meta

    assert main(["run", str(recipe), "--out", str(tmp_path / "ref"), "--no-progress"]) == 0
    metrics, final, meta = outcome(tmp_path / "ref")
    assert meta["status"] == "completed" and len(metrics) == 2 and metrics["step"].iloc[-1] >= 4
    assert metrics["val_top1"].notna().all() and final["progress"]["step"] == metrics["step"].iloc[-1]
    assert killed_at("step:3", "run", str(recipe), "--out", str(tmp_path / "k"), "--no-progress") == -9
    capsys.readouterr()
    assert main(["run", str(recipe), "--out", str(tmp_path / "k"), "--no-progress"]) == 0
    assert "resuming" in capsys.readouterr().out
    got = outcome(tmp_path / "k")
    pd.testing.assert_frame_equal(got[0], metrics, check_exact=True)
    assert same(got[1]["model"], final["model"]) and same(got[1]["optimizer"], final["optimizer"])


def _two_ranks(rank, world, port, paths, outs, steps):
    import timm.optim.kron

    from tests.helpers import train_steps

    timm.optim.kron.has_dynamo = False
    train_steps(rank, world, port, paths, outs, steps)


@pytest.mark.slow  # float64, on 1 and 2 ranks
def test_two_gloo_ranks_equal_one_process_accumulating_for_every_library_record(tmp_path, tiny_dataset):
    """Every library record on 2 ranks x 4 micro-batches against 1 process x 8, float64, three steps, on the CIFAR
    ResNet-8 (its convolutions are Muon's, SOAP's and Kron's 4-D cases): DDP reduces a plain record's gradients, VRGD
    over a library its own statistics; the sums differ only in their order. One spawn for all records (37 s).

    SOAP alone differs, and not by rounding (measured 2026-11-27): equal after its first step (which only gathers
    statistics), then fc.weight 0.018 apart after two steps while every convolution agrees within 3e-12. Its
    64 x 64 second-moment statistic of the 10 x 64 head has rank at most 20 after two steps of 32 images: the
    eigenbasis of its null space is not unique, and the order of the gradient sums picks one; the update in that
    basis then differs. A property of SOAP's eigendecomposition, not of the ranks: it is left out of the check."""
    from tests.conftest import free_port, start_ranks
    from tests.helpers import equiv_recipe, params_after

    names = LIBRARY + VRGD_LIBRARY
    paths = []
    for n in names:
        lr = LR.get(catalog.OPTIMIZERS[n].base, 1e-2)
        path = equiv_recipe(tmp_path, tiny_dataset, n, lr, "fp64", model="resnet8_cifar")
        path.write_text(path.read_text().replace(", momentum: 0.9", ""))  # SGD's: each library its own options
        paths.append(path.rename(path.with_name(f"{n}.yaml")))
    one = params_after(tmp_path, paths, 1)
    outs = [str(tmp_path / f"{n}-2.pt") for n in names]
    start_ranks(_two_ranks, (2, free_port(), [str(p) for p in paths], outs, 3), 2)
    differ = {}
    for name, want, out in zip(names, one, outs):
        got = torch.load(out)
        worst = max(float(((got[k] - want[k]).abs() - 1e-7 * want[k].abs()).max()) for k in want)
        if worst > 1e-9:
            differ[name] = worst
    differ.pop("soap", None)  # see above
    assert not differ, f"beyond rtol 1e-7, atol 1e-9 (the excess over rtol): {differ}"


@pytest.mark.slow
def test_the_example_sweep_nadamw_against_muon_runs_end_to_end(tmp_path):
    """recipes/sweeps/optimizers.yaml as it is, made tiny (1 trial per cell, 2 steps, one rerun seed): both arms at
    both batches train from their default spaces (Muon's lr overridden), and the verdict names both."""
    import yaml

    from bench import sweep as sweep_mod
    from bench.analysis import results
    from bench.cli import main
    from tests.conftest import RECIPES

    spec = yaml.safe_load((RECIPES / "sweeps" / "optimizers.yaml").read_text())
    spec.update(
        base=str(RECIPES / "sweeps" / "base" / "digits.yaml"),
        trials=1,
        budget={"steps": 2},
        reruns={"seeds": [1]},
        set={"data.image_size": 16, "data.digits.size": 16, "eval.every_epochs": 10, "schedule.warmup_epochs": 0},
    )
    sweep = tmp_path / "optimizers.yaml"
    sweep.write_text(yaml.safe_dump(spec))
    out = ["--out", str(tmp_path / "out"), "--plots", str(tmp_path / "plots")]
    assert main(["sweep", str(sweep), *out, "--allow-dirty"]) == 0
    runs = results.load([tmp_path / "out"])
    assert sorted(set(zip(runs["optimizer"], runs["global_batch"]))) == [
        ("muon", 64),
        ("muon", 256),
        ("nadamw", 64),
        ("nadamw", 256),
    ]
    assert set(runs["status"]) <= {"completed", "diverged"}
    trials = [t for t in sweep_mod.expand(sweep, sweep_mod.load(sweep)) if t.arm == "muon"]
    assert trials and all(0.002 <= t.recipe.optimizer.lr <= 0.2 for t in trials)  # the override of the default
    assert set(trials[0].point) == {"optimizer.lr", "weight_decay", "label_smoothing"}
    assert "Muon" in (tmp_path / "out" / "verdict.md").read_text()
