"""Recipe loading, overrides, and every bad input: one sentence, exit 2, nothing written."""

import shutil
import warnings
from pathlib import Path

import pytest
import yaml

from bench import recipe
from bench.cli import main
from bench.data import resolve_loader
from bench.errors import BenchWarning, UserError
from tests.conftest import RECIPES, write_recipe

BASE = """
model: {name: resnet10t}
data: {dataset: folder, path: DATA, image_size: 32, workers: 0}
global_batch: 64
micro_batch: 16
optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
epochs: 1
target_top1: 50
"""


def test_defaults_are_resolved_and_round_trip(tmp_path):
    r = recipe.load(write_recipe(tmp_path / "r.yaml", BASE))
    assert r.name == "r"  # from the file name
    assert r.schedule.decay == "cosine" and r.label_smoothing == 0.0 and r.eval.every_epochs == 1.0
    assert r.optimizer.hparams == {"momentum": 0.9}
    # The resolved YAML holds every key and loads back to the same recipe.
    resolved = yaml.safe_load(r.to_yaml())
    assert resolved["schedule"]["warmup_epochs"] == 0.0 and resolved["data"]["crop_scale_min"] == 0.08
    again = recipe.load(write_recipe(tmp_path / "r.yaml", r.to_yaml()))
    assert again == r


def test_set_overrides_nested_keys_and_optimizer_hparams(tmp_path):
    path = write_recipe(tmp_path / "r.yaml", BASE)
    r = recipe.load(
        path,
        [
            "schedule.decay=poly",
            "optimizer.lr=0.5",
            "optimizer.nesterov=true",
            "global_batch=98304",
            "micro_batch=auto",
            "model.kwargs.drop_rate=0.1",
        ],
    )
    assert (r.schedule.decay, r.optimizer.lr, r.global_batch, r.micro_batch) == ("poly", 0.5, 98304, "auto")
    assert r.optimizer.hparams["nesterov"] is True and r.model.kwargs == {"drop_rate": 0.1}


SWEEPS = RECIPES / "sweeps"  # sweep files (bench sweep); their base recipes are in sweeps/base/
BRANCHES = RECIPES / "branch"  # branch files (bench branch: tests/test_branch.py lists them)
DEMO = RECIPES / "demo.yaml"  # the main job: a sweep file too (its base: demo-sgd.yaml)


def test_every_shipped_recipe_validates():
    """Every shipped recipe loads; only the four studies made before the dead-parameter probe (the mini studies'
    resnet10t at 16 and 32 px, the width-depth study's resnet18 reshapes at 32 px, the superseded Fashion-MNIST
    study's at 28 px: docs/studies.md discloses each) carry dead parameters, and the probe says so for each of
    their recipes."""
    paths = sorted(str(p) for p in RECIPES.rglob("*.yaml") if p.parent not in (SWEEPS, BRANCHES) and p != DEMO)
    before = ("base/mini.yaml", "base/fashion-mnist.yaml")
    before_probe = [p for p in paths if Path(p).parent.name in ("mini", "width-depth") or p.endswith(before)]
    with pytest.warns(BenchWarning, match="get exactly zero gradient") as said:
        assert main(["validate", "--schema-only", "--models", *before_probe]) == 0
    assert len(before_probe) == 34 and sorted(str(w.message).split(":")[0] for w in said) == before_probe
    with warnings.catch_warnings():
        warnings.simplefilter("error", BenchWarning)
        assert main(["validate", "--schema-only", "--models", *(p for p in paths if p not in before_probe)]) == 0
    embedded = [p for p in paths if "path:" not in Path(p).read_text()]  # the generated datasets need no folder
    assert any(p.endswith("recipes/demo-sgd.yaml") for p in embedded) and main(["validate", *embedded]) == 0
    assert main(["validate", str(DEMO)]) == 0  # the main job, a sweep file: its trial recipes load


