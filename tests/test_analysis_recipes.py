"""The paper recipes: valid, in the paper's setting as the analysis defines it, and every number sourced."""

import re
from pathlib import Path

import pytest
import yaml

from bench import recipe
from bench.analysis import paper

PAPER = Path(__file__).resolve().parents[1] / "recipes" / "paper"
SIZES = {"imagenet": {"train_size": paper.IMAGENET_TRAIN, "val_size": paper.IMAGENET_VAL},
         "cifar10": {"train_size": paper.CIFAR10_TRAIN, "val_size": paper.CIFAR10_VAL}}
NUMBER = re.compile(r"^\s*[a-z_0-9]+:\s*(\[[-0-9., e]+\]|[-0-9.e]+)\s*(#.*)?$")
SELF_EVIDENT = ("global_batch:", "seed:")


def recipes(folder):
    return sorted((PAPER / folder).glob("*.yaml"))


def test_the_paper_grids_are_complete():
    assert {p.stem for p in recipes("imagenet")} == {
        f"{o}-{b}" for o in ("lars", "vrgd_lars") for b in ("2k", "4k", "8k", "16k", "32k", "64k", "96k")}
    optimizers = ("sgd", "vrgd_sgd", "adamw", "vrgd_adam", "lamb", "vrgd_lamb", "lars", "vrgd_lars")
    assert {p.stem for p in recipes("cifar10")} == {
        f"{o}-{b}" for o in optimizers for b in ("256", "512", "1k", "2k", "4k", "8k")}


@pytest.mark.parametrize("folder", ["imagenet", "cifar10"])
def test_paper_recipes_load_and_are_the_papers_setting(folder):
    for path in recipes(folder):
        r = recipe.load(path)
        resolved = yaml.safe_load(r.to_yaml())
        assert paper.paper_setting(resolved, SIZES[folder]) == folder, path
        assert r.name == f"{folder}-{path.stem}"


def test_every_number_in_a_paper_recipe_names_its_source():
    for path in recipes("imagenet") + recipes("cifar10"):
        for line in path.read_text().splitlines():
            if NUMBER.match(line) and not line.startswith(SELF_EVIDENT):
                assert "#" in line, f"{path.name}: {line}"
