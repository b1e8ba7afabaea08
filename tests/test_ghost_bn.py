"""Ghost BatchNorm (model.bn_batch) and the batched groups pass: the same steps as sequential micro-batches."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench import defaults
from bench import recipe as recipe_mod
from bench.engine import distributed, ghost_bn
from bench.engine.group_pass import BatchedGroups
from bench.engine.plan import make_plan
from bench.engine.train import Trainer
from bench.errors import UserError
from bench.models import resnet8_cifar
from tests.conftest import free_port, start_ranks, write_recipe
from tests.helpers import process_group

RECIPE = """
model: {name: resnet8_cifar, kwargs: {}BN}
data: {dataset: folder, path: DATA, image_size: 8, workers: 0, eval_batch: 64}
global_batch: 32
micro_batch: MICRO
optimizer: {name: OPT, lr: LR, momentum: 0.9}
schedule: {warmup_epochs: 0.2}
epochs: 1
weight_decay: 1.0e-4
engine: {precision: PRECISION, group_pass: PASS, threads: 1, channels_last: CL}
target_top1: 50
"""
STEPS = 3
OPTIMIZERS = [("sgd", 0.2), ("lars", 2.0), ("vrgd_lars", 2.0), ("adascale_sgd", 0.005), ("simigrad_lars", 2.0)]
TOL = dict(rtol=1e-10, atol=1e-12)


def _recipe(tmp_path, data, opt, lr, micro, bn_batch=None, group_pass="auto", channels_last=False, precision="fp64"):
    bn = f", bn_batch: {bn_batch}" if bn_batch else ""
    text = RECIPE.replace("DATA", str(data)).replace("OPT", opt).replace("LR", str(lr)).replace("BN", bn)
    text = text.replace("MICRO", str(micro)).replace("PASS", group_pass).replace("CL", str(channels_last).lower())
    text = text.replace("PRECISION", precision)
    return write_recipe(tmp_path / f"{opt}-{micro}-{bn_batch}-{group_pass}-{channels_last}-{precision}.yaml", text)


def _state(trainer: Trainer, losses: list, diagnostics: list) -> dict:
    """Everything a step leaves behind, as float64 tensors keyed by name."""
    out = {f"param {k}": v.detach().clone() for k, v in trainer.model.named_parameters()}
    out.update({f"buffer {k}": v.detach().clone().double() for k, v in trainer.model.named_buffers()})
    for i, (p, state) in enumerate(
        zip(trainer.model.parameters(), (trainer.opt.state.get(p, {}) for p in trainer.model.parameters()))
    ):
        out.update({f"opt {i} {k}": v.detach().clone() for k, v in state.items() if torch.is_tensor(v)})
    out["loss"] = torch.tensor(losses, dtype=torch.float64)
    for key in sorted(set().union(*diagnostics)):  # grad_var, grad_sqnorm (GSNR statistics), gain, similarity...
        out[f"diag {key}"] = torch.tensor([d[key] for d in diagnostics], dtype=torch.float64)
    return out


def _run(rank, world, port, paths, outs):
    with process_group(rank, world, port) as dist:
        for path, out in zip(paths, outs):
            trainer = Trainer(recipe_mod.load(path), dist)
            batches = trainer.data.train(0, STEPS)
            losses, diagnostics = [], []
            for step in range(STEPS):
                loss = trainer.step(batches, lr=trainer.recipe.optimizer.lr * (step + 1) / STEPS)
                if torch.distributed.is_initialized():
                    torch.distributed.all_reduce(loss)
                    loss /= world
                losses.append(float(loss))
                diagnostics.append(trainer.opt.diagnostics())
            if rank == 0:
                torch.save(_state(trainer, losses, diagnostics), out)


def _states(tmp_path, paths, world=1) -> list[dict]:
    outs = [str(tmp_path / f"{p.stem}-w{world}.pt") for p in paths]
    if world == 1:
        _run(0, 1, 0, paths, outs)
        for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(k)
    else:
        start_ranks(_run, (world, free_port(), paths, outs), world)
    return [torch.load(out) for out in outs]


# A plain optimizer's noise scale compares its first observation with the step's mean (two batch sizes): one group
# of bn_batch images in micro-batches of bn_batch, m groups in a micro-batch of m: both unbiased, not equal
# (tests/test_optim_groups.py checks each against the float64 equations).
PLAIN_NOISE = ("diag grad_var", "diag grad_sqnorm")


def _assert_same(got: dict, want: dict, what: str, skip: tuple[str, ...] = ()) -> None:
    assert got.keys() == want.keys(), what
    for key in (k for k in want if k not in skip):
        torch.testing.assert_close(got[key], want[key], **TOL, msg=f"{what}: {key}")


@pytest.mark.parametrize("opt,lr", OPTIMIZERS)
def test_batched_and_sequential_groups_equal_micro_batches_of_bn_batch_in_float64(tmp_path, tiny_dataset, opt, lr):
    """Micro-batches of 16 with bn_batch 4, groups in one vmap pass or one by one, take the steps micro-batches of
    4 take (8 groups of 4): parameters, optimizer state, BatchNorm running statistics, loss and the diagnostics
    (grad_var, grad_sqnorm: the GSNR statistics; gain, similarity, trust ratios) over 3 steps, to ~1e-12."""
    paths = [
        _recipe(tmp_path, tiny_dataset, opt, lr, 4),
        _recipe(tmp_path, tiny_dataset, opt, lr, 16, 4, "batched"),
        _recipe(tmp_path, tiny_dataset, opt, lr, 16, 4, "sequential"),
    ]
    reference, batched, sequential = _states(tmp_path, paths)
    assert reference["loss"].min() > 0 and any("running_mean" in k for k in reference)
    if opt != "sgd" and opt != "lars":
        assert "diag grad_var" in reference
    skip = PLAIN_NOISE if opt in ("sgd", "lars") else ()
    _assert_same(batched, reference, f"{opt} batched", skip)
    _assert_same(sequential, reference, f"{opt} sequential", skip)


def test_batched_groups_in_channels_last_equal_micro_batches_of_bn_batch(tmp_path, tiny_dataset):
    """engine.channels_last with the batched pass (vmap refuses a channels_last copy inside it: the first GPU
    check found that): VRGD-LARS's steps equal those of micro-batches of 4 in channels_last, in float64."""
    paths = [
        _recipe(tmp_path, tiny_dataset, "vrgd_lars", 2.0, 4, channels_last=True),
        _recipe(tmp_path, tiny_dataset, "vrgd_lars", 2.0, 16, 4, "batched", channels_last=True),
    ]
    reference, batched = _states(tmp_path, paths)
    _assert_same(batched, reference, "vrgd_lars batched, channels_last")