def test_a_warmup_as_long_as_the_run_warns_that_the_lr_barely_decays(tmp_path):
    """own-data.yaml (warm-up 1 epoch, cosine) with --set epochs=1 trained at its peak lr to the end, unsaid."""
    path = write_recipe(tmp_path / "r.yaml", BASE.replace("DATA", str(tmp_path)) + "schedule: {warmup_epochs: 1}\n")
    with pytest.warns(
        BenchWarning, match=r"warmup_epochs 1 is 100% of the run \(epochs 1\): .* the cosine decay barely acts"
    ):
        recipe.load(path, models=False)
    with warnings.catch_warnings():  # a constant lr after the warm-up decays nothing anyway; a shorter one decays
        warnings.simplefilter("error", BenchWarning)
        recipe.load(path, ["schedule.decay=constant"], models=False)
        recipe.load(path, ["schedule.warmup_epochs=0.5"], models=False)
    with pytest.warns(BenchWarning, match=r"warmup_epochs 0.95 is 95% of the run"):  # not only a whole-run one
        recipe.load(path, ["schedule.warmup_epochs=0.95"], models=False)


def test_validate_and_run_name_the_recipe_and_key_of_a_missing_dataset(tmp_path, tiny_dataset, capsys):
    text = (RECIPES / "demo-sgd.yaml").read_text().replace("dataset: synthetic", "dataset: folder\n  path: PATH")
    cases = {
        "nowhere": "dataset directory does not exist",
        "empty": "missing split folder 'train/'",
        "mixed": "classes differ from train/",
    }
    (tmp_path / "empty").mkdir()
    for split, classes in (("train", ("a", "b")), ("val", ("a", "c"))):
        for c in classes:
            (tmp_path / "mixed" / split / c).mkdir(parents=True)
    for name, said in cases.items():
        path = write_recipe(tmp_path / f"{name}.yaml", text.replace("PATH", str(tmp_path / name)))
        for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out")]):
            assert main(command) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"bench: error: {path}: key 'data.path': {tmp_path / name}") and said in err, err
        assert main(["validate", "--schema-only", str(path)]) == 0
    assert not (tmp_path / "out").exists()
    path = write_recipe(tmp_path / "ok.yaml", text.replace("PATH", str(tiny_dataset)))
    assert main(["validate", str(path)]) == 0


