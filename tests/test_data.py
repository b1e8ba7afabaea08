"""The generated dataset, the step stream, and both file backends on it (more in test_data_backends.py)."""

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.data import build, sampling, synthetic
from bench.recipe import DataSpec, SynthData


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def test_generator_is_deterministic_and_seed_dependent(tmp_path):
    spec = SynthData(classes=3, train_per_class=4, val_per_class=2, size=24, seed=1)
    a = synthetic.write_dataset(tmp_path / "a", spec)
    b = synthetic.write_dataset(tmp_path / "b", spec)
    c = synthetic.write_dataset(tmp_path / "c", spec.model_copy(update={"seed": 2}))
    assert digest(a) == digest(b) != digest(c)
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*.JPEG"))
    assert len(files) == 3 * 6 and files[0] == "train/n00000000/n00000000_0.JPEG"


def test_cache_generates_once_and_reuses(tmp_path):
    spec = SynthData(classes=2, train_per_class=2, val_per_class=1, size=16)
    first = synthetic.cached(spec)
    stamp = (first / "train" / "n00000000" / "n00000000_0.JPEG").stat().st_mtime_ns
    assert synthetic.cached(spec) == first
    assert (first / "train" / "n00000000" / "n00000000_0.JPEG").stat().st_mtime_ns == stamp
    assert first.parent == tmp_path / "cache"


def all_positions(stream, steps):
    return [p for s in range(steps) for m in range(stream.accum_steps) for p in stream.positions(s, m)]


@pytest.mark.parametrize("world,micro", [(1, 8), (2, 4), (4, 2)])
def test_global_batches_are_the_same_images_whatever_the_split(world, micro):
    n, B = 50, 16
    reference = sampling.StepStream(n, B, 16, 0, 1, seed=5)
    streams = [sampling.StepStream(n, B, micro, r, world, seed=5) for r in range(world)]
    for step in range(7):
        want = [s for m in range(reference.accum_steps) for s in reference.micro_batch_samples(step, m)]
        got = [s for st in streams for m in range(st.accum_steps) for s in st.micro_batch_samples(step, m)]
        assert got == want  # same images, same order, same augmentation seeds


def test_each_epoch_sees_every_image_once_even_when_the_batch_spans_epochs():
    n = 30
    for B in (8, 64):  # 64 > n: one global batch spans more than two epochs
        stream = sampling.StepStream(n, B, 8, 0, 1, seed=0)
        samples = [s for mb in stream.iterate(0, 5) for s in mb]
        for e in range(len(samples) // n):
            epoch = [i for i, _ in samples[e * n : (e + 1) * n]]
            assert sorted(epoch) == list(range(n))
        seeds = [s for _, s in samples]
        assert len(set(seeds)) == len(seeds)


def test_eval_shards_cover_every_image_exactly_once():
    for world in (1, 2, 3, 7):
        seen = Counter(i for r in range(world) for i in sampling.eval_shard(20, r, world))
        assert seen == Counter(range(20))


def test_train_eval_subset_is_fixed_and_sized():
    a = sampling.train_eval_subset(100, 30)
    assert len(a) == 30 == len(set(a.tolist())) and np.array_equal(a, sampling.train_eval_subset(100, 30))
    assert len(sampling.train_eval_subset(10, 30)) == 10


@pytest.mark.parametrize("loader", ["torchvision", "dali"])
def test_batches_shapes_labels_and_normalisation(tiny_dataset, loader):
    spec = DataSpec(dataset="folder", path=tiny_dataset, image_size=32, workers=0, eval_batch=16, loader=loader)
    data = build(spec, step_images=16, micro_batch=8, rank=0, world=1, seed=0)
    assert data.num_classes == 4 and data.train_size == 160 and len(data.train_eval_indices) == 40
    images, labels = next(data.train(0, 1))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32 and labels.dtype == torch.int64
    assert -3 < images.mean() < 3 and images.std() > 0.3  # normalised, not raw 0..255
    val_labels = torch.cat([y for _, y in data.val()])
    assert Counter(val_labels.tolist()) == {c: 10 for c in range(4)}  # each val image exactly once
    # Labels follow the folder classes: the first file of class folder c has label c.
    for c, name in enumerate(data.layout.classes):
        i = data.layout.train.files.index(str(tiny_dataset / "train" / name / f"{name}_0.JPEG"))
        assert data.layout.train.labels[i] == c


@pytest.mark.parametrize("loader", ["torchvision", "dali"])
def test_training_batches_do_not_depend_on_worker_count(tiny_dataset, loader):
    def first_batch(workers):
        spec = DataSpec(dataset="folder", path=tiny_dataset, image_size=32, workers=workers, loader=loader)
        return next(build(spec, 16, 8, 0, 1, seed=0).train(3, 4))[0]

    assert torch.equal(first_batch(0), first_batch(2))


def test_auto_falls_back_to_torchvision_with_one_warning_naming_the_import_error(tmp_path, monkeypatch, capsys):
    """DALI does not import (here: blocked in sys.modules): `data.loader: auto` takes torchvision, says why once
    a process (the exception, and what to install), and `bench validate` names the loader a run would use."""
    import os
    import sys
    import warnings

    from bench.cli import main
    from bench.commands import recipe as recipe_commands
    from bench.data import pipeline
    from tests.conftest import RECIPES

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    pipeline._warn_fallback.cache_clear()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert [pipeline.resolve_loader("auto") for _ in range(3)] == ["torchvision"] * 3
    [warning] = [str(w.message) for w in said]
    assert warning.startswith("data.loader auto uses torchvision: nvidia.dali does not import (ModuleNotFoundError: ")
    assert warning.endswith("; install bench[dali-cuda13] or bench[dali-cuda12] for the dali loader")
    pipeline._warn_fallback.cache_clear()
    # validate imports the loader in a child process (its own stays free of torch and DALI): a DALI that fails
    # to import there, as a broken CUDA install does
    fake = tmp_path / "site" / "nvidia" / "dali"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object file')")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake.parents[1]), os.environ.get("PYTHONPATH", "")]))
    recipe_commands._import_error.cache_clear()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert main(["validate", str(RECIPES / "demo-sgd.yaml"), "--schema-only"]) == 0
    recipe_commands._import_error.cache_clear()
    assert ", loader torchvision here)" in capsys.readouterr().out
    assert [str(w.message) for w in said] == [
        f"{RECIPES / 'demo-sgd.yaml'}: data.loader auto uses torchvision: nvidia.dali does not import (ImportError: "
        "libcudart.so.13: cannot open shared object file); install bench[dali-cuda13] or bench[dali-cuda12] for the "
        "dali loader"
    ]
