"""The loaders (dali, torchvision, random) behind bench.data's interface, and their registry.

Most tests use an "indexed" dataset: every image is one flat colour whose red
channel is the image's index in its split, so whatever a backend crops,
resizes or flips, the image it delivered can be read back from its pixels.
"""

import shutil
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench import catalog
from bench.data import augment, build, sampling
from bench.errors import UserError
from bench.recipe import DataSpec
from tests.helpers import BACKENDS

CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS = 3, 10, 7


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Path:
    """3 classes, 10 train / 7 val flat-colour PNGs each (48x40, not square)."""
    root = tmp_path_factory.mktemp("indexed")
    for split, per_class in (("train", TRAIN_PER_CLASS), ("val", VAL_PER_CLASS)):
        for c in range(CLASSES):
            (root / split / f"class{c}").mkdir(parents=True)
            for k in range(per_class):
                index = c * per_class + k  # the folder order: index in the split == position in layout
                pixel = np.array([index * 4, 200 - 50 * c, 90], np.uint8)
                Image.fromarray(np.broadcast_to(pixel, (40, 48, 3)).copy()).save(
                    root / split / f"class{c}" / f"{k:02d}.png"
                )
    return root


def indices(images: torch.Tensor) -> list[int]:
    """Image index from the red channel of flat-colour images (undoing the normalisation)."""
    red = images[:, 0].float().mean(dim=(1, 2)) * augment.STD[0] + augment.MEAN[0]
    return (red * 255 / 4).round().int().tolist()


def spec(root, loader, **kw) -> DataSpec:
    return DataSpec(dataset="folder", path=root, image_size=16, loader=loader, workers=kw.pop("workers", 1), **kw)