def test_batched_groups_in_bf16_equal_groups_one_by_one_to_bf16_rounding():
    """Under bf16 autocast (vmap refuses batch_norm's backward with a bf16 input and float32 weights: rehearsing
    the GPU check's ghost BatchNorm step found that), each group's gradient from the one pass is the gradient of
    that group through the model alone, to bf16's rounding: measured 0.2-1.8% in norm, against 0.3-40% between
    bf16 and float32 (the same groups), so 5% leaves room for other kernels and fails a wrong group or scale."""
    torch.manual_seed(0)
    model = ghost_bn.convert(resnet8_cifar(num_classes=10), 4, "resnet8_cifar")
    images, labels = torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        grads, losses = BatchedGroups(copy.deepcopy(model), 0.0)(images, labels, 4)
        for d, (x, y) in enumerate(zip(images.chunk(4), labels.chunk(4))):
            model.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            assert abs(float(losses[d]) - loss.item()) < 0.02 * loss.item()
            for (name, p), g in zip(model.named_parameters(), grads.values()):
                assert (g[d].float() - p.grad).norm() < 0.05 * p.grad.norm(), f"group {d}: {name}"


@pytest.mark.slow
def test_batched_groups_on_two_ranks_equal_micro_batches_of_bn_batch(tmp_path, tiny_dataset):
    """On 2 ranks (gloo), micro-batches of 8 with bn_batch 4 (groups in one vmap pass) = micro-batches of 4, for
    the optimizers that keep the groups apart (all-reduced statistics) and plain LARS (DDP's all-reduce); the
    parameters are also those of one process (the running statistics are rank 0's own, as without ghost BN)."""
    cases = [("lars", 2.0), ("vrgd_lars", 2.0), ("simigrad_lars", 2.0)]
    paths = [_recipe(tmp_path, tiny_dataset, o, lr, 4) for o, lr in cases]
    paths += [_recipe(tmp_path, tiny_dataset, o, lr, 8, 4, "batched") for o, lr in cases]
    states = _states(tmp_path, paths, world=2)
    alone = _states(tmp_path, paths[:1])[0]
    for (opt, _), got, want in zip(cases, states[3:], states[:3]):
        _assert_same(got, want, f"{opt} on 2 ranks", PLAIN_NOISE if opt == "lars" else ())
    for key in (k for k in alone if k.startswith("param")):
        torch.testing.assert_close(states[0][key], alone[key], **TOL, msg=f"lars, 2 ranks against 1: {key}")


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_running_statistics_follow_the_sequential_rule(fmt):
    """A ghost layer given 3 chunks updates its running statistics as 3 plain BatchNorm calls in order, for an
    exponential momentum and for momentum None (the cumulative average), and normalises each chunk on its own; in
    channels_last too (the layer's own forward and backward, _GhostNorm)."""
    torch.manual_seed(0)
    for momentum in (0.1, None):
        plain = nn.BatchNorm2d(5, momentum=momentum).double()
        model = ghost_bn.convert(nn.Sequential(nn.BatchNorm2d(5, momentum=momentum).double()), 4, "test")
        ghost = model[0]
        ghost.register_forward_pre_hook(lambda m, args: (args[0].contiguous(memory_format=fmt),))
        with torch.no_grad():
            plain.weight.uniform_(0.5, 2.0)
            plain.bias.uniform_(-1, 1)
            ghost.load_state_dict(plain.state_dict())
        x = torch.randn(12, 5, 3, 3, dtype=torch.float64) * 3 + 1
        want = torch.cat([plain(chunk) for chunk in x.split(4)])
        got = model(x)  # the layer in its model, which arranges the chunks
        torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(ghost, name), getattr(plain, name), rtol=1e-14, atol=1e-14)
        assert int(ghost.num_batches_tracked) == 3
        ghost.load_state_dict(plain.state_dict())
        ghost.eval(), plain.eval()
        torch.testing.assert_close(model(x), plain(x.contiguous(memory_format=fmt)), rtol=0, atol=0)  # unchanged


