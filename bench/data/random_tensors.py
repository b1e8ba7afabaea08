"""The random loader (`data.loader: random`; formerly `synthetic`): random tensors made on the device.

For throughput measurements without I/O or decoding, as the synthetic loader
of NVIDIA's ResNet-50 recipe: one batch of normal noise (and uniform random
labels) is generated on the target device once per iterator, seeded, and
handed out again for every micro-batch, so the loader costs nothing per step.
Evaluation batches are slices of it, one image per validation image of this
rank, so counts stay exact. Accuracies are meaningless by construction.
"""

from __future__ import annotations

from typing import Iterator

import torch

from bench.data.output import Options

READS_FILES = False


def train(data, start_step: int, end_step: int) -> Iterator:
    """The loader protocol (bench/data/loaders.py): only the number of micro-batches matters."""
    stream = data.stream
    return train_batches(
        data.opts,
        (end_step - start_step) * stream.accum_steps,
        stream.micro_batch,
        data.num_classes,
        data.device,
        stream.seed,
    )


def evaluation(data, split, index_batches: list[list[int]]) -> "EvalBatches":
    return EvalBatches(data.opts, index_batches, data.num_classes, data.device)


def _batch(n: int, num_classes: int, opts: Options, device: torch.device, seed: int):
    g = torch.Generator(device=device).manual_seed(seed)
    images = torch.randn((n, 3, opts.size, opts.size), generator=g, device=device)
    labels = torch.randint(num_classes, (n,), generator=g, device=device)
    return opts.finish(images), labels


def train_batches(
    opts: Options, count: int, micro_batch: int, num_classes: int, device: torch.device, seed: int
) -> Iterator:
    """`count` micro-batches: the same random batch each time (no I/O, no sampling)."""
    images, labels = _batch(micro_batch, num_classes, opts, device, seed)
    for _ in range(count):
        yield images, labels


class EvalBatches:
    def __init__(self, opts: Options, index_batches: list[list[int]], num_classes: int, device: torch.device):
        self.sizes = [len(b) for b in index_batches]
        self.images, self.labels = _batch(max(self.sizes, default=0), num_classes, opts, device, seed=1)

    def __iter__(self) -> Iterator:
        return ((self.images[:n], self.labels[:n]) for n in self.sizes)