@pytest.mark.parametrize("loader", BACKENDS)
def test_training_follows_the_step_stream_and_sharding_covers_each_image_once_per_epoch(indexed, loader):
    n, B, steps = CLASSES * TRAIN_PER_CLASS, 8, 8  # 64 images: two epochs of 30 and a part of the third
    ranks = [build(spec(indexed, loader, workers=0), B, 2, rank, 2, seed=4) for rank in range(2)]
    got = []  # in stream order: per step, rank 0's micro-batches then rank 1's
    per_rank = [list(d.train(0, steps)) for d in ranks]
    accum = ranks[0].stream.accum_steps
    for step in range(steps):
        for r in range(2):
            for images, labels in per_rank[r][step * accum : (step + 1) * accum]:
                assert images.shape == (2, 3, 16, 16) and images.dtype == torch.float32
                ids = indices(images)
                assert labels.tolist() == [i // TRAIN_PER_CLASS for i in ids]  # labels = folder classes
                got += ids
    reference = sampling.StepStream(n, B, B, 0, 1, seed=4)
    assert got == [i for s in range(steps) for i, _ in reference.micro_batch_samples(s, 0)]
    for epoch in range(2):
        assert sorted(got[epoch * n : (epoch + 1) * n]) == list(range(n))


@pytest.mark.parametrize("loader", BACKENDS)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_validation_sees_every_image_exactly_once_whatever_the_world_size(indexed, loader, world):
    seen, labels = [], Counter()
    for rank in range(world):
        data = build(spec(indexed, loader, eval_batch=4), 12, 2, rank, world, seed=0)
        for _ in range(2):  # evaluations repeat identically
            batch_ids, batch_labels = [], []
            for images, y in data.val():
                batch_ids += indices(images)
                batch_labels += y.tolist()
            assert batch_labels == [i // VAL_PER_CLASS for i in batch_ids]
        seen += batch_ids
        labels.update(batch_labels)
    assert sorted(seen) == list(range(CLASSES * VAL_PER_CLASS))
    assert labels == {c: VAL_PER_CLASS for c in range(CLASSES)}


def test_dali_and_torchvision_agree_on_the_same_images(tiny_dataset):
    """Same images, same crops: the outputs differ only by the decoders' and resize kernels' rounding."""
    out = {}
    for loader in BACKENDS:
        data = build(
            DataSpec(dataset="folder", path=tiny_dataset, image_size=32, loader=loader, workers=1, eval_batch=16),
            16,
            8,
            0,
            1,
            seed=0,
        )
        train = torch.cat([x for x, _ in data.train(2, 4)])
        val = torch.cat([x for x, _ in data.val()])
        out[loader] = train, val
        assert -0.5 < val.mean() < 0.5 and 0.5 < val.std() < 1.5  # normalised with ImageNet statistics
    one_level = 1 / 255 / min(augment.STD)
    for a, b in zip(out["dali"], out["torchvision"]):
        diff = (a - b).abs()
        assert diff.mean() < 0.25 * one_level and diff.max() < 3 * one_level


@pytest.mark.parametrize("loader", list(catalog.LOADERS))
def test_every_loader_trains_from_a_closable_iterator(indexed, loader):
    """The runner closes what train() returns when it stops early (the Loader protocol)."""
    data = build(spec(indexed, loader), 4, 4, 0, 1, seed=0)
    batches = data.train(0, 3)
    next(batches)
    batches.close()
    with pytest.raises(StopIteration):
        next(batches)


@pytest.mark.parametrize("loader", list(catalog.LOADERS))
def test_bfloat16_channels_last_batches(indexed, loader):
    data = build(spec(indexed, loader), 4, 4, 0, 1, seed=0, dtype="bfloat16", channels_last=True)
    images, labels = next(data.train(0, 1))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.bfloat16 and labels.dtype == torch.int64
    assert images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    if loader != "random":
        assert labels.tolist() == [i // TRAIN_PER_CLASS for i in indices(images)]
    val, _ = next(iter(data.val()))
    assert val.dtype == torch.bfloat16 and val.is_contiguous(memory_format=torch.channels_last)


def test_random_loader_needs_no_files_and_keeps_eval_counts(tmp_path):
    data = build(DataSpec(loader="random", image_size=24, eval_batch=64), 48, 16, 1, 3, seed=0)
    assert not (tmp_path / "cache").exists()  # the generated dataset was not written
    assert (data.num_classes, data.train_size, data.val_size) == (10, 1000, 300)
    images, labels = next(data.train(0, 1))
    assert images.shape == (16, 3, 24, 24) and images.device == data.device and labels.max() < 10
    assert sum(len(y) for _, y in data.val()) == 100  # rank 1 of 3: images 1, 4, 7, ...


def test_the_old_loader_name_synthetic_warns_and_means_random():
    with pytest.warns(FutureWarning, match=r"key 'data.loader': 'synthetic' is deprecated, use 'random'"):
        spec = DataSpec(loader="synthetic", image_size=24)
    assert spec.loader == "random"
    assert build(spec, 16, 16, 0, 1, seed=0).loader == "random"


@pytest.fixture()
def damaged(indexed, tmp_path) -> tuple[Path, str, str]:
    """The indexed dataset with one non-image train file and one truncated val file."""
    root = tmp_path / "damaged"
    shutil.copytree(indexed, root)
    junk, truncated = root / "train/class1/03.png", root / "val/class2/05.png"
    junk.write_text("this is not a PNG")
    truncated.write_bytes(truncated.read_bytes()[:60])  # the header parses, the pixels do not
    return root, str(junk), str(truncated)


@pytest.mark.parametrize("loader", BACKENDS)
def test_unreadable_files_are_skipped_counted_and_named_once(damaged, loader):
    root, junk, truncated = damaged
    data = build(spec(root, loader, workers=2, eval_batch=5), 10, 5, 0, 1, seed=0)
    with pytest.warns(UserWarning) as caught:
        train = [indices(x) for x, _ in data.train(0, 6)]  # two epochs: the junk file comes up twice
        val = [i for _ in range(2) for x, _ in data.val() for i in indices(x)]
    messages = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert len(messages) == 2 and junk in messages[0] + messages[1] and truncated in messages[0] + messages[1]
    assert data.unreadable.files == {junk, truncated}
    assert sum(map(len, train)) == 60 - 2 and 13 not in sum(train, [])  # train/class1/03 is index 13
    assert sorted(val) == sorted(2 * [i for i in range(21) if i != 19])  # val/class2/05 is index 19


@pytest.mark.parametrize("loader", BACKENDS)
def test_strict_makes_an_unreadable_file_an_error_naming_it(damaged, loader):
    root, junk, truncated = damaged
    data = build(spec(root, loader, strict=True, eval_batch=32), 10, 5, 0, 1, seed=0)
    with pytest.raises(UserError, match="val/class2/05.png: unreadable image"):
        list(data.val())


@pytest.mark.parametrize("loader", BACKENDS)
def test_a_micro_batch_of_only_unreadable_files_is_an_error_not_a_hang(damaged, loader):
    root, junk, _ = damaged
    data = build(spec(root, loader), 1, 1, 0, 1, seed=0)
    step = [s for s in range(30) if data.layout.train.files[data.stream.micro_batch_samples(s, 0)[0][0]] == junk][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UserError, match="every image of a micro-batch is unreadable"):
            list(data.train(0, step + 1))


def test_crop_geometry_matches_torchvision():
    """augment.py reproduces torchvision's Resize+CenterCrop and RandomResizedCrop ranges."""
    from torchvision.transforms import v2

    for w, h in [(500, 375), (375, 500), (40, 48), (301, 97)]:
        image = torch.arange(h * w, dtype=torch.float64).reshape(1, h, w)
        g = augment.eval_geometry(w, h, 32)
        resized = v2.functional.resize(image, round(32 / 0.875))
        assert resized.shape[1:] == (g.resize_height, g.resize_width)
        want = v2.CenterCrop(32)(resized)
        assert torch.equal(resized[:, g.top : g.top + 32, g.left : g.left + 32], want)
        for seed in range(200):
            c = augment.train_crop(seed, w, h, 0.08)
            assert 0 <= c.top and c.top + c.height <= h and 0 <= c.left and c.left + c.width <= w
            assert c == augment.train_crop(seed, w, h, 0.08)  # a pure function of the seed
    areas = [
        augment.train_crop(s, 500, 375, 0.25).width * augment.train_crop(s, 500, 375, 0.25).height / (500 * 375)
        for s in range(500)
    ]
    assert min(areas) > 0.2 and max(areas) <= 1 and 0.5 < np.mean(areas) < 0.7
    assert 0.4 < np.mean([augment.train_crop(s, 50, 50, 0.5).flip for s in range(400)]) < 0.6
    assert not any(augment.train_crop(s, 50, 50, 0.5, random_flip=False).flip for s in range(50))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"progressive": True},
        {"exif": b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x00"},
        {"quality": 50, "subsampling": 0},
        {"format": "PNG"},
    ],
)
def test_header_size_matches_pillow(tmp_path, options):
    from bench.data import images

    pixels = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    path = tmp_path / "x.img"
    Image.fromarray(pixels).save(path, **{"format": "JPEG", **options})
    data, width, height = images.read_header(str(path))
    assert (width, height) == (53, 37) and data == path.read_bytes()
    path.write_bytes(b"\xff\xd8\xff" + b"\x00" * 20)
    with pytest.raises(images.UnreadableImage):
        images.read_header(str(path))


def test_dali_iterator_dropped_midway_frees_its_pipelines_for_the_next(indexed):
    data = build(spec(indexed, "dali"), 4, 4, 0, 1, seed=0)
    first = data.train(0, 100)
    next(first)
    del first  # as the runner does when it stops early, or resumes from a later step
    images, _ = next(data.train(5, 6))
    assert indices(images) == [i for i, _ in data.stream.micro_batch_samples(5, 0)]


def test_pad_crop_windows_are_cifars_and_both_backends_cut_them_alike(tmp_path):
    """data.augment pad_crop (He et al. 2016): a window of the image's size shifted by at most `pad` pixels into a
    black border, then the flip; evaluation sees the whole image. DALI and torchvision give the same pixels."""
    offsets = {(c.top, c.left) for c in (augment.pad_crop(s, 32, 32, 4) for s in range(2000))}
    assert offsets == {(t, left) for t in range(-4, 5) for left in range(-4, 5)}  # all 81, nothing beyond
    assert all(augment.pad_crop(s, 32, 32, 4)[2:4] == (32, 32) for s in range(50))
    assert augment.eval_geometry(32, 32, 32, "pad_crop") == (32, 32, 0, 0)
    rng = np.random.default_rng(0)
    for split, n in (("train", 8), ("val", 4)):
        (tmp_path / split / "a").mkdir(parents=True)
        for k in range(n):  # noise images: any misplaced pixel shows
            pixels = rng.integers(30, 226, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / split / "a" / f"{k}.png")
    out = {}
    for loader in BACKENDS:
        data = build(
            DataSpec(
                dataset="folder",
                path=tmp_path,
                image_size=32,
                loader=loader,
                workers=1,
                augment="pad_crop",
                pad=4,
                eval_batch=4,
            ),
            8,
            8,
            0,
            1,
            seed=0,
        )
        out[loader] = torch.cat([x for x, _ in data.train(0, 1)]), torch.cat([x for x, _ in data.val()])
    for a, b in zip(out["dali"], out["torchvision"]):
        # PNG decodes exactly and 32 -> 32 px is no resize: the same pixels, up to the normalisation's rounding
        assert torch.allclose(a, b, rtol=0, atol=1e-5)
    train, val = out["torchvision"]
    black = (torch.zeros(3) - torch.tensor(augment.MEAN)) / torch.tensor(augment.STD)
    border = (train == black[None, :, None, None]).all(dim=1)  # pixels of the padding
    assert border.any() and not (val == black[None, :, None, None]).all(dim=1).any()
    original = torch.stack(
        [torch.from_numpy(np.array(Image.open(tmp_path / "val" / "a" / f"{k}.png"))) for k in range(4)]
    ).permute(0, 3, 1, 2)
    assert torch.allclose(
        val,
        (original / 255 - torch.tensor(augment.MEAN)[:, None, None]) / torch.tensor(augment.STD)[:, None, None],
        atol=1e-5,
    )