def test_channels_last_layers_equal_micro_batches_of_bn_batch_in_float64(tmp_path, tiny_dataset, monkeypatch):
    """engine.channels_last outside vmap: the ghost layers take their channels_last forward and backward
    (_GhostNorm, counted), and LARS's 3 steps in micro-batches of 16 with bn_batch 4 are those of micro-batches
    of 4 in channels_last: parameters, running statistics, optimizer state, loss, to ~1e-12 in float64."""
    calls = []
    apply = ghost_bn._GhostNorm.apply
    monkeypatch.setattr(ghost_bn._GhostNorm, "apply", lambda *args: calls.append(args[0].shape) or apply(*args))
    paths = [
        _recipe(tmp_path, tiny_dataset, "lars", 2.0, 4, channels_last=True),
        _recipe(tmp_path, tiny_dataset, "lars", 2.0, 16, 4, channels_last=True),
    ]
    reference, ghost = _states(tmp_path, paths)
    assert len(calls) >= STEPS and all(shape[0] == 16 for shape in calls)
    _assert_same(ghost, reference, "lars, channels_last", PLAIN_NOISE)


@pytest.mark.parametrize("impl,channels_last", [("custom", False), ("batch_norm", True)])
def test_a_named_ghost_bn_candidate_runs_in_the_runner_and_equals_micro_batches(
    tmp_path, tiny_dataset, monkeypatch, impl, channels_last
):
    """engine.ghost_bn named in a recipe runs that candidate in the runner, in the layout auto gives the other one
    (custom on a contiguous input, batch_norm on a channels_last one: _GhostNorm counted), and LARS's 3 steps in
    micro-batches of 16 with bn_batch 4 are still those of micro-batches of 4, to ~1e-12 in float64."""
    calls = []
    apply = ghost_bn._GhostNorm.apply
    monkeypatch.setattr(ghost_bn._GhostNorm, "apply", lambda *args: calls.append(args[0].shape) or apply(*args))
    reference = _recipe(tmp_path, tiny_dataset, "lars", 2.0, 4, channels_last=channels_last)
    named = _recipe(tmp_path, tiny_dataset, "lars", 2.0, 16, 4, channels_last=channels_last)
    named.write_text(named.read_text().replace("group_pass:", f"ghost_bn: {impl}, group_pass:"))
    want, got = _states(tmp_path, [reference, named])
    assert (len(calls) >= STEPS) == (impl == "custom") and all(shape[0] == 16 for shape in calls)
    _assert_same(got, want, f"lars, ghost_bn {impl}", PLAIN_NOISE)


COPIES = (torch.ops.aten.clone, torch.ops.aten.copy_, torch.ops.aten._to_copy)


