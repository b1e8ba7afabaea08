"""The paper recipes: valid, in the paper's setting as the analysis defines it, and every number sourced."""

import fcntl
import json
import re
from pathlib import Path

import pytest
import yaml

from bench import recipe
from bench.analysis import paper

PAPER = Path(__file__).resolve().parents[1] / "recipes" / "paper"
SIZES = {name: {"train_size": s.train_size, "val_size": s.val_size} for name, s in paper.SETTINGS.items()}
NUMBER = re.compile(r"^\s*[a-z_0-9]+:\s*(\[[-0-9., e]+\]|[-0-9.e]+)\s*(#.*)?$")
SELF_EVIDENT = ("global_batch:", "seed:")


def recipes(folder):
    return sorted((PAPER / folder).glob("*.yaml"))


def test_the_paper_grids_are_complete():
    assert {p.stem for p in recipes("imagenet")} == {
        f"{o}-{b}" for o in ("lars", "vrgd_lars") for b in ("2k", "4k", "8k", "16k", "32k", "64k", "96k")
    } | {f"{o}-{b}-mlperf" for o in ("lars", "vrgd_lars") for b in ("32k", "64k")}  # MLPerf's poly(2) variants
    optimizers = ("sgd", "vrgd_sgd", "adamw", "vrgd_adam", "lamb", "vrgd_lamb", "lars", "vrgd_lars")
    assert {p.stem for p in recipes("cifar10")} == {
        f"{o}-{b}" for o in optimizers for b in ("256", "512", "1k", "2k", "4k", "8k")
    }


@pytest.mark.parametrize("folder", ["imagenet", "cifar10"])
def test_paper_recipes_load_and_are_the_papers_setting(folder):
    for path in recipes(folder):
        r = recipe.load(path)
        resolved = yaml.safe_load(r.to_yaml())
        assert paper.paper_setting(resolved, SIZES[folder]) == folder, path
        assert r.name == f"{folder}-{path.stem}"


def test_cifar10_recipes_follow_table_5s_protocol():
    """Section 7.1: warm-up, label smoothing, cosine to 0 ("the same as ImageNet training"); He et al.'s ResNet-56 at
    32 px with CIFAR's pad-and-crop augmentation; the open choices say OPEN where they are made."""
    for path in recipes("cifar10"):
        r = recipe.load(path)
        assert r.schedule.decay == "cosine" and r.schedule.end_lr == 0 and r.schedule.warmup_epochs > 0, path
        assert r.label_smoothing > 0 and r.model.name == "resnet56_cifar" and not r.model.kwargs
        assert (r.data.image_size, r.data.augment, r.data.pad, r.data.random_flip) == (32, "pad_crop", 4, True)
        text = path.read_text()
        epochs = next(line for line in text.splitlines() if line.startswith("epochs:"))
        assert "milestones" not in text and "OPEN" in epochs


def test_every_number_in_a_paper_recipe_names_its_source():
    for path in recipes("imagenet") + recipes("cifar10"):
        for line in path.read_text().splitlines():
            if NUMBER.match(line) and not line.startswith(SELF_EVIDENT):
                assert "#" in line, f"{path.name}: {line}"


WIDTH_DEPTH = Path(__file__).resolve().parents[1] / "recipes" / "studies" / "width-depth"


def test_width_depth_pairs_differ_only_in_the_model():
    loaded = {p.stem: yaml.safe_load(recipe.load(p).to_yaml()) for p in sorted(WIDTH_DEPTH.glob("*.yaml"))}
    batches = (128, 256, 512, 1024, 2000)
    assert set(loaded) == {f"{m}-b{b}" for m in ("wide", "deep") for b in batches}
    for b in batches:
        wide, deep = loaded[f"wide-b{b}"], loaded[f"deep-b{b}"]
        assert wide["global_batch"] == b and wide["optimizer"]["lr"] == pytest.approx(5 * (b / 512) ** 0.5, abs=1e-3)
        assert {k: v for k, v in wide.items() if k not in ("name", "model")} == {
            k: v for k, v in deep.items() if k not in ("name", "model")
        }
    assert {r["model"]["name"] for r in loaded.values()} == {"resnet18"}
    assert len({json.dumps(r["model"], sort_keys=True) for r in loaded.values()}) == 2


def test_width_depth_models_have_about_equal_parameter_counts():
    import timm

    counts = {}
    for kind in ("wide", "deep"):
        model = recipe.load(WIDTH_DEPTH / f"{kind}-b512.yaml").model
        net = timm.create_model(model.name, num_classes=10, **model.kwargs)
        counts[kind] = sum(p.numel() for p in net.parameters())
    assert counts == {"wide": 2_339_346, "deep": 2_339_346}  # the numbers the recipes' header states


def test_width_depth_runs_make_one_problem_with_two_models(tmp_path):
    """Run directories holding these recipes (fabricated results) give the steps-to-target-by-model data."""
    from bench.analysis import plots, results

    locks = []  # runs in progress: a live process (this one) holds each run's lock
    for path in sorted(WIDTH_DEPTH.glob("*.yaml")):
        r = recipe.load(path)
        run = tmp_path / r.name / "run"
        run.mkdir(parents=True)
        (run / "recipe.yaml").write_text(r.to_yaml())
        plan = {"global_batch": r.global_batch, "micro_batch": 16, "gsnr_groups": r.global_batch // 16}
        (run / "meta.json").write_text(
            json.dumps({"status": "running", "plan": plan, "train_size": 2000, "val_size": 500})
        )
        locks.append(open(run / ".lock", "w"))
        fcntl.flock(locks[-1], fcntl.LOCK_EX)
    [data] = plots.by_model(results.load_study([tmp_path])).values()
    for lock in locks:
        lock.close()
    assert sorted(set(data["line"])) == [
        "deep: resnet18 4x4x4x4 ch20-40-80-160",
        "wide: resnet18 1x1x1x1 ch44-88-176-352",
    ]
    assert sorted(data["global_batch"]) == sorted([128, 256, 512, 1024, 2000] * 2)
    assert data["steps_to_target"].isna().all()  # running, no evaluation yet: not (yet) a miss
