"""bench from Python (bench.api): a notebook or a submitit job drives bench without the shell."""

import pandas as pd
import pytest

from bench import api
from bench.errors import UserError
from tests.conftest import RECIPES, write_recipe
from tests.helpers import BASE, SWEEP

TINY = ["epochs=1", "data.synth.train_per_class=10", "data.synth.val_per_class=5", "schedule.warmup_epochs=0"]


def test_load_run_and_read_back(tmp_path):
    recipe = api.load_recipe(RECIPES / "demo-sgd.yaml", TINY)
    run = api.run(recipe, out=tmp_path)
    assert (run / "meta.json").is_file() and run.parent == tmp_path / "demo-sgd"
    runs = api.results(tmp_path)
    assert isinstance(runs, pd.DataFrame) and list(runs["status"]) == ["completed"]
    recipes = api.results(tmp_path, per="recipe")
    assert list(recipes["n"]) == [1] and recipes["val_top1"].iloc[0] == runs["val_top1"].iloc[0]
    curves = api.curves(tmp_path)
    assert len(curves) == 1 and {"epoch", "val_top1", "run"} <= set(curves.columns)
    assert api.run(recipe, out=tmp_path) != run  # a finished recipe run again: a second run, as bench run does


def test_a_recipe_from_a_dict_and_bad_input_is_a_user_error(tmp_path):
    spec = {
        "name": "d",
        "model": {"name": "resnet10t"},
        "global_batch": 20,
        "optimizer": {"name": "sgd", "lr": 0.1},
        "epochs": 1,
        "target_top1": 50,
        "data": {"synth": {"classes": 2, "train_per_class": 10, "val_per_class": 5}, "image_size": 32},
    }
    r = api.recipe(spec, ["optimizer.lr=0.2"])
    assert r.optimizer.lr == 0.2 and r.name == "d"
    with pytest.raises(UserError, match="unknown key 'epoch'"):
        api.recipe({**spec, "epoch": 1})
    with pytest.raises(UserError, match="key 'data.path'"):
        api.run(api.recipe({**spec, "data": {"dataset": "folder", "path": str(tmp_path / "none")}}), out=tmp_path)


@pytest.mark.slow
def test_the_library_checks_data_without_the_command_line(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom bench import api\nfrom bench.errors import UserError\n"
        "r = api.recipe({'name': 'd', 'model': {'name': 'resnet8_cifar'}, 'global_batch': 20, 'optimizer': {'name': "
        f"'sgd', 'lr': 0.1}}, 'epochs': 1, 'target_top1': 50, 'data': {{'dataset': 'folder', 'path': "
        f"{str(tmp_path / 'none')!r}}}}})\n"
        "try:\n    api.run(r)\nexcept UserError as e:\n    print(e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('bench.') and m.split('.')[1] in ('cli', 'analysis')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.splitlines() == [f"d: key 'data.path': {tmp_path / 'none'}: dataset directory does not exist", "[]"]


def test_a_sweep_from_python(tmp_path, tiny_dataset):
    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)))
    path = write_recipe(tmp_path / "tiny.yaml", SWEEP)
    runs = api.sweep(path, out=tmp_path / "results", only="sgd-b32-t00", allow_dirty=True)
    assert list(runs["recipe"]) == ["tiny-sgd-b32-t00"] and runs["finished"].all()
