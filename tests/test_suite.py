"""`bench suite`: every recipe of a folder, diverged runs recorded, completed runs skipped."""

import json

import pytest

from tests.conftest import cli, write_recipe

RECIPE = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 24, crop_scale_min: 0.35, workers: 0, loader: torchvision}
global_batch: 32
micro_batch: 16
optimizer: {name: OPT, lr: LR, momentum: 0.9}
schedule: {warmup_epochs: 0}
epochs: 1
target_top1: 40
"""


@pytest.mark.slow
def test_suite_runs_records_divergence_skips_completed_and_regenerates(tmp_path, tiny_dataset):
    folder = tmp_path / "study"
    folder.mkdir()
    for name, opt, lr in (("a-sgd", "sgd", "0.1"), ("b-lars", "lars", "1.0e+12")):
        text = RECIPE.replace("DATA", str(tiny_dataset)).replace("OPT", opt).replace("LR", lr)
        write_recipe(folder / f"{name}.yaml", text)
    results, plots = tmp_path / "results", tmp_path / "plots"
    done = cli("suite", str(folder), "--out", str(results), "--plots", str(plots))
    assert done.returncode == 0, done.stderr
    assert "a-sgd: completed" in done.stdout and "b-lars: diverged" in done.stdout
    assert (results / "report.md").is_file() and (results / "compare.csv").is_file()
    assert any(p.suffix == ".png" and p.stat().st_size > 0 for p in plots.iterdir())
    [run] = (results / "b-lars").iterdir()
    assert json.loads((run / "meta.json").read_text())["status"] == "diverged"

    again = cli("suite", str(folder), "--out", str(results), "--plots", str(plots))
    assert again.returncode == 0
    assert "a-sgd: skipped (finished before)" in again.stdout and "b-lars: skipped (finished before)" in again.stdout
    assert len(list((results / "a-sgd").iterdir())) == 1 == len(list((results / "b-lars").iterdir()))


def test_suite_with_a_bad_recipe_runs_nothing(tmp_path, tiny_dataset):
    folder = tmp_path / "study"
    folder.mkdir()
    write_recipe(
        folder / "good.yaml", RECIPE.replace("DATA", str(tiny_dataset)).replace("OPT", "sgd").replace("LR", "0.1")
    )
    write_recipe(
        folder / "bad.yaml", RECIPE.replace("DATA", str(tiny_dataset)).replace("OPT", "sgdd").replace("LR", "0.1")
    )
    done = cli("suite", str(folder), "--out", str(tmp_path / "results"))
    assert done.returncode == 2 and "bad.yaml" in done.stderr and "sgdd" in done.stderr
    assert not (tmp_path / "results").exists()
