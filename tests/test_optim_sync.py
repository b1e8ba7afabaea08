"""bench's optimizer steps read nothing back to the host (issue 66): on a GPU such a read waits for every queued
kernel, so a step that makes one stalls the launch queue. On the CPU a guard counts the Python-level reads
(host_reads) during observe() and step() after the first step; on a GPU (skipped without one) the same steps
run under torch.cuda.set_sync_debug_mode("error"), which also catches the waits torch makes inside an op
(masked indexing, nonzero, a blocking copy to or from the GPU), and their results are checked against the
CPU's."""

import collections
import contextlib

import pytest
import torch
from torch import nn

from bench import catalog, optim
from tests.helpers import FP32, assert_history, fp32, gradients, run_steps, weights

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

# The Tensor methods that bring a value to the host: on a GPU each waits for the device.
READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def host_reads():
    """Counts, by name, the calls of READS on any tensor while the block runs (torch.Tensor patched, then restored).
    It sees Python's reads only (float(t), if t: ..., t.item()); the GPU test's sync debug mode sees torch's too."""
    reads = collections.Counter()
    own = {name: vars(torch.Tensor).get(name) for name in READS}  # None: inherited from torch._C.TensorBase

    def counting(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            reads[name] += 1
            return original(self, *args, **kwargs)

        return read

    try:
        for name in READS:
            setattr(torch.Tensor, name, counting(name))
        yield reads
    finally:
        for name, method in own.items():
            if method is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, method)


# AdaScale reads its gain to the host in step(): the lr of the step and the schedule's progress are host numbers.
READS_BY_DESIGN = {"adascale_sgd", "adascale_lars"}
OWN = [name for name in optim.NAMES if not catalog.OPTIMIZERS[name].library and name not in READS_BY_DESIGN]
VRGD = [name for name in OWN if name.startswith("vrgd_")]
CASES = (
    [(name, {}) for name in OWN]  # VRGD: the fused CPU kernels (on a GPU: the eager code, fused=null's choice there)
    + [(name, {"fused": False}) for name in VRGD]
    + [
        ("lars", {"nesterov": True}),
        ("lars", {"momentum": 0.0}),
        ("larc", {"nesterov": True}),
        ("vrgd_lars", {"trust_grad": "mean"}),
        ("vrgd_lars", {"beta3": 0.9}),  # the factors' kernel, GSNR momentum, then LARS' own update
        ("vrgd_lars", {"nesterov": True, "fused": False}),
    ]
)


def case(name, options, device="cpu"):
    """fp32 weights (one of them 0, one with a gradient of 0 in every group, a bias in the excluded group), an
    optimizer that has taken its first step (state allocated), and 2 more steps of 3 groups."""
    (first, *later) = [[[g.to(device) for g in grads] for grads in groups] for groups in fp32(gradients(3, k=3))]
    params = [nn.Parameter(w.float().to(device)) for w in weights()]
    opt = optim.create(params, name, lr=0.5, weight_decay=0.1, **options)
    run_steps(opt, params, [first])
    return opt, params, later


@pytest.mark.parametrize("name,options", CASES, ids=lambda x: x if isinstance(x, str) else str(x or ""))
def test_observe_and_step_after_the_first_read_nothing_to_the_host(name, options):
    opt, params, later = case(name, options)
    before = [p.detach().clone() for p in params]
    with host_reads() as reads:
        run_steps(opt, params, later)
    assert dict(reads) == {}
    assert not all(torch.equal(a, p) for a, p in zip(before, params))  # the steps moved the weights


def test_the_guard_counts_each_kind_of_read_and_sees_adascale_read_its_gain():
    t = torch.arange(3.0)
    with host_reads() as reads:
        t.sum().item(), t.tolist(), t.cpu(), t.numpy(), float(t[1]), int(t[1]), range(3)[t[1].long()]
        if t.any():
            pass
    assert dict(reads) == {"item": 1, "tolist": 1, "cpu": 1, "numpy": 1, "__float__": 1, "__int__": 1,
                           "__index__": 1, "__bool__": 1}  # fmt: skip
    assert not set(READS) & set(vars(torch.Tensor))  # restored: the methods are torch._C.TensorBase's again
    opt, params, later = case("adascale_lars", {})
    with host_reads() as reads:
        run_steps(opt, params, later)
    assert reads["__float__"] >= 2 * len(later)  # its var and sqr each step (READS_BY_DESIGN)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible to torch)")
@pytest.mark.parametrize(
    "name,options",
    CASES + [(name, {"fused": True}) for name in VRGD],  # the Triton kernels
    ids=lambda x: x if isinstance(x, str) else str(x or ""),
)
def test_steps_run_without_host_sync_on_cuda(name, options):
    """tools/gpu_check.py runs this one (its gpu-tests step)."""
    if options.get("fused"):
        pytest.importorskip("triton")
    opt, params, later = case(name, options, "cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a call that waits for the GPU raises (a read of a host table does not)
    try:
        history = run_steps(opt, params, later)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    # the same steps on the CPU in the eager code (no C++ kernels to build on the GPU machine)
    cpu_opt, cpu_params, cpu_later = case(name, {**options, "fused": False} if name in VRGD else options)
    expected = run_steps(cpu_opt, cpu_params, cpu_later)
    assert_history([[p.cpu() for p in step] for step in history], expected, **FP32)


@pytest.mark.parametrize("name,diagnostics", [("sgd", 0), ("lars", 1), ("vrgd_lars", 1)])
def test_the_runners_step_reads_the_host_once_and_once_more_when_it_logs(name, diagnostics, tmp_path):
    """Trainer.train_step: one read (the loss and stop flag) on a step events.jsonl does not get, and one more, the
    optimizer's diagnostics in one transfer, on a step it gets (logging.events_every_steps: 2; a GPU waits once per
    read, so a read per diagnostic scalar, 3 for LARS and 8 for VRGD-LARS until 2026-11-28, stalled it as often).
    SGD, whose groups are summed in the backward pass, has no diagnostics to read."""
    from bench import recipe as recipes
    from bench.engine.distributed import Dist
    from bench.perf.train import BenchCase

    raw = {
        "name": "reads",
        "model": {"name": "resnet8_cifar", "bn_batch": 2},
        "data": {"dataset": "synthetic", "image_size": 16, "loader": "random", "synth": {"classes": 4, "size": 16}},
        "global_batch": 8,
        "micro_batch": 8,
        "optimizer": {"name": name, "lr": 0.1},
        "epochs": 50,
        "target_top1": 50,
        "logging": {"events_every_steps": 2},
    }
    case = BenchCase(recipes.recipe_from_dict("test", raw), Dist(0, 1, 0, torch.device("cpu")), tmp_path)
    case.steps(2)  # steps 0 (logged) and 1
    with host_reads() as logged:
        case.steps(1)  # step 2
    with host_reads() as quiet:
        case.steps(1)  # step 3
    case.close()
    assert dict(quiet) == {"tolist": 1}
    assert dict(logged) == {"tolist": 1 + diagnostics}
