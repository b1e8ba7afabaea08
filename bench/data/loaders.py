"""The loaders by name (recipe `data.loader`), one module each behind one protocol.

    dali         bench/data/dali.py           DALI pipelines; decoding on the GPU when the device is CUDA
    torchvision  bench/data/torchvision.py    the reference: PIL decoding in a torch DataLoader
    random       bench/data/random_tensors.py random tensors on the device, no I/O (throughput only)

Each has a record in bench/catalog.py (LOADERS: its module, whether it reads files, what it needs); the recipe's
`data.loader` choices and this registry come from there. "auto" picks the first available of
catalog.AUTO_LOADERS (bench.data.pipeline.resolve_loader). The old name of the random loader, `synthetic`, is a
deprecated alias (catalog.LOADER_ALIASES): it was one word for two things, beside the generated-JPEG *dataset*
`synthetic`.

Adding a loader: a module with what `Loader` lists, and its record in the catalog (tests/test_catalog.py checks
the record against the module; the loader behaviour tests run over every record).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol

from bench import catalog

if TYPE_CHECKING:
    from bench.data import Data
    from bench.data.folder import Split

LOADERS = {name: record.module for name, record in catalog.LOADERS.items()}  # name -> module


class Loader(Protocol):
    """What a loader module provides. A batch is (images (N, 3, S, S) normalised, labels int64 (N,)),
    made by bench.data.output; the same images in the same order with the same crops whatever the loader.
    Its duties, each tested over every loader in the catalog (tests/test_data_backends.py):

    - order: training batches follow `data.samples(start, end)` (the sampling order of sampling.py: the same
      images on the same rank in the same step, resumable at any step);
    - crops: the random crop and flip of each image come from bench.data.augment (seeded per image and epoch);
    - unreadable files: reported through `data.unreadable` (images.Unreadable: skipped with one warning naming
      them, or an error with data.strict), never dropped silently;
    - availability: declared by its catalog record (`requires`), not by its name;
    - closing: what train() returns is an iterator whose close() (a generator's) stops its workers, which the
      runner calls when it stops early."""

    READS_FILES: bool  # False: it needs no image files (the random loader runs without generating a dataset)

    def train(self, data: Data, start_step: int, end_step: int) -> Iterator:
        """This rank's micro-batches for steps [start_step, end_step), data.stream.accum_steps per step."""

    def evaluation(self, data: Data, split: Split, index_batches: list[list[int]]) -> Iterable:
        """Batches of these image indices of `split`, with evaluation transforms; iterable any number of times."""


def get(name: str) -> Loader:
    """The loader module registered as `name` (imported on first use: DALI's import is heavy)."""
    return importlib.import_module(LOADERS[name])
