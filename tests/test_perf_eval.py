"""`bench perf eval`: the runner's evaluation pass against the same with one key changed, side by side."""

import pytest

from bench.perf import eval as perf_eval
from tests.conftest import write_recipe

TINY = """
name: tiny-perf-eval
model: {name: resnet8_cifar}
data: {dataset: folder, path: %s, image_size: 16, augment: pad_crop, workers: 1, eval_batch: 8}
global_batch: 8
optimizer: {name: lars, lr: 0.5}
epochs: 1
target_top1: 50
engine: {threads: 1}
"""


@pytest.fixture
def tiny_recipe(tiny_dataset, tmp_path):
    return write_recipe(tmp_path / "tiny.yaml", TINY % tiny_dataset)


def test_perf_eval_times_each_case_and_pairs_the_against_ratio(tiny_recipe, capsys):
    """Each case a row (img/s, Top-1); a larger eval batch or another layout changes speed, not the Top-1 of the
    same weights; each --against's ratio over the recipe is paired over the repeats."""
    args = [str(tiny_recipe), "--repeats", "2", "--against", "data.eval_batch=40"]
    args += ["--against", "engine.channels_last=true", "--threads", "1"]
    assert perf_eval.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("bench perf eval: resnet8_cifar at 16 px, 40 val images a pass in batches of 8, fp32")
    header = next(i for i, line in enumerate(lines) if line.startswith("case"))
    rows = {line.rsplit(maxsplit=2)[0]: line.rsplit(maxsplit=2)[1:] for line in lines[header + 1 : header + 4]}
    assert set(rows) == {"the recipe", "data.eval_batch=40", "engine.channels_last=true"}
    assert all(float(rate) > 0 for rate, _ in rows.values())
    top1 = [float(top1) for _, top1 in rows.values()]
    # the same weights: the same Top-1, up to one of the 40 images (2.5 points) whose logits tie at another kernel
    # path's rounding (AVX2 or AVX-512)
    assert all(0 <= t <= 100 for t in top1) and max(top1) - min(top1) <= 2.5
    for override in ("data.eval_batch=40", "engine.channels_last=true"):
        line = next(line for line in lines if line.startswith(f"against the recipe, {override}: "))
        assert "x its img/s (median of 2 paired repeats; range (too few repeats for an interval)" in line


def test_perf_eval_times_a_fixed_subset_with_images(tiny_recipe, capsys):
    assert perf_eval.main([str(tiny_recipe), "--repeats", "1", "--images", "16"]) == 0
    assert "16 val images a pass in batches of 8" in capsys.readouterr().out.splitlines()[0]


def test_a_bad_against_is_one_sentence_and_exit_2(tiny_recipe, capsys):
    from bench.cli import main

    bad = {
        "data.eval_batch": "expected KEY.PATH=VALUE, e.g. engine.compile=true",
        "data.nosuch=1": f"{tiny_recipe}: 'data.nosuch' is not a recipe key; `bench recipe keys` lists them",
    }
    for override, words in bad.items():
        assert main(["perf", "eval", str(tiny_recipe), "--repeats", "1", "--against", override]) == 2
        assert capsys.readouterr().err == f"bench: error: bench perf eval --against {override!r}: {words}\n"