class _Ops(TorchDispatchMode):
    """The aten ops run within, each with the largest number of elements among its outputs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sizes = [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.ops.append((func.overloadpacket, max(sizes, default=0)))
        return out


def test_channels_last_ghost_layer_makes_no_layout_copy():
    """Forward and backward of a ghost layer on a channels_last input run no copy of its size (the regrouping view
    copied it and copied the output back, and their gradients likewise), and give y and dx in channels_last."""
    torch.manual_seed(0)
    model = ghost_bn.convert(nn.Sequential(nn.BatchNorm2d(6)), 4, "test")
    layer, model._ghost_arranged[0] = model[0], 12  # as its model's pre-hook records the batch
    x = torch.randn(12, 6, 5, 7).contiguous(memory_format=torch.channels_last).requires_grad_()
    dy = torch.randn_like(x)
    with _Ops() as seen:
        y = layer(x)
        grads = torch.autograd.grad(y, [x, layer.weight, layer.bias], dy)
    copies = [str(op) for op, size in seen.ops if op in COPIES and size == x.numel()]
    assert not copies, copies
    assert any(op is torch.ops.aten.addcmul for op, _ in seen.ops)  # the dispatch mode saw the layer's ops
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert grads[0].is_contiguous(memory_format=torch.channels_last)
    assert int(layer.num_batches_tracked) == 3


def _chunk_by_chunk(x, weight, bias, g, eps):
    """The reference: F.batch_norm on each chunk i (images i, i + j, ...), its (mean, unbiased variance) alongside."""
    j = x.shape[0] // g
    y = torch.empty_like(x)
    means, variances = [], []
    for i in range(j):
        mean, var = torch.zeros(x.shape[1], dtype=x.dtype), torch.ones(x.shape[1], dtype=x.dtype)
        y[i::j] = F.batch_norm(x[i::j], mean, var, weight, bias, True, 1.0, eps)
        means.append(mean), variances.append(var)
    return y, torch.stack(means), torch.stack(variances)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
@pytest.mark.parametrize("gpu_moments", [False, True])
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format])
def test_the_custom_function_equals_batch_norm_chunk_by_chunk(affine, eps, gpu_moments, fmt, monkeypatch):
    """_GhostNorm (engine.ghost_bn: custom) in float64 against F.batch_norm chunk by chunk, on a channels_last and
    on a contiguous input: y, the chunk means and unbiased variances, and the gradients of x, weight and bias for a
    channels_last dy and for a contiguous one; gradcheck's numerical Jacobians too. gpu_moments: the statistics as
    on a GPU (torch.var_mean), on the CPU."""
    moments = ghost_bn._moments
    monkeypatch.setattr(ghost_bn, "_moments", lambda v, dtype, welford: moments(v, dtype, gpu_moments))
    torch.manual_seed(0)
    g, j, c = 4, 3, 5
    x = (torch.randn(g * j, c, 3, 4, dtype=torch.float64) * 3 + 1).contiguous(memory_format=fmt)
    weight = torch.rand(c, dtype=torch.float64) + 0.5 if affine else None
    bias = torch.rand(c, dtype=torch.float64) - 0.5 if affine else None
    leaves = [t.requires_grad_() for t in (x, weight, bias) if t is not None]
    y, means, variances = ghost_bn._GhostNorm.apply(x, weight, bias, g, eps)
    want, want_means, want_variances = _chunk_by_chunk(x.detach(), weight, bias, g, eps)
    assert y.is_contiguous(memory_format=fmt) and not means.requires_grad
    close = dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(y, want, **close)
    torch.testing.assert_close(means, want_means, **close)
    torch.testing.assert_close(variances, want_variances, **close)
    dys = [torch.randn(y.shape, dtype=y.dtype).contiguous(memory_format=f) for f in (torch.channels_last, fmt)]
    for dy in dys:
        got = torch.autograd.grad(y, leaves, dy, retain_graph=True)
        reference = torch.autograd.grad(_chunk_by_chunk(x, weight, bias, g, eps)[0], leaves, dy)
        assert got[0].is_contiguous(memory_format=fmt)
        for a, b, name in zip(got, reference, ("x", "weight", "bias")):
            torch.testing.assert_close(a, b, **close, msg=f"gradient of {name}")
    small = torch.randn(4, 3, 2, 3, dtype=torch.float64).contiguous(memory_format=fmt)
    w, b = [torch.rand(3, dtype=torch.float64, requires_grad=True) if affine else None for _ in range(2)]
    torch.autograd.gradcheck(lambda *t: ghost_bn._GhostNorm.apply(*t, 2, eps)[0], (small.requires_grad_(), w, b))


@pytest.mark.parametrize("impl", defaults.GHOST)
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_each_ghost_bn_candidate_equals_the_float64_reference(impl, fmt, dtype, monkeypatch):
    """engine.ghost_bn's candidates (convert's impl), on either layout: a ghost layer's output, its gradients and its
    running statistics are plain BatchNorm's on each chunk in turn, in float64 (to float64's rounding; in float32
    within float32's margins), its output in its input's layout; custom runs _GhostNorm, batch_norm torch's kernel."""
    calls = []
    apply = ghost_bn._GhostNorm.apply
    monkeypatch.setattr(ghost_bn._GhostNorm, "apply", lambda *args: calls.append(1) or apply(*args))
    torch.manual_seed(0)
    g, j, c = 4, 3, 5
    plain = nn.BatchNorm2d(c).double()
    with torch.no_grad():
        plain.weight.uniform_(0.5, 2.0), plain.bias.uniform_(-1, 1), plain.running_mean.uniform_(-1, 1)
    model = ghost_bn.convert(nn.Sequential(copy.deepcopy(plain)), g, "test", dict.fromkeys(defaults.LAYOUTS, impl))
    layer = model.to(dtype)[0]
    layouts = []
    layer.register_forward_pre_hook(lambda m, args: (args[0].contiguous(memory_format=fmt),))
    layer.register_forward_hook(lambda m, args, out: layouts.append(out.is_contiguous(memory_format=fmt)))
    x = torch.randn(g * j, c, 3, 4, dtype=torch.float64) * 3 + 1
    dy = torch.randn_like(x)
    ours = x.to(dtype).requires_grad_()
    got = [model(ours)]
    got += torch.autograd.grad(got[0], [ours, layer.weight, layer.bias], dy.to(dtype))
    ref = x.clone().requires_grad_()
    want = [torch.cat([plain(chunk) for chunk in ref.split(g)])]  # the model's chunks: g consecutive images each
    want += torch.autograd.grad(want[0], [ref, plain.weight, plain.bias], dy)
    got += [layer.running_mean, layer.running_var]
    want += [plain.running_mean, plain.running_var]
    for a, b, name in zip(got, want, ("y", "dx", "dweight", "dbias", "running mean", "running var")):
        if dtype == torch.float64:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)
        else:  # a few float32 roundings of values near the largest
            torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5 * float(b.detach().abs().max()), msg=name)
    assert int(layer.num_batches_tracked) == j == int(plain.num_batches_tracked)
    assert layouts == [True] and len(calls) == (impl == "custom")


