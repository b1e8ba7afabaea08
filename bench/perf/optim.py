"""Optimizer step time on ResNet-50 parameter shapes: SGD, LARS, timm Lars, VRGD-LARS, observe().

All optimizers see the same random gradients and the MLPerf setting: momentum 0.9, weight
decay on the tensors with ndim > 1 only. One run times them alternately, `--repeats` times,
and reports medians, the ratio to torch.optim.SGD(foreach=True), and each step's
memory-bandwidth floor: the bytes it must read and write (as one fused pass per data
dependency) divided by the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn

from bench import optim

# Tensor passes (of N parameter elements) a step must read + write at least:
FLOOR_PASSES = {
    "sgd": 5,  # read w, g, v; write w, v
    "lars": 7,  # SGD's, after reading w and g once for the trust-ratio norms
    "timm": 7,  # the same algorithm
    "vrgd": 12,  # read sum, sumsq (layer means of r); again with w (norms); update: read sum, sumsq, w, v, write w, v, g_bar
    "observe": 5,  # read g, sum, sumsq; write sum, sumsq (p.grad is released, not zeroed)
}
TARGETS = {"lars": 1.3, "vrgd": 1.6, "observe": 0.5}  # x SGD step
SMALL = [(64, 3, 7, 7), (64,), (64,), (256, 64, 3, 3), (256,), (1000, 256), (1000,)]


def _shapes(model: str) -> list:
    import timm

    with torch.device("meta"):  # shapes only, no memory
        return [p.shape for p in timm.create_model(model).parameters()]


class Bench:
    """The optimizers under test, each with its own parameters, over one shared set of gradients."""

    def __init__(self, shapes, device, lr: float, weight_decay: float, groups: int):
        from timm.optim import Lars

        gen = torch.Generator(device).manual_seed(0)
        self.weights = [torch.randn(s, generator=gen, device=device) for s in shapes]
        self.grads = [torch.randn(s, generator=gen, device=device).mul_(1e-3) for s in shapes]
        self.groups = groups
        self.params = {name: [nn.Parameter(w.clone()) for w in self.weights] for name in ("sgd", "lars", "timm", "vrgd")}
        groups_of = {name: optim.param_groups(ps) for name, ps in self.params.items()}
        self.opts = {
            "sgd": torch.optim.SGD(groups_of["sgd"], lr=lr, momentum=0.9, weight_decay=weight_decay, foreach=True),
            "lars": optim.create(groups_of["lars"], "lars", lr=lr, weight_decay=weight_decay),
            "timm": Lars(groups_of["timm"], lr=lr, momentum=0.9, weight_decay=weight_decay),
            "vrgd": optim.create(groups_of["vrgd"], "vrgd_lars", lr=lr, weight_decay=weight_decay),
        }

    def _give_grads(self, name):
        for p, g in zip(self.params[name], self.grads):
            p.grad = g

    def plain_step(self, name, timer) -> float:
        self._give_grads(name)
        return timer(self.opts[name].step)

    def vrgd(self, timer) -> tuple[float, float]:
        """(one observe() of a group after the first, the step over `groups` groups)."""
        opt, observed = self.opts["vrgd"], []
        for _ in range(self.groups):
            self._give_grads("vrgd")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench perf optim", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed repetitions of each case (default 20)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads); default: torch's")
    parser.add_argument("--model", default="resnet50", help="timm model whose parameter shapes to use")
    parser.add_argument("--small", action="store_true", help="a few small shapes instead of --model (smoke test)")
    parser.add_argument("--groups", type=int, default=4, help="gradient groups k per VRGD step (default 4)")
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--weight-decay", type=float, default=5e-5, help="default 5e-5 (MLPerf LARS)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shapes = SMALL if args.small else _shapes(args.model)
    numel = sum(torch.Size(s).numel() for s in shapes)
    bench = Bench(shapes, device, args.lr, args.weight_decay, max(args.groups, 2))
    timed = _timer(device)
    copy_src = torch.ones(max(numel, 2**24), device=device)  # >= 64 MiB: beyond the CPU's L3 and the GPU's L2
    copy_dst = torch.empty_like(copy_src)

    times = {name: [] for name in ("copy", "sgd", "lars", "timm", "vrgd", "observe")}
    for rep in range(args.repeats + 1):  # the first round warms up (state allocation) and is dropped
        sample = {"copy": timed(lambda: copy_dst.copy_(copy_src))}
        for name in ("sgd", "lars", "timm"):
            sample[name] = bench.plain_step(name, timed)
        sample["observe"], sample["vrgd"] = bench.vrgd(timed)
        if rep:
            for name, seconds in sample.items():
                times[name].append(seconds)

    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    bandwidth = 2 * copy_src.numel() * copy_src.element_size() / (ms["copy"] / 1e3)  # read + write, bytes/s
    floor = {name: 1e3 * passes * numel * 4 / bandwidth for name, passes in FLOOR_PASSES.items()}
    ratio = {name: ms[name] / ms["sgd"] for name in FLOOR_PASSES}
    verdict = {name: ("PASS" if ratio[name] <= target else "MISS", f"<= {target:.2f} x") for name, target in TARGETS.items()}
    verdict["timm"] = ("PASS" if ms["lars"] < ms["timm"] else "MISS", "> bench LARS")
    rows = [
        ("sgd", "torch.optim.SGD(momentum, foreach=True) step"),
        ("lars", "bench LARS step"),
        ("timm", "timm Lars step (its default path)"),
        ("vrgd", f"bench VRGD-LARS step (k = {bench.groups})"),
        ("observe", "bench VRGD-LARS observe(), one group"),
    ]
    threads = f", {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}" if device.type == "cpu" else ""
    print(f"bench perf optim: {'small' if args.small else args.model} shapes, {len(shapes)} tensors, "
          f"{numel:,} parameters (fp32), {device.type}{threads}, {args.repeats} repeats, lr {args.lr}, "
          f"weight decay {args.weight_decay}")
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s (median copy of {copy_src.numel() * 4 / 2**20:.0f} MiB, read + write)\n")
    print(f"{'case':<48}{'median ms':>10}{'x SGD':>8}{'floor ms':>10}  {'target':<14}result")
    for name, label in rows:
        result, target = verdict.get(name, ("", ""))
        print(f"{label:<48}{ms[name]:>10.2f}{ratio[name]:>8.2f}{floor[name]:>10.2f}  {target:<14}{result}")
    print("\nmedian ms: median over the repeats, cases alternating within each repeat; x SGD: median / SGD's median.\n"
          "floor ms: minimal bytes moved (SGD: read w, g, v, write w, v; LARS and timm: + read w, g for the norms;\n"
          "VRGD-LARS: read the sum and sum of squares for the layer means of r, again with w for the norms, then\n"
          "read them with w, v and write w, v and the mean gradient; observe: read g, sum, sum of squares, write\n"
          "the sums) / copy bandwidth. A target below floor / SGD's floor cannot be met by a one-pass-per-dependency\n"
          "implementation either.")
    return 0