@pytest.mark.slow
def test_every_shipped_sweep_expands(capsys, tmp_path, monkeypatch):
    from tests.helpers import family

    # the Fashion-MNIST studies' budgets are in images: their expansion reads the training-set size from
    # data/fashion-mnist-10k and -20k, here stand-ins of the same layout made by the same converter (the ladder's
    # base holds out 3,000 images: 400 a class leaves 1,000 to train on)
    monkeypatch.chdir(tmp_path)
    for out, per_class in (("data/fashion-mnist-10k", 110), ("data/fashion-mnist-20k", 400)):
        source = family(tmp_path / f"fashion-mnist-{per_class}", train_per_class=per_class)
        assert main(["data", "idx", str(source), "--out", out]) == 0
    sweeps = [*sorted(SWEEPS.glob("*.yaml")), DEMO]
    assert sweeps
    for path in sweeps:
        assert main(["sweep", str(path), "--list"]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.count("\n") > 2
    assert main(["sweep", str(SWEEPS / "fashion-mnist.yaml"), "--list"]) == 0
    listed = capsys.readouterr().out
    assert listed.count("fashion-mnist-") == 48 and "| vrgd_lars | 1024 |" in listed  # 4 arms x 3 batches x 4 trials


BAD = [
    # (what, change to the base text or a raw text, --set args, words the message must contain)
    ("unknown key", BASE + "colour: blue\n", [], ["unknown key 'colour'"]),
    (
        "misspelt top-level key",
        BASE.replace("epochs: 1", "epoch: 1"),
        [],
        ["unknown key 'epoch' (did you mean 'epochs'?)"],
    ),
    (
        "misspelt nested key",
        BASE + "schedule: {warmup_epoch: 1}\n",
        [],
        ["unknown key 'schedule.warmup_epoch' (did you mean 'warmup_epochs'?)"],
    ),
    (
        "misspelt key of an optional section",
        BASE + "adaptive_batch: {min_bach: 16}\n",
        [],
        ["unknown key 'adaptive_batch.min_bach' (did you mean 'min_batch'?)"],
    ),
    ("wrong type", BASE.replace("global_batch: 64", "global_batch: lots"), [], ["global_batch", "integer"]),
    ("zero batch", BASE.replace("global_batch: 64", "global_batch: 0"), [], ["global_batch", "greater than 0"]),
    ("negative lr", BASE.replace("lr: 0.1", "lr: -0.1"), [], ["optimizer.lr", "must be a number in (0, inf)"]),
    ("zero lr", BASE.replace("lr: 0.1", "lr: 0"), [], ["key 'optimizer.lr': must be a number in (0, inf) (got 0.0)"]),
    (
        "indivisible batch",
        BASE.replace("micro_batch: 16", "micro_batch: 24"),
        [],
        ["global_batch 64", "micro_batch 24"],
    ),
    (
        "indivisible batch from --set",  # the command line's value is named, not blamed on the file alone
        BASE,
        ["micro_batch=24", "optimizer.lr=0.2"],
        ["bad.yaml with --set micro_batch=24: global_batch 64", "micro_batch 24"],
    ),
    ("unknown model", BASE.replace("resnet10t", "resnet5O"), [], ["model.name", "resnet50"]),
    ("unknown optimizer", BASE.replace("name: sgd", "name: lasr"), [], ["lasr", "lars"]),
    ("unknown optimizer hparam", BASE.replace("momentum: 0.9", "momentun: 0.9"), [], ["momentun", "momentum"]),
    ("bad decay", BASE + "schedule: {decay: cosin}\n", [], ["schedule.decay", "'cosine'"]),
    ("malformed yaml", BASE + "epochs: [1,\n", [], ["malformed YAML", "line"]),
    ("not a mapping", "- just\n- a list\n", [], ["YAML mapping"]),
    ("missing key", BASE.replace("target_top1: 50\n", ""), [], ["missing required key 'target_top1'"]),
    ("set unknown key", BASE, ["schedule.colour=1"], ["--set", "schedule.colour", "not a recipe key"]),
    ("a name where a section goes", BASE, ["model=resnet20_cifar"], ["key 'model': a section (a mapping of keys)"]),
    (
        "set an optimizer option misspelt (its --set named; weight_decay not offered: the top-level key)",
        BASE,
        ["optimizer.momentun=0.9"],
        ["with --set optimizer.momentun=0.9: key 'optimizer.momentun'", "valid ones are: lr, momentum, nesterov."],
    ),
    ("set value not YAML", BASE, ["optimizer.lr=["], ["--set 'optimizer.lr=['", "not valid YAML"]),
    ("set value a bad tag", BASE, ["optimizer.lr=!!float x"], ["--set 'optimizer.lr=!!float x'", "not valid YAML"]),
    ("a date where a number goes", BASE, ["optimizer.lr=2020-13-01"], ["optimizer.lr", "valid number"]),  # text
    ("a list as a key", BASE + "? [a, b]\n: 1\n", [], ["malformed YAML", "keys are names"]),
    ("an empty name from --set", BASE, ["name="], ["key 'name'", "valid string (got None)"]),
    ("folder without path", BASE.replace("path: DATA, ", ""), [], ["data.path is required"]),
    ("name outside --out", BASE + "name: ../../x\n", [], ["name '../../x' must be one folder name"]),
    ("absolute name", BASE, ["name=/tmp/x"], ["name '/tmp/x' must be one folder name"]),
    ("hidden name", BASE + "name: .x\n", [], ["must be one folder name"]),
    (
        "thinned events under an adaptive pace",
        BASE.replace("name: sgd", "name: adascale_sgd") + "logging: {events_every_steps: 10}\n",
        [],
        ["logging.events_every_steps 10 needs a fixed pace", "'adascale_sgd' (its gain moves the schedule)"],
    ),
    (
        "an EMA over a schedule-free optimizer",
        BASE,
        ['optimizer={"name": "schedulefree_adamw", "lr": 0.01}', "eval.ema_epochs=0.5"],
        ["key 'eval.ema_epochs'", "'schedulefree_adamw' is schedule-free", "set eval.ema_epochs: null"],
    ),
    (
        "weight decay inside the optimizer section (create() takes the top-level key: was a TypeError)",
        BASE,
        ["optimizer.weight_decay=0.01"],
        ["key 'optimizer.weight_decay'", "the recipe's top-level key weight_decay", "move it there"],
    ),
    (
        "fractional holdout count",
        BASE.replace("image_size", "holdout: 2.5, image_size"),
        [],
        ["data.holdout", "whole count"],
    ),
]


@pytest.mark.parametrize("what,text,sets,words", BAD, ids=[b[0] for b in BAD])
def test_bad_recipe_is_one_sentence_exit_2_nothing_written(tmp_path, capsys, what, text, sets, words):
    path = write_recipe(tmp_path / "bad.yaml", text.replace("DATA", str(tmp_path / "data")))
    out = tmp_path / "results"
    args = [a for s in sets for a in ("--set", s)]
    assert main(["run", str(path), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench: error: ") and str(path) in err
    for word in words:
        assert word in err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_set_without_its_equals_sign_is_one_sentence_from_python_too(tmp_path):
    """The command line refuses `--set schedule.decay` in argparse (tests/test_cli.py); api and sweep callers reach
    recipe.load, which says the same."""
    path = write_recipe(tmp_path / "r.yaml", BASE.replace("DATA", str(tmp_path)))
    with pytest.raises(UserError, match=r"--set 'schedule.decay': expected KEY.PATH=VALUE, e.g. --set optimizer.lr="):
        recipe.load(path, ["schedule.decay"], models=False)


def test_missing_recipe_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "no such recipe file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "layout,words",
    [
        ("missing", ["does not exist"]),
        ("no val", ["missing split folder 'val/'"]),
        ("empty class", ["empty class folder"]),
        ("different classes", ["classes differ from train/"]),
    ],
)
def test_bad_dataset_is_exit_2_and_nothing_written(tmp_path, capsys, layout, words):
    data = tmp_path / "data"
    if layout != "missing":
        (data / "train" / "n1").mkdir(parents=True)
        (data / "train" / "n1" / "a.JPEG").write_bytes(b"x")
    if layout in ("empty class", "different classes"):
        (data / "val" / ("n1" if layout == "empty class" else "n2")).mkdir(parents=True)
    path = write_recipe(tmp_path / "r.yaml", BASE.replace("DATA", str(data)))
    out = tmp_path / "results"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words) and "Traceback" not in err
    assert not out.exists()


def test_user_error_is_a_value_error():
    with pytest.raises(ValueError):
        raise UserError("x")


def test_a_saved_recipe_is_compared_under_todays_schema(tmp_path):
    """A run saved before a key existed (here adaptive_batch) matches; any real difference does not."""
    r = recipe.load(write_recipe(tmp_path / "r.yaml", BASE))
    saved = yaml.safe_load(r.to_yaml())
    del saved["adaptive_batch"]
    assert r.same_as(yaml.safe_dump(saved))
    saved["engine"]["dead_params"] = "refuse"  # a check before training: the run it refused never started
    assert r.same_as(yaml.safe_dump(saved))
    saved["optimizer"]["lr"] = 0.2
    assert not r.same_as(yaml.safe_dump(saved))
    assert not r.same_as("not: [a recipe")


HOSTILE = [
    # (what, recipe text or bytes, words the message must contain)
    ("duplicate key", BASE + "epochs: 2\n", ["key 'epochs' appears twice, at lines 7 and 9"]),
    (
        "alias bomb",
        "l0: &l0 [x]\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 12)}]\n" for i in range(1, 10)) + BASE,
        ["more than 100 uses of YAML aliases"],
    ),  # 12^9 items if expanded
    ("not UTF-8", BASE.encode() + b"# caf\xe9\n", ["not UTF-8 text"]),
    ("infinite epochs", BASE.replace("epochs: 1", "epochs: .inf"), ["key 'epochs'", "finite"]),
    ("infinite warm-up", BASE + "schedule: {warmup_epochs: .inf}\n", ["schedule.warmup_epochs", "finite"]),
    ("infinite lr", BASE.replace("lr: 0.1", "lr: .inf"), ["optimizer.lr", "finite"]),
    ("overflowing lr", BASE.replace("lr: 0.1", "lr: 1e999"), ["optimizer.lr", "finite"]),
    ("negative seed", BASE + "seed: -1\n", ["key 'seed'", "greater than or equal to 0"]),
    ("seed above 2^32", BASE + "seed: 4294967296\n", ["key 'seed'", "less than or equal to 4294967295"]),
    ("warm-up longer than training", BASE + "schedule: {warmup_epochs: 2}\n", ["warmup_epochs 2 is longer"]),
    (
        "unknown model kwarg",
        BASE.replace("{name: resnet10t}", "{name: resnet10t, kwargs: {depthh: 3}}"),
        ["model.kwargs", "resnet10t", "depthh"],
    ),
    (
        "misspelt model name",
        BASE.replace("{name: resnet10t}", "{name: no_such_model_xyz}"),
        ["key 'model.name': unknown timm model 'no_such_model_xyz'"],
    ),
]


