"""Optimizer step time on ResNet-50 parameter shapes: SGD, LARS, timm Lars, VRGD-LARS, observe().

All optimizers see the same random gradients. VRGD-LARS and its observe() run both with the fused
kernels (bench/optim/fused.py: C++ on CPU, Triton on GPU) and with the eager code (fused=False). The baseline is torch.optim.SGD(momentum=0.9,
foreach=True) without weight decay (its cheapest step); LARS, timm's Lars and VRGD-LARS use
the MLPerf setting: momentum 0.9, weight decay on the tensors with ndim > 1 only. One run times
them alternately, `--repeats` times, and reports medians, the ratio to SGD, and each step's
"at copy rate" time: the bytes it must read and write (as one fused pass per data dependency)
divided by the bandwidth of a large copy measured in the same run. It is a yardstick, not a
lower bound: a step whose tensors stay in cache runs faster than a copy that cannot.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time

import torch
from torch import nn

from bench import optim
from bench.errors import ArgumentParser, count
from bench.models import check_name, timm_models

# Tensor passes (of N parameter elements) a step must read + write at least ("at copy rate"):
MIN_PASSES = {
    "sgd": 5,  # read w, g, v; write w, v
    "lars": 7,  # SGD's, after reading w and g once for the trust-ratio norms
    "timm": 7,  # the same algorithm
    "vrgd": 12,  # read sum, sumsq (layer means of r); again with w (norms); read them with w, v, write w, v, g_bar
    "observe": 5,  # read g, sum, sumsq; write sum, sumsq (p.grad is released, not zeroed)
}  # the eager code (fused=False) moves the same bytes: "vrgd_eager", "observe_eager"
TARGETS = {"lars": 1.3, "vrgd": 1.6, "observe": 0.5}  # x SGD step (the default, fused where it applies)
FAMILY = {"vrgd_sgd": "VRGD-SGD", "vrgd_adam": "VRGD-Adam", "vrgd_lamb": "VRGD-LAMB"}  # --family
SMALL = [(64, 3, 7, 7), (64,), (64,), (256, 64, 3, 3), (256,), (1000, 256), (1000,)]


def _shapes(model: str) -> list:
    with torch.device("meta"):  # shapes only, no memory
        return [p.shape for p in timm_models().create_model(model).parameters()]


class Bench:
    """The optimizers under test, each with its own parameters, over one shared set of gradients."""

    def __init__(self, shapes, device, lr: float, weight_decay: float, groups: int, family: bool = False):
        from timm.optim import Lars

        gen = torch.Generator(device).manual_seed(0)
        weights = [torch.randn(s, generator=gen, device=device) for s in shapes]
        self.grads = [torch.randn(s, generator=gen, device=device).mul_(1e-3) for s in shapes]
        self.groups = groups
        # name -> the VRGD optimizer and its `fused` (the CPU kernels where they build; on GPU the Triton
        # kernels, which run only when asked for)
        fused = True if device.type == "cuda" and importlib.util.find_spec("triton") else None
        self.grouped = {"vrgd": ("vrgd_lars", fused), "vrgd_eager": ("vrgd_lars", False)}
        for name in FAMILY if family else ():
            self.grouped.update({name: (name, fused), f"{name}_eager": (name, False)})
        names = ("sgd", "lars", "timm", *self.grouped)
        self.params = {name: [nn.Parameter(w.clone()) for w in weights] for name in names}
        excluded = {name: optim.param_groups(self.params[name]) for name in names[1:]}
        self.opts = {
            "sgd": torch.optim.SGD(self.params["sgd"], lr=lr, momentum=0.9, foreach=True),
            "lars": optim.create(excluded["lars"], "lars", lr=lr, weight_decay=weight_decay),
            "timm": Lars(excluded["timm"], lr=lr, momentum=0.9, weight_decay=weight_decay),
            **{
                name: optim.create(excluded[name], registered, lr=lr, weight_decay=weight_decay, fused=fused)
                for name, (registered, fused) in self.grouped.items()
            },
        }

    def _give_grads(self, name):
        for p, g in zip(self.params[name], self.grads):
            p.grad = g

    def plain_step(self, name, timer) -> float:
        self._give_grads(name)
        return timer(self.opts[name].step)

    def vrgd(self, name, timer) -> tuple[float, float]:
        """(one observe() of a group after the first, the step over `groups` groups)."""
        opt, observed = self.opts[name], []
        for _ in range(self.groups):
            self._give_grads(name)
            observed.append(timer(opt.observe))
        return observed[1], timer(opt.step)


def _timer(device):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(fn) -> float:
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    return timed


def measure(bench: Bench, copy_elements: int, repeats: int, device) -> dict[str, float]:
    """Median milliseconds of each case and of a large copy, alternating within every repeat."""
    timed = _timer(device)
    src = torch.ones(copy_elements, device=device)
    dst = torch.empty_like(src)
    times = {name: [] for name in ("copy", "sgd", "lars", "timm", "observe", "observe_eager", *bench.grouped)}
    for rep in range(repeats + 1):  # the first round warms up (state allocation) and is dropped
        sample = {"copy": timed(lambda: dst.copy_(src))}
        for name in ("sgd", "lars", "timm"):
            sample[name] = bench.plain_step(name, timed)
        for name in bench.grouped:
            observed, sample[name] = bench.vrgd(name, timed)
            if name in ("vrgd", "vrgd_eager"):
                sample[name.replace("vrgd", "observe")] = observed
        for name, seconds in sample.items():
            times[name] += [seconds] if rep else []
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def report(ms: dict[str, float], numel: int, copy_elements: int, groups: int, fused: bool) -> None:
    bandwidth = 2 * copy_elements * 4 / (ms["copy"] / 1e3)  # read + write, bytes/s
    at_copy_rate = {name: 1e3 * passes * numel * 4 / bandwidth for name, passes in MIN_PASSES.items()}
    at_copy_rate.update({f"{name}_eager": at_copy_rate[name] for name in ("vrgd", "observe")})
    ratio = {name: value / ms["sgd"] for name, value in ms.items()}
    verdict = {
        name: (f"<= {limit:.2f} x", "PASS" if ratio[name] <= limit else "MISS") for name, limit in TARGETS.items()
    }
    verdict["timm"] = ("> bench LARS", "PASS" if ms["lars"] < ms["timm"] else "MISS")
    fused = ", fused" if fused else ", eager (no kernels)"
    rows = {
        "sgd": "torch.optim.SGD(momentum, foreach=True) step",
        "lars": "bench LARS step",
        "timm": "timm Lars step (its default path)",
        "vrgd": f"bench VRGD-LARS step (k = {groups}){fused}",
        "vrgd_eager": f"bench VRGD-LARS step (k = {groups}), fused=False",
        "observe": f"bench VRGD-LARS observe(), one group{fused}",
        "observe_eager": "bench VRGD-LARS observe(), fused=False",
    }
    for name, label in FAMILY.items():
        if name in ms:
            rows.update(
                {
                    name: f"bench {label} step (k = {groups}){fused}",
                    f"{name}_eager": f"bench {label} step (k = {groups}), fused=False",
                }
            )
    copied = f"median copy of {copy_elements * 4 / 2**20:.0f} MiB, read + write"
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s ({copied})\n")
    print(f"{'case':<48}{'median ms':>10}{'x SGD':>8}{'copy-rate ms':>13}  {'target':<14}result")
    for name, label in rows.items():
        target, result = verdict.get(name, ("", ""))
        copy_ms = f"{at_copy_rate[name]:>13.2f}" if name in at_copy_rate else " " * 13
        print(f"{label:<48}{ms[name]:>10.2f}{ratio[name]:>8.3f}{copy_ms}  {target:<14}{result}")
    print(
        "\nmedian ms: median over the repeats, cases alternating within each repeat; x SGD: median / SGD's median\n"
        "(three decimals, so a ratio just above a target never prints equal to it).\n"
        "copy-rate ms: the bytes the step must move at least / the large copy's bandwidth: a yardstick, not a lower\n"
        "bound (tensors that stay in cache move faster than the copy). SGD: read w, g, v, write w, v; LARS, timm: also read\n"
        "w, g for the norms; VRGD-LARS: read the sum and sum of squares (layer means of r), again with w (norms),\n"
        "then with w, v to write w, v and the mean gradient; observe: read g and the sums, write the sums.\n"
        "torch's foreach SGD moves 8 passes (v *= m; v += g; w -= lr v), not the 5 it must; observe() must\n"
        "move 5: 5/8 = 0.63 x SGD's step at the same bytes per second."
    )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="bench perf optim", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=count(1), default=20, help="timed repetitions of each case (default 20)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=count(1), help="CPU threads (torch.set_num_threads); default: torch's")
    parser.add_argument("--model", default="resnet50", help="timm model whose parameter shapes to use")
    parser.add_argument("--small", action="store_true", help="a few small shapes instead of --model (smoke test)")
    parser.add_argument(
        "--groups", type=count(2), default=4, help="gradient groups k per VRGD step (default 4, at least 2)"
    )
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--weight-decay", type=float, default=5e-5, help="LARS and VRGD-LARS (default 5e-5, MLPerf)")
    parser.add_argument("--family", action="store_true", help="also VRGD-SGD, VRGD-Adam and VRGD-LAMB, fused and eager")
    args = parser.parse_args(argv)
    if not args.small:
        check_name(args.model, "bench perf optim --model")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = SMALL if args.small else _shapes(args.model)
    numel = sum(torch.Size(s).numel() for s in shapes)
    bench = Bench(shapes, device, args.lr, args.weight_decay, max(args.groups, 2), args.family)
    copy_elements = max(numel, 2**24)  # >= 64 MiB: beyond the CPU's L3 and the GPU's L2
    ms = measure(bench, copy_elements, args.repeats, device)
    where = (
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}"
        if device.type == "cpu"
        else (torch.cuda.get_device_name(device))
    )
    print(
        f"bench perf optim: {'small' if args.small else args.model} shapes, {len(shapes)} tensors, {numel:,} "
        f"parameters (fp32), {device.type} ({where}), {args.repeats} repeats, lr {args.lr}, weight decay "
        f"{args.weight_decay} (not on SGD)"
    )
    report(ms, numel, copy_elements, bench.groups, bench.opts["vrgd"]._kernels is not None)
    return 0
