"""`bench perf train`: the runner's step against a bare loop, the split of a step, the FLOPs count, and the
documented GPU command run on the CPU."""

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.engine.distributed import Dist
from bench.perf import train as perf_train
from bench.rundir import event_lines
from tests.conftest import write_recipe

TINY = """
name: tiny-perf
model: {name: resnet10t}
data: {dataset: folder, path: %s, image_size: 32, workers: 1}
global_batch: 8
micro_batch: 4
optimizer: {name: lars, lr: 0.5}
epochs: 1
target_top1: 50
"""


@pytest.fixture
def tiny_recipe(tiny_dataset, tmp_path):
    return write_recipe(tmp_path / "tiny.yaml", TINY % tiny_dataset)


def test_perf_train_prints_every_case_its_split_and_the_overhead(tiny_recipe, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its own: another xdist worker's scratch is not its
    scratch = set(Path(tempfile.gettempdir()).glob("bench-perf-train-*"))
    assert (
        perf_train.main([str(tiny_recipe), "--device", "cpu", "--warmup", "1", "--steps", "2", "--repeats", "2"]) == 0
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("bench perf train: resnet10t at 32 px, global batch 8 = 2 x 4, fp32, optimizer lars")
    header = next(line for line in lines if line.startswith("case"))
    assert header.split()[1:] == [
        "img/s",
        "x",
        "bare",
        "step",
        "ms",
        "data",
        "fwd+bwd",
        "optim",
        "other",
        "peak",
        "GiB",
    ]
    rows = {line[:44].strip(): line[44:].split() for line in lines if line.startswith(("bare loop", "bench runner"))}
    assert set(rows) == {
        "bare loop (torch SGD, random tensors)",
        "bench runner, random loader",
        f"bench runner, {'dali' if perf_train_dali() else 'torchvision'} loader",
    }
    for name, cells in rows.items():
        rate, ratio, step, data, fwd_bwd, opt, other = map(float, cells)
        assert rate > 0 and fwd_bwd > 0 and opt > 0 and data >= 0 and other >= 0
        assert step == pytest.approx(data + fwd_bwd + opt + other, abs=0.25)  # the split adds up (printed to 0.1)
    assert rows["bare loop (torch SGD, random tensors)"][1] == "1.000"
    assert float(rows["bare loop (torch SGD, random tensors)"][6]) == 0.0  # the bare loop has no runner around it
    overhead = next(line for line in lines if line.startswith("runner overhead"))
    # 2 repeats: the lowest to the highest, said to be a range, and no PASS or MISS read off it
    assert "median over 2 paired repeats; range (too few repeats for an interval)" in overhead
    assert "95% interval" not in overhead and "PASS" not in overhead and "MISS" not in overhead
    assert overhead.endswith("no verdict from 2 repeats (--repeats 6 or more give an interval)")
    assert "GFLOP per training image" in out and "step ms and its split" in out
    assert set(Path(tempfile.gettempdir()).glob("bench-perf-train-*")) == scratch  # the scratch run dirs are gone


def test_ghost_batchnorm_paths_run_side_by_side_and_the_ratio_is_printed(tiny_recipe, capsys):
    """--bn-batch: the recipe's path (ghost BN in the micro-batch), micro-batches of bn_batch, and the other group
    pass, alternating in one run (CPU seconds: --clock cpu), and the ratio over micro-batches of bn_batch."""
    args = [str(tiny_recipe), "--device", "cpu", "--bn-batch", "2", "--set", "optimizer.name=adascale_sgd"]
    args += ["--set", "data.loader=random", "--clock", "cpu", "--warmup", "1", "--steps", "1", "--repeats", "2"]
    assert perf_train.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("img/s per CPU second (--clock cpu)")
    rows = {
        line[:44].strip(): float(line[44:].split()[0]) for line in lines if line.startswith(("bare loop", "bench, "))
    }
    assert set(rows) == {
        "bare loop, ghost BN 2 in 4 (torch SGD)",
        "bare loop, torch's BatchNorm over 4",
        "bench, ghost BN 2 in 4, groups 1 by 1",  # auto on a CPU
        "bench, micro-batches of 2",
        "bench, ghost BN 2 in 4, vmap groups",
    }
    assert all(rate > 0 for rate in rows.values())
    ratio = next(line for line in lines if line.startswith("ghost BatchNorm: bench, ghost BN 2 in 4, groups 1 by 1"))
    assert "against micro-batches of 2:" in ratio and "median of 2 paired repeats" in ratio
    assert "x the other group pass's" in ratio
    cost = next(line for line in lines if line.startswith("ghost BatchNorm's cost, bare loop: ghost BN 2 in 4 takes"))
    assert "x the time of torch's BatchNorm over 4 (range (too few repeats for an interval)" in cost
    assert cost.endswith("goal <= 1.2 x: no verdict from 2 repeats (--repeats 6 or more give an interval)")


def test_ghost_batchnorms_cost_is_the_bare_loops_time_ratio_judged_at_its_goal():
    """The cost is torch's BatchNorm's img/s over ghost BatchNorm's, paired within each repeat (a time ratio),
    judged against GHOST_TARGET by the same sign-test interval as the runner overhead."""
    plain = [120.0] * 8
    trainer = type("T", (), {"recipe": type("R", (), {"model": type("M", (), {"bn_batch": 8})})(), "plan": None})()
    trainer.plan = type("P", (), {"micro_batch": 64, "groups_per_micro": 1})()
    trainer.opt = type("O", (), {"reduces_gradients": False})()
    rates = {"bare": [100.0] * 8, "bare_bn": plain, "bench": [99.0] * 8, "sequential": [90.0] * 8}
    line = perf_train.ghost_ratio(rates, trainer).splitlines()[-1]
    assert "takes 1.20 x the time of torch's BatchNorm over 64 (95% interval 1.20 to 1.20)" in line
    assert line.endswith("goal <= 1.2 x: MISS")  # not under the goal
    rates["bare"] = [110.0 + i for i in range(8)]  # 1.09 .. 1.00 x
    assert perf_train.ghost_ratio(rates, trainer).endswith("goal <= 1.2 x: PASS")
    assert perf_train.verdict(1.1, 1.0, 1.3, target=1.2) == "not resolved at this noise: more --repeats"


def test_against_times_the_runner_with_one_key_changed_side_by_side(tiny_recipe, capsys):
    """--against KEY=VALUE: the runner again with that key changed, in the same alternating repeats, and its img/s
    over the recipe's runner; a malformed one is one sentence and exit 2."""
    args = [str(tiny_recipe), "--device", "cpu", "--set", "data.loader=random", "--clock", "cpu", "--warmup", "1"]
    args += ["--steps", "1", "--repeats", "2", "--against", "engine.channels_last=true", "--against", "micro_batch=8"]
    assert perf_train.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line[:44].strip(): float(line[44:].split()[0]) for line in lines if line.startswith("bench, ")}
    assert set(rows) == {"bench, engine.channels_last=true", "bench, micro_batch=8"}
    assert all(rate > 0 for rate in rows.values())
    for override in ("engine.channels_last=true", "micro_batch=8"):
        line = next(line for line in lines if line.startswith(f"against the recipe, {override}: "))
        assert line.endswith(")") and "x its img/s (median of 2 paired repeats; range (too few repeats" in line
    from bench.cli import main

    bad = {
        "engine.channels_last": "expected KEY.PATH=VALUE, e.g. engine.compile=true",
        "global_batch=16": "every case counts the recipe's batch in its img/s; give --batch for another batch",
        "engine.nosuch=1": f"{tiny_recipe}: 'engine.nosuch' is not a recipe key; `bench recipe keys` lists them",
    }
    for override, words in bad.items():
        assert main(["perf", "train", *args[:-2], "--against", override]) == 2
        assert capsys.readouterr().err == f"bench: error: bench perf train --against {override!r}: {words}\n"


def test_an_against_case_is_the_recipe_with_that_key_changed(tiny_recipe):
    flags = dict.fromkeys(("model", "image_size", "batch", "micro_batch", "precision", "channels_last"))
    args = SimpleNamespace(recipe=str(tiny_recipe), set=[], compile=None, bn_batch=None, warmup=1, steps=1, repeats=1)
    args.__dict__.update(flags)
    recipe, variant = perf_train._recipe(args), perf_train._recipe(args, "micro_batch=8")
    assert (recipe.micro_batch, variant.micro_batch) == (4, 8)
    assert variant.model_dump(exclude={"micro_batch"}) == recipe.model_dump(exclude={"micro_batch"})


def test_the_against_ratio_pairs_within_repeats_and_gives_an_interval_from_six():
    rates = {"bench": [100.0, 110.0, 90.0, 100.0, 105.0, 95.0], "x=1": [120.0, 132.0, 108.0, 120.0, 126.0, 114.0]}
    assert perf_train.against_ratio(rates, "x=1") == (
        "against the recipe, x=1: 1.20 x its img/s (median of 6 paired repeats; 95% interval 1.20 to 1.20)"
    )  # each repeat's pair is 1.2 however the repeats differ: load falls on both cases alike


def perf_train_dali() -> bool:
    from bench.data import resolve_loader

    return resolve_loader("auto") == "dali"


def test_the_bench_case_is_the_runners_step_and_writes_its_events(tiny_recipe, tmp_path):
    """Each timed bench step is Trainer.train_step: the pace moves, events.jsonl gets one line per step."""
    from bench import recipe as recipes

    case = perf_train.BenchCase(recipes.load(tiny_recipe), Dist(0, 1, 0, torch.device("cpu")), tmp_path)
    case.steps(3)
    assert case.progress.step == 3 and case.progress.images == 24
    events = [json.loads(line) for line in event_lines(case.run.path)]
    assert [e["step"] for e in events] == [0, 1, 2] and "trust_median" in events[0]
    timers = perf_train.Timers(torch.device("cpu"))
    with case.timed(timers):
        case.steps(2)
    assert set(timers.seconds) == {"data", "step", "optimizer"}
    assert timers.seconds["step"] > timers.seconds["optimizer"] + timers.seconds["data"]
    assert "step" not in vars(case.trainer) and "step" not in vars(case.trainer.opt)  # unwrapped again
    case.close()


def test_overhead_pairs_bench_with_bare_within_each_repeat():
    rates = {"bare": [100.0, 200.0, 100.0], "bench": [99.0, 190.0, 101.0]}
    middle, low, high = perf_train.overhead(rates)
    assert (middle, low, high) == pytest.approx((0.01, -0.01, 0.05))  # under 6 pairs: lowest to highest


def test_overhead_interval_is_the_sign_tests_and_the_verdict_reads_it():
    """20 pairs: the 95% sign-test interval of the median is [x_(6), x_(15)] (P(Binom(20, 1/2) <= 5) = 2.07%)."""
    rates = {"bare": [100.0] * 20, "bench": [100.0 - i / 10 for i in range(20)]}  # overheads 0.000 .. 0.019
    middle, low, high = perf_train.overhead(rates)
    assert (middle, low, high) == pytest.approx((0.0095, 0.005, 0.014))
    assert perf_train.verdict(middle, low, high) == "PASS"
    assert perf_train.verdict(0.05, 0.031, 0.07) == "MISS"
    assert perf_train.verdict(0.02, -0.01, 0.05) == "not resolved at this noise: more --repeats"


def test_under_min_pairs_the_overhead_is_a_range_with_no_verdict():
    """The sign test's interval reaches 95% first at MIN_PAIRS pairs; below it the lowest to the highest pair is
    a range, and a range that lies under the target is no PASS."""
    from scipy.stats import binom

    assert [n for n in range(1, 12) if 2 * binom.pmf(0, n, 0.5) <= 0.05][0] == perf_train.MIN_PAIRS
    assert perf_train.verdict(0.003, -0.01, 0.007, pairs=2).startswith("no verdict from 2 repeats")
    assert perf_train.verdict(0.003, -0.01, 0.007, pairs=perf_train.MIN_PAIRS) == "PASS"


def test_flops_of_resnet50_match_its_published_multiply_adds():
    """ResNet-50 at 224 px: 4.1 G multiply-adds forward = 8.2 GFLOP; backward twice that, less the first
    convolution's input gradient (the image needs none): about 24.5 GFLOP per training image."""
    from bench import recipe as recipes

    recipe = recipes.recipe_from_dict(
        "test",
        {
            "name": "r50",
            "model": {"name": "resnet50"},
            "data": {"dataset": "synthetic", "image_size": 224},
            "global_batch": 8,
            "optimizer": {"name": "sgd", "lr": 0.1},
            "epochs": 1,
            "target_top1": 50,
        },
    )
    flops = perf_train.flops_per_image(recipe, 1000, torch.device("cpu"))
    assert 23.5e9 < flops < 25.0e9


def test_the_documented_gpu_command_runs_on_the_cpu(capsys):
    """README's GPU command (bf16, channels_last, the built-in synthetic recipe), here with --device cpu and a
    small model so it runs in seconds: the same code path but for the device."""
    args = [
        "--device",
        "cpu",
        "--model",
        "resnet10t",
        "--image-size",
        "32",
        "--batch",
        "8",
        "--precision",
        "bf16",
        "--channels-last",
        "--warmup",
        "1",
        "--steps",
        "1",
        "--repeats",
        "1",
    ]
    assert perf_train.main(args) == 0
    out = capsys.readouterr().out
    assert "resnet10t at 32 px, global batch 8 = 1 x 8, bf16, channels_last, optimizer sgd" in out
    assert "runner overhead" in out


@pytest.mark.slow
def test_the_built_in_benchmark_fits_a_small_cpu_machine(capsys):
    """With no recipe and no --batch, the CPU benchmark takes batch 32, not 256 (which a 24 GB machine's kernel
    killed), and says so; here resnet10t at 32 px so it runs in seconds."""
    args = [
        "--device",
        "cpu",
        "--model",
        "resnet10t",
        "--image-size",
        "32",
        "--warmup",
        "1",
        "--steps",
        "1",
        "--repeats",
        "1",
    ]
    assert perf_train.main(args) == 0
    assert "global batch 32 = 1 x 32 (the CPU default; --batch to change)" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_one_sentence(capsys):
    from bench.cli import main

    assert main(["perf", "train", "--device", "cuda"]) == 2
    assert (
        capsys.readouterr().err == "bench: error: bench perf train --device cuda: no CUDA device is visible to torch\n"
    )