def test_channels_last_bf16_input_with_float32_weights():
    """A bf16 channels_last input with float32 weights (autocast's BatchNorm): y and dx in bf16 and channels_last,
    statistics and weight gradients in float32, within bf16's rounding of the float32 computation on the same
    values (y, dx: one rounding each, 2^-8 of the largest; the rest from float32 sums); and under CPU autocast."""
    torch.manual_seed(0)
    g, j, c = 4, 3, 6
    model = ghost_bn.convert(nn.Sequential(nn.BatchNorm2d(c)), g, "test")
    layer, model._ghost_arranged[0] = model[0], g * j
    with torch.no_grad():
        layer.weight.uniform_(0.5, 2.0), layer.bias.uniform_(-1, 1)
    x = (torch.randn(g * j, c, 5, 5) * 2 + 1).to(torch.bfloat16, memory_format=torch.channels_last)
    dy = torch.randn_like(x)
    x32 = x.float().requires_grad_()
    params = [layer.weight, layer.bias]
    want, want_means, want_variances = _chunk_by_chunk(x32, *params, g, layer.eps)
    want_grads = torch.autograd.grad(want, [x32, *params], dy.float())
    for autocast in (False, True):
        xb = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y, (means, variances) = ghost_bn.ghost_normalize(layer, xb)
        grads = torch.autograd.grad(y, [xb, *params], dy)
        assert y.dtype == grads[0].dtype == torch.bfloat16 and means.dtype == grads[1].dtype == torch.float32
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert grads[0].is_contiguous(memory_format=torch.channels_last)
        for a, b in ((y, want), (grads[0], want_grads[0])):
            torch.testing.assert_close(a.float(), b, rtol=2**-8, atol=2**-8 * float(b.detach().abs().max()))
        for a, b in ((means, want_means), (variances, want_variances), *zip(grads[1:], want_grads[1:])):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))