@pytest.mark.parametrize("what,text,words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_recipes_validate_and_run_alike_one_sentence_exit_2_nothing_written(
    tmp_path, capsys, what, text, words
):
    path = tmp_path / "hostile.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.replace("DATA", str(tmp_path / "data")).encode())
    out = tmp_path / "results"
    for command in (["validate", str(path)], ["run", str(path), "--out", str(out)]):  # validate: no --models needed
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bench: error: {path}") and err.count("\n") == 1 and len(err) < 1100, err
        assert all(w in err for w in words), err
    assert not out.exists()


def test_a_folder_as_the_recipe_is_one_sentence(tmp_path, capsys):
    for command in ("validate", "run"):
        assert main([command, str(tmp_path)]) == 2
        assert f"{tmp_path}: a folder, not a recipe file" in capsys.readouterr().err


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """No network and empty weight caches (Hugging Face and torch hub) in a temporary folder."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "hf"


def test_pretrained_weights_offline_are_one_sentence_saying_where_to_put_them(tmp_path, capsys, offline_hub):
    path = write_recipe(
        tmp_path / "pre.yaml", BASE.replace("{name: resnet10t}", "{name: resnet10t, kwargs: {pretrained: true}}")
    )
    out = tmp_path / "results"
    for command in (["validate", str(path)], ["run", str(path), "--out", str(out)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not cached here" in err and str(offline_hub) in err, err
        assert "timm/resnet10t.c3_in1k" in err
    assert not out.exists()
    # the same weights in the cache: accepted, nothing fetched
    snapshot = offline_hub / "models--timm--resnet10t.c3_in1k" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(b"weights")
    (offline_hub / "models--timm--resnet10t.c3_in1k" / "refs").mkdir()
    (offline_hub / "models--timm--resnet10t.c3_in1k" / "refs" / "main").write_text("0123abc")
    assert main(["validate", "--schema-only", str(path)]) == 0, capsys.readouterr().err


def test_every_listed_key_can_be_set_from_the_command_line():
    """Every key `bench recipe keys` lists is a --set key, those under sections that may be null included."""
    listed = [key for key, *_ in recipe.keys()]
    assert "logging.wandb.project" in listed and "adaptive_batch.min_batch" in listed
    for key in listed:
        recipe.apply_sets({"logging": {"wandb": None}, "adaptive_batch": None}, [f"{key}=1"])
    r = recipe.load(RECIPES / "demo-sgd.yaml", ["logging.wandb.project=x", "logging.wandb.mode=offline"])
    assert r.logging.wandb.project == "x"
    with pytest.raises(UserError, match=r"'epoch' is not a recipe key \(did you mean 'epochs'\?\)"):
        recipe.load(RECIPES / "demo-sgd.yaml", ["epoch=2"])
    with pytest.raises(UserError, match=r"did you mean 'adaptive_batch.min_batch'"):
        recipe.load(RECIPES / "demo-sgd.yaml", ["adaptive_batch.min_bach=2"])


def test_a_long_wrong_value_is_shown_by_its_type_and_a_short_start(tmp_path):
    big = "[" + ", ".join(["[" + ", ".join(["x"] * 40) + "]"] * 40) + "]"
    path = write_recipe(tmp_path / "r.yaml", BASE.replace("global_batch: 64", f"global_batch: {big}"))
    with pytest.raises(UserError) as caught:
        recipe.load(path)
    message = str(caught.value)
    assert "key 'global_batch': input should be a valid integer (got a list starting [['x', 'x'" in message
    assert len(message) < 250 and message.endswith("...)")


@pytest.mark.parametrize(
    "name,sets,want",
    [
        ("mnist-lars", ["optimizer.name=vrgd_lars"], "mnist-lars+optimizer.name=vrgd_lars"),
        ("mnist-lars", ["optimizer.name=sgd", "optimizer.lr=0.5"], "mnist-lars"),  # the file's own optimizer
        (
            "mnist-lars",
            ["global_batch=128", "model.name=hf-hub:timm/resnet18.a1_in1k", "epochs=2"],
            "mnist-lars+global_batch=128+model.name=hf-hub_timm_resnet18.a1_in1k",
        ),
        ("mnist-lars-seed1", ["seed=6"], "mnist-lars-seed6"),
        ("mnist-lars-seed1", ["seed=1"], "mnist-lars-seed1"),
        ("mnist-lars", ["seed=6"], "mnist-lars"),  # seeds of one recipe share its name
        ("a-best-seed1+optimizer.name=x", ["seed=2", "optimizer.name=lars"], "a-best-seed2+optimizer.name=lars"),
        ("mnist-lars", ["name=mine", "global_batch=128"], "mine"),  # a name given is kept
        ("mnist-lars", ['optimizer={"name": "lion", "lr": 0.001}'], "mnist-lars+optimizer.name=lion"),  # a section
        ("mnist-lars", ['optimizer={"name": "sgd", "lr": 0.5}'], "mnist-lars"),
    ],
)
def test_a_set_that_changes_what_is_compared_names_the_run_after_what_ran(tmp_path, tiny_dataset, name, sets, want):
    path = write_recipe(tmp_path / "r.yaml", f"name: {name}\nseed: 1\n" + BASE.replace("DATA", str(tiny_dataset)))
    notes = []
    r = recipe.load(path, sets, models=False, notes=notes)
    assert r.name == want
    assert notes == (
        [] if want in (name, "mine") else [f"run name {want!r}: {path}'s name {name!r} with what --set changed"]
    )


def test_runs_made_with_set_are_filed_under_what_ran(tmp_path, tiny_dataset, capsys):
    """A --set optimizer.name run gets its own folder and report row; its resolved recipe.yaml run again with
    --set seed=6 is not filed under the first run's -seed1 name."""
    out = tmp_path / "results"
    path = write_recipe(
        tmp_path / "tiny-seed1.yaml",
        "seed: 1\n"
        + BASE.replace("DATA", str(tiny_dataset))
        .replace("global_batch: 64", "global_batch: 80")
        .replace("micro_batch: 16", "micro_batch: 40"),
    )
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--set", "optimizer.name=lars"]) == 0
    said = capsys.readouterr()
    [first] = (out / "tiny-seed1+optimizer.name=lars").iterdir()
    assert f"run directory: {first}" in said.out and "run name" not in said.err  # the directory names the run
    # a refused --set run is one line: its error, no notice before it
    assert main(["run", str(path), "--out", str(out), "--set", "optimizer.name=lars", "--set", "epochs=-1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["run", str(first / "recipe.yaml"), "--out", str(out), "--no-progress", "--set", "seed=6"]) == 0
    [again] = (out / "tiny-seed6+optimizer.name=lars").iterdir()
    assert recipe.load(again / "recipe.yaml").seed == 6
    assert sorted(p.name for p in out.iterdir()) == ["tiny-seed1+optimizer.name=lars", "tiny-seed6+optimizer.name=lars"]


def test_validate_refuses_what_run_refuses_and_names_what_it_did_not_check(tmp_path, tiny_dataset, capsys):
    """An unknown model (run's sentence, with its closest names), an empty class folder, a VRGD plan of one
    gradient group: exit 2 from validate as from run. Without --models the ok line says the dead-parameter probe
    did not run; with micro_batch auto, that the group count is checked at run time."""
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    path = write_recipe(tmp_path / "r.yaml", BASE.replace("DATA", str(data)))

    def validate(*args):
        code = main(["validate", str(path), *args])
        return code, capsys.readouterr()

    code, said = validate()
    assert code == 0 and said.out.strip().endswith("; not checked: the dead-parameter probe (--models runs it)")
    for flags in ([], ["--models"]):
        code, said = validate("--set", "model.name=resnet18x", *flags)
        assert code == 2 and said.err.strip() == (
            f"bench: error: {path} with --set model.name=resnet18x: key 'model.name': unknown timm model "
            "'resnet18x'; did you mean resnet18, resnet18d, skresnet18?"
        )
    code, said = validate("--set", "model.name=resnet20")  # bench's small-image model before timm's resnet200
    assert code == 2 and said.err.strip().endswith("did you mean resnet20_cifar, resnet200, resnet200d?")
    code, said = validate("--models")
    assert code == 0 and said.out.strip() == (
        f"{path}: ok (r: resnet10t, sgd, global_batch 64, loader {resolve_loader('auto')} here, dead parameters 55.9% (2,752,512 of 4,924,540) at 32 px)"
    )  # nothing skipped

    code, said = validate("--models", "--set", "optimizer.name=vrgd_sgd", "--set", "micro_batch=64")
    assert (
        code == 2
        and f"{path}: optimizer 'vrgd_sgd' needs at least 2 gradient groups per step and the plan has 1" in said.err
    )
    code, said = validate("--models", "--set", "optimizer.name=vrgd_sgd", "--set", "micro_batch=auto")
    assert code == 0 and said.out.strip().endswith(
        "; not checked: the gradient groups of micro_batch auto (checked at run time)"
    )
    code, said = validate(
        "--models", "--set", "optimizer.name=vrgd_sgd", "--set", "micro_batch=auto", "--set", "gsnr_groups=1"
    )  # known without the device
    assert code == 2 and "needs at least 2 gradient groups" in said.err

    for image in (data / "train" / sorted(p.name for p in (data / "train").iterdir())[2]).iterdir():
        image.unlink()
    empty = sorted((data / "train").iterdir())[2]
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out")]):
        assert main(command) == 2, command
        assert capsys.readouterr().err.strip().endswith(f"{empty}: empty class folder (no .JPEG/.jpg/.png files)")
    assert not (tmp_path / "out").exists()
