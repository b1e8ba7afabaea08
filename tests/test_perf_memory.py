"""`bench perf memory --fits RECIPE`: the largest micro-batch of a recipe that fits this machine."""

import pytest

from bench.cli import main
from tests.conftest import write_recipe

RECIPE = """
model: {name: resnet8_cifar, bn_batch: 4}  # bench's own: the process per micro-batch tried imports no timm
data: {dataset: synthetic, image_size: 24}
global_batch: 8
micro_batch: 8
optimizer: {name: lars, lr: 0.1}
epochs: 1
target_top1: 50
"""


@pytest.mark.slow  # a fresh process per micro-batch tried
def test_fits_doubles_from_the_bn_batch_to_the_batch_and_stops_at_the_first_that_does_not_fit(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "fits.yaml", RECIPE)
    assert main(["perf", "memory", "--fits", str(recipe), "--classes", "10"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [(r[0], r[-1]) for r in rows] == [("4", "yes"), ("8", "yes")]
    assert all(float(r[1].replace(",", "")) > 0 for r in rows)
    assert "largest micro-batch that fits: 8 (the recipe's global batch per rank" in out
    assert "the recipe's micro_batch 8 fits" in out
    # a budget no step can meet: the first micro-batch already fails, and the search stops there
    assert main(["perf", "memory", "--fits", str(recipe), "--classes", "10", "--headroom", "1e-9"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[-1] for line in out.splitlines() if line.strip()[:1].isdigit()] == ["no"]
    assert "no micro-batch fits: 4 already exceeds the budget" in out


def test_a_headroom_outside_0_1_is_one_sentence_and_exit_2(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "fits.yaml", RECIPE)
    assert main(["perf", "memory", "--fits", str(recipe), "--headroom", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bench: bench perf memory --headroom 1.5: a share of memory, in (0, 1]"] or (
        len(err) == 1 and "--headroom 1.5" in err[0]
    )