def test_ghost_layers_refuse_other_norms_and_odd_batches():
    with pytest.raises(UserError, match="GroupNorm layer"):
        ghost_bn.convert(nn.Sequential(nn.Conv2d(3, 4, 1), nn.GroupNorm(2, 4)), 4, "net")
    with pytest.raises(UserError, match="no BatchNorm2d layer"):
        ghost_bn.convert(nn.Sequential(nn.Conv2d(3, 4, 1)), 4, "net")
    layer = ghost_bn.convert(nn.Sequential(nn.BatchNorm2d(3)), 4, "net")
    with pytest.raises(ValueError, match="not a multiple of bn_batch 4"):
        layer(torch.randn(6, 3, 2, 2))
    layer(torch.randn(8, 3, 2, 2))
    with pytest.raises(ValueError, match="a layer saw 16 images, its model's input 8"):
        layer[0](torch.randn(16, 3, 2, 2))  # not through its model, which arranges the chunks: refused, not misread


def test_the_model_interleaves_its_chunks_and_gives_its_output_back_in_order():
    """arrange puts image i*g + a at a*j + i, so that each layer's input is (g, j*C, ...) in memory with chunk i
    in the channels i*C..(i+1)*C-1; unarrange is its inverse (the model's output in its input's order)."""
    x = torch.arange(12.0).view(12, 1)  # 3 chunks of 4
    arranged = ghost_bn.arrange(x, 4)
    assert arranged.flatten().tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    assert arranged.reshape(4, 3).T.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]  # chunk i: channel i
    assert torch.equal(ghost_bn.unarrange(arranged, 4), x)


def test_plans_with_bn_batch():
    plan = make_plan(256, 64, 1, None, bn_batch=8)
    assert (plan.accum_steps, plan.gsnr_groups, plan.groups_per_micro, plan.micro_per_group) == (4, 32, 8, 1)
    assert make_plan(256, "auto", 2, None, cap=100, bn_batch=8).micro_batch == 64  # whole groups, under the cap
    with pytest.raises(UserError, match="not whole BatchNorm batches"):
        make_plan(64, 32, 1, 8, bn_batch=16)


@pytest.mark.parametrize(
    "micro,bn,words",
    [
        (8, 16, "model.bn_batch 16 is larger than micro_batch 8"),
        (16, 6, "model.bn_batch 6 does not divide micro_batch 16"),
    ],
)
def test_validate_refuses_bn_batch_in_one_sentence(tmp_path, tiny_dataset, micro, bn, words):
    from tests.conftest import cli

    path = _recipe(tmp_path, tiny_dataset, "sgd", 0.1, micro, bn)
    done = cli("validate", str(path))
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_batched_where_torch_func_refuses_the_model_is_one_sentence(tmp_path, tiny_dataset, monkeypatch):
    """engine.group_pass batched and a model torch.func cannot take (here a refusal stood in): exit 2's sentence
    naming the key and the way out; auto never takes the batched pass (slower on the CPU and on an H200)."""
    from bench.engine import group_pass

    def refuse(self, images, labels, groups):
        raise RuntimeError("vmap: data-dependent control flow is not supported\nmore")

    monkeypatch.setattr(group_pass.BatchedGroups, "__call__", refuse)
    dist = distributed.Dist(0, 1, 0, torch.device("cpu"))
    trainer = Trainer(recipe_mod.load(_recipe(tmp_path, tiny_dataset, "vrgd_lars", 2.0, 16, 4, "batched")), dist)
    with pytest.raises(
        UserError,
        match=r"^key 'engine.group_pass': batched, but torch.func cannot take resnet8_cifar "
        r"on cpu \(vmap: data-dependent control flow is not supported\): use engine.group_pass sequential",
    ):
        trainer.step(trainer.data.train(0, 1), lr=0.1)
    auto = Trainer(recipe_mod.load(_recipe(tmp_path, tiny_dataset, "vrgd_lars", 2.0, 16, 4, "auto")), dist)
    assert auto.batched is None and trainer.batched is not None


def test_validate_models_names_a_normalisation_layer_it_cannot_split(tmp_path, tiny_dataset):
    from tests.conftest import cli

    path = _recipe(tmp_path, tiny_dataset, "sgd", 0.1, 8, 4).read_text().replace("resnet8_cifar", "convnext_atto")
    done = cli("validate", "--models", str(write_recipe(tmp_path / "convnext.yaml", path)))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "key 'model.bn_batch': convnext_atto has a LayerNorm2d layer" in done.stderr
