"""CIFAR-10/100 python archives to the folder layout (`bench data cifar`).

Reads the archives as distributed (cifar-10-python.tar.gz with
cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta};
cifar-100-python.tar.gz with cifar-100-python/{train, test, meta}, fine
labels) and writes ``<out>/{train,val}/<class name>/<index>.png`` (32x32, lossless);
the test set becomes val/. The class names are already in label order when
sorted, so folder labels equal CIFAR labels.

The batches are pickles: they are loaded with an unpickler that only builds
dicts, lists, bytes and numpy arrays, so a doctored archive cannot run code.
"""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from bench import files
from bench.errors import UserError

LAYOUTS = {  # top folder: (train members, val member, meta member, label names key, labels key)
    "cifar-10-batches-py": (
        [f"data_batch_{i}" for i in range(1, 6)],
        "test_batch",
        "batches.meta",
        "label_names",
        "labels",
    ),
    "cifar-100-python": (["train"], "test", "meta", "fine_label_names", "fine_labels"),
}
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR batch")
        return super().find_class(module, name)


def _load(tar: tarfile.TarFile, name: str, archive: Path) -> dict:
    try:
        member = tar.extractfile(name)
    except KeyError:
        raise UserError(f"{archive}: no member '{name}'; is this an unmodified CIFAR python archive?") from None
    try:
        batch = _ArraysOnly(io.BytesIO(member.read()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        raise UserError(f"{archive}: '{name}' is not a CIFAR batch ({e})") from None
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}


def convert(archive: str | Path, out: str | Path) -> dict[str, int]:
    """Write the archive's images to `out` in the folder layout; returns images per split."""
    archive, out = Path(archive), Path(out)
    if out.exists():
        raise UserError(f"{out}: already exists; choose a new --out directory")
    try:
        tar = tarfile.open(archive, "r:*")
    except (OSError, tarfile.TarError) as e:
        raise UserError(f"{archive}: cannot open as a tar archive ({e})") from None
    with tar:
        tops = {m.name.split("/")[0] for m in tar.getmembers()}
        found = [t for t in LAYOUTS if t in tops]
        if not found:
            raise UserError(
                f"{archive}: neither cifar-10-batches-py/ nor cifar-100-python/ inside; "
                "expected cifar-10-python.tar.gz or cifar-100-python.tar.gz"
            )
        top = found[0]
        train_names, val_name, meta_name, names_key, labels_key = LAYOUTS[top]
        classes = [
            n.decode() if isinstance(n, bytes) else str(n) for n in _load(tar, f"{top}/{meta_name}", archive)[names_key]
        ]
        if sorted(classes) != classes:  # keep CIFAR's label order under the sorted-folder rule
            classes = [f"{i:03d}_{n}" for i, n in enumerate(classes)]
        splits = {"train": [f"{top}/{n}" for n in train_names], "val": [f"{top}/{val_name}"]}
        counts = {}

        def fill(tmp: Path) -> None:
            for split, members in splits.items():
                for name in classes:
                    (tmp / split / name).mkdir(parents=True)
                index = 0
                for member in members:
                    batch = _load(tar, member, archive)
                    pixels = np.asarray(batch["data"], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
                    for image, label in zip(pixels, batch[labels_key]):
                        Image.fromarray(image).save(tmp / split / classes[label] / f"{index:05d}.png")
                        index += 1
                counts[split] = index

        files.write_atomically(out, fill)
    return counts
