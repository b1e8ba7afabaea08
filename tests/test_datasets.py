"""`bench data ...`: generators, converters, the check command, layouts; and `bench perf data`."""

import io
import pickle
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bench.cli import main
from bench.data import build, digits, folder
from bench.errors import UserError
from bench.recipe import DataSpec


def test_synth_writes_non_square_jpegs_of_the_given_quality(tmp_path):
    out = tmp_path / "inet"
    assert (
        main(
            [
                "data",
                "synth",
                "--out",
                str(out),
                "--classes",
                "2",
                "--train-per-class",
                "2",
                "--val-per-class",
                "1",
                "--width",
                "50",
                "--height",
                "30",
                "--quality",
                "70",
            ]
        )
        == 0
    )
    with Image.open(out / "train" / "n00000001" / "n00000001_1.JPEG") as image:
        assert image.size == (50, 30) and image.format == "JPEG"
    assert len(list(out.rglob("*.JPEG"))) == 6


def test_digits_export_has_the_fixed_split(tmp_path, capsys):
    out = tmp_path / "digits"
    assert main(["data", "digits", "--out", str(out), "--size", "12"]) == 0
    layout = folder.scan(out)
    assert layout.classes == tuple(str(d) for d in range(10))
    assert (len(layout.train), len(layout.val)) == (1442, 355)
    assert "1442 train and 355 val images in 10 classes" in capsys.readouterr().out
    pixels, labels = digits.load()
    # Image 0 of the bundled set is a 0, the first of its class: training; the fifth 0 is validation.
    fifth_zero = int(np.flatnonzero(labels == 0)[4])
    assert (out / "train" / "0" / "0_0000.png").is_file() and (out / "val" / "0" / f"0_{fifth_zero:04d}.png").is_file()
    with Image.open(out / "train" / "0" / "0_0000.png") as image:
        assert image.size == (12, 12)
        small = np.asarray(image.resize((8, 8), Image.BOX), float)
    assert np.corrcoef(small.ravel(), pixels[0].ravel().astype(float))[0, 1] > 0.9  # the digit survived upscaling


def test_recipe_dataset_digits_is_generated_into_the_cache(tmp_path):
    data = build(
        DataSpec(dataset="digits", digits={"size": 8}, image_size=8, loader="torchvision", workers=0),
        32,
        32,
        0,
        1,
        seed=0,
    )
    assert data.num_classes == 10 and data.train_size == 1442 and data.val_size == 355
    assert data.root.parent == tmp_path / "cache"
    images, labels = next(data.train(0, 1))
    assert images.shape == (32, 3, 8, 8) and labels.max() < 10


HANDMADE = {"root": None, "calls": []}


def handmade_root(section):
    """The root function of the throwaway dataset record below: says it ran, with what."""
    HANDMADE["calls"].append(section)
    return HANDMADE["root"]


@pytest.mark.parametrize("loader", ["torchvision", "random"])
def test_a_new_dataset_record_runs_its_own_root_function_not_the_synthetic_set(
    tiny_dataset, tmp_path, monkeypatch, loader
):
    from bench import catalog

    monkeypatch.setitem(
        catalog.DATASETS,
        "handmade",
        catalog.Dataset("handmade", "tests.test_datasets:handmade_root", "digits", "folder", "handmade"),
    )
    monkeypatch.setitem(HANDMADE, "root", tiny_dataset)
    monkeypatch.setitem(HANDMADE, "calls", [])
    spec = DataSpec(dataset="digits", digits={"size": 9}, image_size=8, loader=loader, workers=0)
    data = build(spec.model_copy(update={"dataset": "handmade"}), 16, 16, 0, 1, seed=0)
    assert HANDMADE["calls"] == [spec.digits]  # its function, given its recipe key
    assert data.root == tiny_dataset and (data.num_classes, data.train_size, data.val_size) == (4, 160, 40)
    assert not (tmp_path / "cache").exists()  # nothing generated: no synthetic (nor digits) set behind it


