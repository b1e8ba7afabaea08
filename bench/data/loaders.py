"""The loaders by name (recipe `data.loader`), one module each behind one protocol.

    dali         bench/data/dali.py           DALI pipelines; decoding on the GPU when the device is CUDA
    torchvision  bench/data/torchvision.py    the reference: PIL decoding in a torch DataLoader
    random       bench/data/random_tensors.py random tensors on the device, no I/O (throughput only)

"auto" picks dali when nvidia.dali imports, else torchvision (bench.data.pipeline.resolve_loader). The old name
of the random loader, `synthetic`, is a deprecated alias (bench.recipe.LOADER_ALIASES): it was one word
for two things, beside the generated-JPEG *dataset* `synthetic`.

Adding a loader: a module with what `Loader` lists, and its name in LOADERS and in the recipe's
`data.loader` choices (a guard test checks that the two agree).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol

if TYPE_CHECKING:
    from bench.data import Data
    from bench.data.folder import Split

LOADERS = {"dali": "dali", "torchvision": "torchvision", "random": "random_tensors"}  # name -> module in bench.data


class Loader(Protocol):
    """What a loader module provides. A batch is (images (N, 3, S, S) normalised, labels int64 (N,)),
    made by bench.data.output; the same images in the same order with the same crops whatever the loader."""

    READS_FILES: bool  # False: it needs no image files (the random loader runs without generating a dataset)

    def train(self, data: Data, start_step: int, end_step: int) -> Iterator:
        """This rank's micro-batches for steps [start_step, end_step), data.stream.accum_steps per step."""

    def evaluation(self, data: Data, split: Split, index_batches: list[list[int]]) -> Iterable:
        """Batches of these image indices of `split`, with evaluation transforms; iterable any number of times."""


def get(name: str) -> Loader:
    """The loader module registered as `name` (imported on first use: DALI's import is heavy)."""
    return importlib.import_module(f"bench.data.{LOADERS[name]}")
