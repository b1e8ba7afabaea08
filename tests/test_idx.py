"""`bench data idx`: the MNIST family's idx files to the folder layout."""

import os
import stat

import numpy as np
import pytest
from PIL import Image

from bench.cli import main
from bench.data import folder
from tests.helpers import family, idx


@pytest.mark.parametrize("gz", [False, True])
def test_converts_every_image_to_its_class_folder(tmp_path, capsys, gz):
    out = tmp_path / "out"
    assert main(["data", "idx", str(family(tmp_path / "fashion-mnist", gz=gz)), "--out", str(out)]) == 0
    assert "wrote 60 train and 20 val images in 10 classes" in capsys.readouterr().out
    layout = folder.scan(out)
    assert layout.classes[0] == "0_T-shirt-top" and layout.classes[9] == "9_Ankle-boot"  # sorted = label order
    for split in (layout.train, layout.val):
        for path, label in zip(split.files, split.labels):
            pixels = np.asarray(Image.open(path))
            assert Image.open(path).mode == "L" and pixels.shape == (28, 28) and pixels[0, 0] // 10 == label


def test_the_data_check_of_idx_files_names_the_converter(tmp_path, capsys):
    """`bench data check` pointed at the downloaded idx files (not yet a dataset folder) says how to convert them."""
    root = family(tmp_path / "fashion-mnist", gz=True)
    assert main(["data", "check", str(root)]) == 2
    assert f"these are idx files: `bench data idx {root} --out DIR` converts them" in capsys.readouterr().err


def test_names_subsets_and_classes(tmp_path, capsys):
    root = family(tmp_path / "digits", train_per_class=20)
    assert (
        main(
            [
                "data",
                "idx",
                str(root),
                "--out",
                str(tmp_path / "a"),
                "--names",
                "mnist",
                "--per-class",
                "5",
                "--val-per-class",
                "1",
                "--classes",
                "3,7",
            ]
        )
        == 0
    )
    a = folder.scan(tmp_path / "a")
    assert a.classes == ("3", "7") and len(a.train) == 10 and len(a.val) == 2
    assert (
        main(
            [
                "data",
                "idx",
                str(root),
                "--out",
                str(tmp_path / "b"),
                "--names",
                "mnist",
                "--per-class",
                "5",
                "--val-per-class",
                "1",
                "--classes",
                "3,7",
            ]
        )
        == 0
    )
    b = folder.scan(tmp_path / "b")
    names = lambda layout: [os.path.relpath(f, layout.root) for f in layout.train.files]
    assert names(a) == names(b)  # the same seed draws the same images
    assert main(["data", "idx", str(root), "--out", str(tmp_path / "c"), "--per-class", "5", "--seed", "1"]) == 0
    assert folder.scan(tmp_path / "c").classes == tuple(str(c) for c in range(10))  # no known names: the labels
    capsys.readouterr()


def test_emnist_images_are_transposed_back(tmp_path):
    root = tmp_path / "e"
    root.mkdir()
    image = np.zeros((1, 28, 28))
    image[0, 0, 5] = 200  # stored transposed: the pixel belongs at row 5, column 0
    for split in ("train", "t10k"):
        idx(root / f"emnist-letters-{split}-images-idx3-ubyte", image)
        idx(root / f"emnist-letters-{split}-labels-idx1-ubyte", np.array([1]))
    assert main(["data", "idx", str(root), "--out", str(tmp_path / "out")]) == 0
    [path] = folder.scan(tmp_path / "out").train.files
    assert np.asarray(Image.open(path))[5, 0] == 200


@pytest.mark.parametrize(
    "damage, said",
    [
        (dict(magic=bytes([0, 0, 8, 1])), "not an idx3 file of unsigned bytes (magic 00000801, expected 00000803)"),
        (dict(magic=bytes([0, 0, 0x0D, 3])), "not an idx3 file of unsigned bytes (magic 00000d03"),
        (dict(cut=5), "the file is cut off or damaged"),
    ],
)
def test_a_damaged_file_is_one_sentence_and_writes_nothing(tmp_path, capsys, damage, said):
    root = family(tmp_path / "in")
    idx(root / "train-images-idx3-ubyte", np.zeros((60, 28, 28)), **damage)
    assert main(["data", "idx", str(root), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(root / "train-images-idx3-ubyte") in err and said in err, err
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["in"]


def test_missing_files_and_mismatched_counts(tmp_path, capsys):
    root = family(tmp_path / "in")
    (root / "t10k-labels-idx1-ubyte").unlink()
    assert main(["data", "idx", str(root), "--out", str(tmp_path / "out")]) == 2
    assert "no t10k-labels-idx1-ubyte[.gz] file" in capsys.readouterr().err
    idx(root / "t10k-labels-idx1-ubyte", np.zeros(3))
    assert main(["data", "idx", str(root), "--out", str(tmp_path / "out")]) == 2
    assert "t10k has 20 images but 3 labels" in capsys.readouterr().err
    assert main(["data", "idx", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_subset_larger_than_a_class_is_refused_not_capped(tmp_path, capsys):
    root = family(tmp_path / "digits", train_per_class=20)
    assert main(["data", "idx", str(root), "--out", str(tmp_path / "out"), "--per-class", "21"]) == 2
    err = capsys.readouterr().err
    assert "--per-class 21: class '0' has 20 train images" in err and "at most 20 a class" in err, err
    assert not (tmp_path / "out").exists()


def test_converted_folders_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        assert main(["data", "idx", str(family(tmp_path / "in")), "--out", str(tmp_path / "out")]) == 0
        assert main(["data", "digits", "--out", str(tmp_path / "digits")]) == 0
    finally:
        os.umask(old)
    for path in (tmp_path / "out", tmp_path / "out" / "train", tmp_path / "digits"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o755, path