def test_an_unknown_or_unresolvable_dataset_record_is_one_sentence(tmp_path, monkeypatch, capsys):
    from bench import catalog

    spec = DataSpec(image_size=8, loader="torchvision", workers=0)
    with pytest.raises(UserError, match="key 'data.dataset' is 'nowhere': no dataset record has that name; valid"):
        build(spec.model_copy(update={"dataset": "nowhere"}), 16, 16, 0, 1, seed=0)
    for target in ("tests.test_datasets:no_such_function", "tests.no_such_module:root", "tests.test_datasets:HANDMADE"):
        monkeypatch.setitem(
            catalog.DATASETS, "synthetic", catalog.Dataset("synthetic", target, "synth", "folder", "synthetic data")
        )
        with pytest.raises(UserError, match=f"dataset 'synthetic''s root function '{target}' does not resolve"):
            build(spec, 16, 16, 0, 1, seed=0)
        recipe = tmp_path / "r.yaml"
        recipe.write_text(
            "model: {name: resnet18}\nglobal_batch: 64\noptimizer: {name: sgd, lr: 0.1}\nepochs: 1\ntarget_top1: 50\n"
        )
        assert main(["validate", str(recipe)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bench: error: {recipe}: dataset 'synthetic''s root function") and err.count("\n") == 1
    assert not (tmp_path / "cache").exists()


def _pickle(obj) -> bytes:
    return pickle.dumps(obj, protocol=2)


def _cifar_archive(path: Path, hundred: bool, rng) -> dict:
    """A tiny archive in the real layout and pickle format (bytes keys, uint8 rows of 3072)."""
    top = "cifar-100-python" if hundred else "cifar-10-batches-py"
    names = ["apple", "bee", "cloud"] if hundred else ["airplane", "automobile", "bird"]
    labels_key = b"fine_labels" if hundred else b"labels"
    members, images = {}, {"train": [], "val": []}
    batches = (
        {"train": ["train"], "val": ["test"]}
        if hundred
        else {"train": [f"data_batch_{i}" for i in range(1, 6)], "val": ["test_batch"]}
    )
    for split, files in batches.items():
        for name in files:
            data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
            labels = [0, 1, 2, int(rng.integers(0, 3))]  # every class in every split
            members[name] = {
                b"batch_label": name.encode(),
                labels_key: labels,
                b"data": data,
                b"filenames": [f"x_{i}.png".encode() for i in range(4)],
            }
            images[split] += list(zip(data, labels))
    meta = (
        {b"fine_label_names": [n.encode() for n in names], b"coarse_label_names": [b"all"]}
        if hundred
        else {b"label_names": [n.encode() for n in names], b"num_cases_per_batch": 4}
    )
    members["meta" if hundred else "batches.meta"] = meta
    with tarfile.open(path, "w:gz") as tar:
        for name, obj in members.items():
            blob = _pickle(obj)
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return {"names": names, "images": images}


@pytest.mark.parametrize("hundred", [False, True])
def test_cifar_archive_converts_to_the_layout_pixel_exact(tmp_path, hundred):
    archive = tmp_path / ("cifar-100-python.tar.gz" if hundred else "cifar-10-python.tar.gz")
    made = _cifar_archive(archive, hundred, np.random.default_rng(0))
    out = tmp_path / "cifar"
    assert main(["data", "cifar", str(archive), "--out", str(out)]) == 0
    layout = folder.scan(out)
    assert layout.classes == tuple(made["names"])
    for split in ("train", "val"):
        want = made["images"][split]
        assert Counter(getattr(layout, split).labels) == Counter(label for _, label in want)
        row, label = want[1]
        with Image.open(out / split / made["names"][label] / "00001.png") as image:
            assert np.array_equal(np.asarray(image), row.reshape(3, 32, 32).transpose(1, 2, 0))


def test_cifar_archive_that_would_run_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            import os

            return os.system, ("echo owned",)

    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        blob = _pickle({b"label_names": [Evil()]})
        info = tarfile.TarInfo("cifar-10-batches-py/batches.meta")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(UserError, match="posix.system|os.system|not a CIFAR batch"):
        main_raising(["data", "cifar", str(archive), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def main_raising(argv):
    from bench.cli import parser

    args = parser().parse_args(argv)
    return args.func(args)


def test_check_reports_classes_counts_and_unreadable_files(tiny_dataset, tmp_path, capsys):
    assert main(["data", "check", str(tiny_dataset), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 classes" in out and "train: 160 images, 40-40 per class" in out and "unreadable: 0" in out

    import shutil

    root = tmp_path / "copy"
    shutil.copytree(tiny_dataset, root)
    bad = root / "val" / "n00000002" / "n00000002_3.JPEG"
    bad.write_bytes(bad.read_bytes()[:300])
    (root / "train" / "n00000000" / "notes.txt").write_text("not an image")
    assert main(["data", "check", str(root), "--workers", "2"]) == 1
    out = capsys.readouterr().out
    assert "unreadable: 1" in out and str(bad) in out and "ignored: 1 files" in out


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda root: __import__("shutil").rmtree(root / "val"), "missing split folder 'val/'"),
        (lambda root: [p.unlink() for p in (root / "train" / "n00000001").iterdir()], "empty class folder"),
        (lambda root: (root / "val" / "n00000001").rename(root / "val" / "n00000009"), "classes differ from train/"),
    ],
)
def test_layout_problems_are_one_sentence_and_exit_2(tiny_dataset, tmp_path, capsys, damage, message):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(tiny_dataset, root)
    damage(root)
    assert main(["data", "check", str(root)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(root) in err and err.count("\n") == 1


def test_file_lists_are_a_layout_too(tiny_dataset, tmp_path):
    layout = folder.scan(tiny_dataset)
    for split in ("train", "val"):
        s = getattr(layout, split)
        lines = [f"{Path(f).relative_to(tiny_dataset)} {label}" for f, label in zip(s.files, s.labels)]
        (tmp_path / f"{split}.txt").write_text("\n".join(lines) + "\n")
    for split in ("train", "val"):
        (tmp_path / split).symlink_to(tiny_dataset / split)
    lists = folder.scan_lists(tmp_path)
    assert lists.classes == ("0", "1", "2", "3") and len(lists.train) == 160 and lists.val.labels == layout.val.labels
    data = build(DataSpec(dataset="filelist", path=tmp_path, image_size=16, loader="dali", workers=1), 8, 8, 0, 1, 0)
    assert next(data.train(0, 1))[0].shape == (8, 3, 16, 16)
    (tmp_path / "val.txt").write_text("val/x.JPEG 7\n")
    with pytest.raises(UserError, match="val.txt:1: .* does not exist"):
        folder.scan_lists(tmp_path)


def test_perf_data_reports_both_backends_and_their_ratio(tiny_dataset, capsys):
    from bench.perf import data as perf_data

    assert (
        perf_data.main(
            [
                "--root",
                str(tiny_dataset),
                "--size",
                "32",
                "--batch",
                "8",
                "--threads",
                "1",
                "--rounds",
                "2",
                "--batches",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "round 2: torchvision" in out and "dali-cpu" in out and "ratio dali-cpu / torchvision: " in out
    assert "resized_crop, 32px" in out
    assert (
        perf_data.main(
            [
                "--root",
                str(tiny_dataset),
                "--size",
                "32",
                "--batch",
                "8",
                "--threads",
                "1",
                "--rounds",
                "1",
                "--batches",
                "1",
                "--augment",
                "pad_crop",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "pad_crop, 32px" in out and "ratio dali-cpu / torchvision: " in out
