"""bench sweep: sweep files, quasi-random trials, the holdout split, the tuning analysis and the verdict."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bench import recipe as recipe_mod
from bench import sweep
from bench.analysis import cells, pairs, results, scaling, tables, tuning, verdict
from bench.analysis.paper import display
from bench.analysis.render import claims_of
from bench.cli import main
from bench.data import build
from bench.errors import UserError
from bench.recipe import DataSpec
from tests.conftest import RECIPES, bench_processes, cli, git, killed_at, write_recipe
from tests.helpers import BASE, SWEEP, make_run, sweep_run


@pytest.fixture
def sweep_file(tmp_path, tiny_dataset):
    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)))
    return write_recipe(tmp_path / "tiny.yaml", SWEEP)


def load(path):
    spec = sweep.load(path)
    return spec, sweep.expand(path, spec)


BAD = [
    ("unknown key", SWEEP + "trails: 3\n", ["unknown key 'trails'"]),
    (
        "empty space",
        SWEEP.replace(
            """    space:
      optimizer.lr: {low: 0.01, high: 0.5, scale: log}
""",
            "    space: {}\n",
        ),
        ["arms.sgd.space is empty"],
    ),
    (
        "empty arms",
        SWEEP.split("arms:")[0] + "arms: {}\ntrials: 2\nbudget: {epochs: 2}\nreruns: {seeds: [1]}\n",
        ["arms"],
    ),
    ("low above high", SWEEP.replace("{low: 0.01, high: 0.5", "{low: 0.5, high: 0.01"), ["low 0.5 is above high 0.01"]),
    ("log through 0", SWEEP.replace("{low: 0.01, high: 0.5", "{low: 0.0, high: 0.5"), ["log range needs low > 0"]),
    ("empty value list", SWEEP.replace("{low: 0.0, high: 1.0}", "{values: []}"), ["non-empty list of values"]),
    ("neither range nor values", SWEEP.replace("{low: 0.0, high: 1.0}", "{scale: log}"), ["give low and high"]),
    ("two budgets", SWEEP.replace("budget: {epochs: 2}", "budget: {epochs: 2, steps: 10}"), ["exactly one of"]),
    ("no trials", SWEEP.replace("trials: 2\n", ""), ["trials: required"]),
    (
        "a budget by batch missing a batch",
        SWEEP.replace("budget: {epochs: 2}", "budget: {64: {epochs: 2}}"),
        ["one for each of the batches", "none for 32", "64 is not in batches"],
    ),
    ("grid with a range", SWEEP + "search: grid\n", ["a grid needs a list of values"]),
    ("at_batch of no swept batch", SWEEP + "at_batch: {16: {micro_batch: 16}}\n", ["at_batch: 16 is not in batches"]),
    ("rerun seed = trial seed", SWEEP.replace("seeds: [1, 2]", "seeds: [0, 1]"), ["0 is the trials' seed"]),
    ("missing base", SWEEP.replace("base: base.yaml", "base: nowhere.yaml"), ["key 'base'", "nowhere.yaml"]),
    ("arm name with a slash", SWEEP.replace("  lars:\n", "  ../lars:\n"), ["must be one folder name"]),
    ("sweep name outside --out", "name: ../x\n" + SWEEP, ["must be one folder name"]),
    (
        "bad key in an arm",
        SWEEP.replace("optimizer.name: lars}", "optimizer.name: lars, optimizer.etaa: 1}"),
        ["key 'arms.lars.set'", "key 'optimizer.etaa': unknown hyperparameter"],
    ),
    (
        "misspelt optimizer in an arm",  # the arm's set, not the base recipe
        SWEEP.replace("optimizer.name: lars}", "optimizer.name: lras}"),
        ["key 'arms.lars.set': unknown optimizer 'lras' (did you mean 'lars'?)"],
    ),
    (
        "range outside the key's domain",  # refused as declared, not where a draw happens to fall
        SWEEP.replace("optimizer.lr: {low: 0.01, high: 0.5, scale: log}", "optimizer.lr: {low: -0.001, high: 0.01}"),
        ["key 'arms.sgd.space.optimizer.lr': low -0.001 is outside what the key allows", "a number in (0, inf)"],
    ),
    (
        "list value outside the key's domain",
        SWEEP.replace("{low: 0.0, high: 1.0}", "{values: [0.5, -1]}"),
        ["key 'arms.lars.space.schedule.warmup_epochs': value -1 is outside"],
    ),
    ("primary naming no arm", SWEEP + "primary: {reference: adamw}\n", ["primary.reference: 'adamw' is not an arm"]),
    ("primary with both", SWEEP + "primary: {reference: lars, pairs: [[sgd, lars]]}\n", ["give one of reference"]),
    (
        "control batch not swept",
        SWEEP + "primary: {reference: lars, control: [96]}\n",
        ["primary.control: 96 is not in batches"],
    ),
    ("holdout selection without a holdout", SWEEP + "set: {data.holdout: 0}\n", ["select.split", "holdout"]),
    (
        "steps selected on the holdout",
        SWEEP + "select: {split: holdout, metric: steps_to_target}\n",
        ["steps_to_target is read from the validation curve", "select.split: validation"],
    ),
]


@pytest.mark.parametrize("what,text,words", BAD, ids=[b[0] for b in BAD])
def test_bad_sweep_files_are_one_sentence_and_exit_2_with_nothing_written(
    sweep_file, tmp_path, capsys, what, text, words
):
    sweep_file.write_text(text)
    out = tmp_path / "results"
    assert main(["sweep", str(sweep_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench: error: {sweep_file}") and err.count("\n") == 1, err
    assert all(w in err for w in words), err
    assert "--set" not in err  # the sweep file's key is blamed, not a command line the user never typed
    assert not out.exists()


def test_a_folder_or_a_missing_file_is_exit_2(tmp_path, capsys):
    assert main(["sweep", str(tmp_path)]) == 2
    assert main(["sweep", str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err
    assert "a folder, not a sweep file" in err and "no such sweep file" in err


def test_validate_refuses_a_range_outside_its_keys_domain_whatever_the_draws(sweep_file, capsys):
    """{low: -0.001, high: 0.01}: 2 trials draw lrs above 0 (8 would draw one below): the range itself is refused."""
    sweep_file.write_text(SWEEP.replace("{low: 0.01, high: 0.5, scale: log}", "{low: -0.001, high: 0.01}"))
    spec = sweep.load(sweep_file)
    assert all(point["optimizer.lr"] > 0 for point in sweep.points(spec, spec.arms["sgd"], 0))
    assert main(["validate", str(sweep_file)]) == 2
    assert "key 'arms.sgd.space.optimizer.lr': low -0.001 is outside" in capsys.readouterr().err


def test_validate_checks_the_data_the_trials_read(sweep_file, tmp_path, capsys):
    """The base's data is there, but an arm's set moves data.path: validate names the trial and key (it said ok,
    "not checked: the data", and the sweep failed at its first trial)."""
    assert main(["validate", str(sweep_file)]) == 0
    assert "not checked" not in capsys.readouterr().out
    sweep_file.write_text(
        SWEEP.replace("{optimizer.name: lars}", f"{{optimizer.name: lars, data.path: {tmp_path}/nope}}")
    )
    assert main(["validate", str(sweep_file)]) == 2
    err = capsys.readouterr().err
    assert "trial tiny-lars-b32-t00: key 'data.path':" in err and "dataset directory does not exist" in err


def test_the_same_sweep_file_gives_the_same_trials_in_their_ranges(sweep_file):
    _, first = load(sweep_file)
    _, again = load(sweep_file)
    assert [(t.name, t.point, t.recipe) for t in first] == [(t.name, t.point, t.recipe) for t in again]
    lars = [t for t in first if t.arm == "lars"]
    assert all(0.5 <= t.recipe.optimizer.lr <= 5.0 and 0 <= t.recipe.schedule.warmup_epochs <= 1 for t in lars)
    assert len({t.recipe.optimizer.lr for t in lars}) == 2  # two different points
    # the same unit points for every arm: the first coordinate maps to each arm's own log range
    sgd = [t for t in first if t.arm == "sgd"]
    for s, la in zip(sgd, lars):
        u_s = math.log(s.recipe.optimizer.lr / 0.01) / math.log(0.5 / 0.01)
        u_l = math.log(la.recipe.optimizer.lr / 0.5) / math.log(5.0 / 0.5)
        assert u_s == pytest.approx(u_l, abs=1e-5)
    t = lars[0]
    assert t.recipe.tags == {"sweep": "tiny", "arm": "lars", "trial": 0, "study": 0, "role": "trial"}
    assert (t.recipe.seed, t.recipe.global_batch, t.recipe.epochs, t.recipe.optimizer.name) == (0, 32, 2, "lars")
    assert sgd[0].recipe.optimizer.hparams["nesterov"] is True


def test_a_different_seed_or_study_draws_different_points(sweep_file):
    _, base = load(sweep_file)
    sweep_file.write_text(SWEEP + "seed: 1\n")
    _, other = load(sweep_file)
    assert [t.point for t in base] != [t.point for t in other]
    assert sweep.unit_points(2, 4, 0, 0) != sweep.unit_points(2, 4, 0, 1)


def test_expansion_counts_round_robin_studies_and_grid(sweep_file):
    sweep_file.write_text(
        SWEEP.replace("batches: [32]", "batches: [16, 32]").replace("trials: 2", "trials: 3") + "studies: 2\n"
    )
    _, trials = load(sweep_file)
    assert len(trials) == 2 * 2 * 3 * 2  # arms x batches x trials x studies
    assert [t.index for t in trials[:8]] == [0] * 8  # trial 0 of every cell and study first
    assert trials[0].name == "tiny-sgd-b16-t00-s0" and trials[-1].name == "tiny-lars-b32-t02-s1"
    grid = (
        SWEEP.replace("{low: 0.01, high: 0.5, scale: log}", "{values: [0.1, 0.2, 0.3]}")
        .replace("{low: 0.5, high: 5.0, scale: log}", "{values: [1, 2]}")
        .replace("{low: 0.0, high: 1.0}", "{values: [0, 1]}")
    )
    sweep_file.write_text(grid.replace("trials: 2\n", "") + "search: grid\n")
    _, trials = load(sweep_file)
    assert sorted(t.recipe.optimizer.lr for t in trials if t.arm == "sgd") == [0.1, 0.2, 0.3]
    assert len([t for t in trials if t.arm == "lars"]) == 4


def test_a_budget_by_batch_gives_each_batchs_runs_their_own(sweep_file):
    sweep_file.write_text(
        SWEEP.replace("batches: [32]", "batches: [32, 64]").replace(
            "budget: {epochs: 2}", "budget: {32: {epochs: 2}, 64: {steps: 4}}"
        )
    )
    spec, trials = load(sweep_file)
    assert {(t.batch, t.recipe.epochs) for t in trials} == {(32, 2.0), (64, 2.0)}  # 4 steps x 64 of 128 images
    sweep_file.write_text(sweep_file.read_text().replace("64: {steps: 4}", "64: {epochs: 3}"))
    assert {(t.batch, t.recipe.epochs) for t in load(sweep_file)[1]} == {(32, 2.0), (64, 3.0)}


def test_at_batch_sets_keys_at_its_batches_only_and_leaves_the_others_recipes_as_they_were(sweep_file):
    sweep_file.write_text(SWEEP.replace("batches: [32]", "batches: [16, 32]"))
    before = {t.name: t.recipe for t in load(sweep_file)[1]}
    sweep_file.write_text(sweep_file.read_text() + "at_batch: {16: {micro_batch: 8}}\n")
    after = {t.name: t.recipe for t in load(sweep_file)[1]}
    assert before.keys() == after.keys() and any(t.global_batch == 32 for t in after.values())
    for name, recipe in after.items():
        if recipe.global_batch == 16:
            assert recipe.micro_batch == 8 and before[name].micro_batch != 8
        else:
            assert recipe == before[name]


def test_a_budget_in_steps_or_images_becomes_epochs_of_the_training_set_left_after_the_holdout(sweep_file):
    sweep_file.write_text(SWEEP.replace("budget: {epochs: 2}", "budget: {steps: 12}"))
    _, trials = load(sweep_file)
    assert trials[0].recipe.epochs == 12 * 32 / 128
    sweep_file.write_text(SWEEP.replace("budget: {epochs: 2}", "budget: {images: 192}"))
    _, trials = load(sweep_file)
    assert trials[0].recipe.epochs == 1.5
    from bench.engine.pace import Pace
    from bench.engine.plan import recipe_plan
    from bench.sweep import Budget

    budget = Budget(images=3 * 6000)  # 3 epochs of a 6,000-image set: 281.25 steps at 64, 35.16 at 512
    for batch, steps in ((64, 281), (512, 35), (100, 180)):
        epochs = budget.epochs_at(batch, 6000)
        recipe = trials[0].recipe.model_copy(update={"global_batch": batch, "epochs": epochs, "micro_batch": "auto"})
        pace = Pace(recipe, recipe_plan(recipe, 1), 6000, False)
        assert pace.schedule_steps == steps and abs(steps * batch - 18000) <= batch / 2
    sweep_file.write_text(SWEEP.replace("budget: {epochs: 2}", "budget: {images: 64}"))  # 0.5 epochs: too short
    with pytest.raises(UserError, match="warmup_epochs': high 1 is outside .* 1 is longer than training"):  # its range
        load(sweep_file)


def test_the_holdout_is_never_trained_on_and_the_same_for_every_seed(tiny_dataset):
    spec = DataSpec(dataset="folder", path=tiny_dataset, image_size=16, workers=0, holdout=0.2)
    data = [build(spec, 32, 16, 0, 1, seed, device="cpu") for seed in (0, 5)]
    held = set(data[0].layout.holdout.files)
    assert len(held) == 32 and held == set(data[1].layout.holdout.files)
    assert data[0].train_size == 128 and not held & set(data[0].layout.train.files)
    for d in data:  # every image the sampler hands to training over 3 epochs is a training image
        train_files = d.layout.train.files
        seen = {
            train_files[i] for step in range(3 * 4) for m in range(2) for i, _ in d.stream.micro_batch_samples(step, m)
        }
        assert seen == set(train_files)
        assert not {train_files[i] for i in d.train_eval_indices} & held
    with pytest.raises(UserError, match="holds out 160 of the 160"):
        build(DataSpec(dataset="folder", path=tiny_dataset, holdout=160), 32, 16, 0, 1, 0, device="cpu")


# ---- the analysis on hand-made run directories -------------------------------------------------------------


def test_steps_to_result_is_the_fewest_over_trials_and_the_median_over_studies(tmp_path):
    # steps per epoch = 1000 / 100 = 10; target 60 reached at evaluation 3, 2, never (study 0) and 1 (study 1)
    sweep_run(tmp_path, "lars", 100, "trial", 0, [50, 55, 61], trial=0)
    sweep_run(tmp_path, "lars", 100, "trial", 0, [50, 62, 63], trial=1)
    sweep_run(tmp_path, "lars", 100, "trial", 0, [40, 45, 50], trial=2)
    sweep_run(tmp_path, "lars", 100, "trial", 0, [65, 66, 67], trial=0, study=1)
    orphan = sweep_run(tmp_path, "lars", 100, "trial", 1, [50], trial=2, status="running")  # killed, run again
    orphan.rename(orphan.parent / "killed")
    [c] = cells.cells(results.load_study([tmp_path])).to_dict("records")
    assert c["steps_to_result"] == 10 and c["n_trials"] == 4 and c["n_studies"] == 2
    assert c["median_study_steps"] == (20 + 10) / 2
    assert c["best_trial"] == "s-lars-b100-t00-s1" and c["best_selection_top1"] == 67


class Row(list):
    """A verdict row, its cells also reached by column name."""

    def __init__(self, cells, columns):
        super().__init__(cells)
        self.columns = columns

    def __getitem__(self, key):
        return super().__getitem__(self.columns.index(key) if isinstance(key, str) else key)


def verdict_rows(tmp_path, baseline=None):
    table = verdict.verdict(results.load_study([tmp_path]), baseline)
    return {(r[0], r[1], r[2]): Row(r, table.columns) for r in table.rows}, table


def test_verdict_names_a_clear_winner_and_calls_a_small_difference_within_noise(tmp_path):
    for arm, finals in (("lars", [70, 71, 72]), ("vrgd_lars", [60, 61.5, 62]), ("nesterov", [70.5, 71.5, 70])):
        sweep_run(tmp_path, arm, 256, "trial", 0, [50, finals[0]])
        for seed, final in enumerate(finals, 1):
            sweep_run(tmp_path, arm, 256, "rerun", seed, [50, final])
    rows, table = verdict_rows(tmp_path)
    win = rows[(256, "VRGD-LARS", "LARS")]  # the declared question reads as asked: X = VRGD-LARS
    assert win[-1] == "LARS better"
    assert win["Δ val Top-1 (X − Y)"].value == pytest.approx(61.1666667 - 71) and win["Δ val Top-1 (X − Y)"].ci[1] < 0
    assert win["family"] == "primary" and win["test"] == "paired"  # the same seeds 1-3 on both sides
    assert rows[(256, "LARS", "Nesterov SGD")][-1].startswith("within noise (could detect ≥ ")
    assert rows[(256, "LARS", "Nesterov SGD")]["family"] == "secondary"
    lo, hi = rows[(256, "LARS", "Nesterov SGD")]["Δ val Top-1 (X − Y)"].ci
    assert lo < 0 < hi
    assert rows.get((256, "VRGD-LARS", "Nesterov SGD"), rows.get((256, "Nesterov SGD", "VRGD-LARS")))[-1] == (
        "Nesterov SGD better"
    )
    rows, _ = verdict_rows(tmp_path, baseline="nesterov")
    assert set(rows) == {(256, "LARS", "Nesterov SGD"), (256, "VRGD-LARS", "Nesterov SGD")}
    assert "within noise" in " ".join(table.notes) and "Welch" in " ".join(table.notes)


def test_verdict_with_a_diverged_side_and_a_missed_target(tmp_path):
    for seed in (1, 2, 3):
        sweep_run(tmp_path, "lars", 64, "rerun", seed, [50, 65 + seed])  # target 60: reached at step 20
        sweep_run(tmp_path, "vrgd_lars", 64, "rerun", seed, [30, 40], status="diverged")
        sweep_run(tmp_path, "lars", 512, "rerun", seed, [50, 60 + seed])
        sweep_run(tmp_path, "vrgd_lars", 512, "rerun", seed, [40 + seed, 55 + seed])  # never reaches 60
    rows, _ = verdict_rows(tmp_path)
    assert rows[(64, "VRGD-LARS", "LARS")][-1] == "LARS better (the other diverged)"
    assert rows[(64, "VRGD-LARS", "LARS")]["val Top-1 X"].text() == "all 3 diverged"
    steps = rows[(512, "VRGD-LARS", "LARS")]["steps to target X / Y"]
    assert steps.empty and steps.note == "VRGD-LARS missed 3/3"
    assert rows[(512, "VRGD-LARS", "LARS")][-1] == "LARS better"


def test_verdict_ratio_of_steps_when_both_reach_the_target(tmp_path):
    for seed in (1, 2, 3):
        sweep_run(tmp_path, "lars", 100, "rerun", seed, [50, 61, 62])  # step 20
        sweep_run(tmp_path, "nesterov", 100, "rerun", seed, [61, 62, 63])  # step 10
    rows, _ = verdict_rows(tmp_path)
    ratio = rows[(100, "LARS", "Nesterov SGD")]["steps to target X / Y"]
    assert ratio.value == pytest.approx(2.0) and ratio.ci == (2.0, 2.0)  # no spread: a point interval
    assert ratio.note.startswith("90%")  # 3 vs 3: the exact Mann-Whitney interval's coverage, short of 95%


def test_the_steps_ratio_takes_ties_and_a_miss():
    """The median of the pairwise ratios with the exact Mann-Whitney interval (no generator): a miss counts as ∞,
    so an interval end can be ∞ (written in the note, with the attained coverage)."""
    import pandas as pd

    x = pd.Series({"arm": "lars", "rerun_steps": (20.0, 20.0, 30.0, 20.0, math.inf)})
    y = pd.Series({"arm": "nesterov", "rerun_steps": (10.0, 10.0, 10.0, 20.0, 10.0)})
    ratio = pairs.steps_ratio(x, y)
    # the 25 ratios: three 1s, one 1.5, twelve 2s, four 3s, five ∞; 95%: the 3rd smallest to the 3rd largest
    assert ratio.value == 2.0 and ratio.ci is None and ratio.note == "[1.00, ∞] 96.83%; LARS missed 1/5"
    reordered = pd.Series({"arm": "lars", "rerun_steps": (math.inf, 20.0, 20.0, 30.0, 20.0)})
    assert pairs.steps_ratio(reordered, y) == ratio  # the runs' order does not matter
    x3 = pd.Series({"arm": "lars", "rerun_steps": (20.0, math.inf, math.inf)})
    assert pairs.steps_ratio(x3, y).empty  # most missed: the median is a miss


def test_a_difference_of_exactly_one_grid_is_unresolved():
    """386 against 372 steps on a 14-step grid (the ladder's batch 128): one evaluation apart, not resolved."""
    import pandas as pd

    x = pd.Series({"arm": "vrgd_lars", "rerun_steps": (386.0, 372.0, 400.0, 386.0, 358.0), "rerun_grid": (14.0,) * 5})
    y = pd.Series({"arm": "lars", "rerun_steps": (372.0, 358.0, 386.0, 372.0, 344.0), "rerun_grid": (14.0,) * 5})
    r = pairs.steps_ratio_of(x, y, 0.99)
    assert r.unresolved and pairs.speed_word("vrgd_lars", "lars", r).startswith("unresolved")
    finer = [pd.Series({**c, "rerun_grid": (13.0,) * 5}) for c in (x, y)]
    assert not pairs.steps_ratio_of(*finer, 0.99).unresolved


def test_verdict_is_a_cli_table_in_every_format(tmp_path):
    for arm in ("lars", "nesterov"):
        for seed in (1, 2):
            sweep_run(tmp_path, arm, 128, "rerun", seed, [50, 60 + seed + (arm == "lars")])
    done = cli("table", "verdict", str(tmp_path), "--format", "csv")
    assert done.returncode == 0, done.stderr
    header = [line for line in done.stdout.splitlines() if not line.startswith("#")][0]
    assert "Δ val Top-1 (X − Y) ci low" in header and "Δ val Top-1 (X − Y) ci high" in header
    bad = cli("table", "verdict", str(tmp_path), "--baseline", "adamw")
    assert bad.returncode == 2 and "not an arm of these sweeps" in bad.stderr
    # every table that takes an arm checks it (scaling once indexed its resamples by it: a KeyError), and a sweep
    # table that takes none refuses one rather than ignoring it
    assert main(["table", "scaling", str(tmp_path), "--baseline", "adamw"]) == 2
    assert main(["table", "matched", str(tmp_path), "--baseline", "lars"]) == 2


# ---- end to end --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_tiny_sweep_killed_once_resumes_and_reports(sweep_file, tmp_path, capsys):
    """2 arms x 1 batch x 2 trials, best of each rerun over 2 seeds; the process is SIGKILLed at step 3 of
    the first trial, then the same command finishes the sweep: every trial trained once. On bench's own ResNet-8,
    which spares the killed process timm's import: the sweep's bookkeeping is under test, not the model."""
    base = sweep_file.with_name("base.yaml")
    base.write_text(base.read_text().replace("{name: resnet10t}", "{name: resnet8_cifar}"))
    out, plots = tmp_path / "results", tmp_path / "plots"
    cmd = ["sweep", str(sweep_file), "--out", str(out), "--plots", str(plots), "--allow-dirty"]
    assert killed_at("step:3", *cmd, BENCH_CRASH_ONCE=str(tmp_path / "crashed")) == -signal.SIGKILL
    done = cli(*cmd, strict=True)  # the same command, in this process; a warning that leaks is an error
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stdout  # the killed trial went on from its checkpoint (step 2)
    runs = results.load([out])
    assert sorted(runs["recipe"]) == sorted(
        [f"tiny-{a}-b32-t0{i}" for a in ("sgd", "lars") for i in (0, 1)]
        + [f"tiny-{a}-b32-best-seed{s}" for a in ("sgd", "lars") for s in (1, 2)]
    )
    reruns = runs[runs["role"] == "rerun"]
    assert runs["finished"].all() and (reruns["status"] == "completed").all() and reruns["holdout_top1"].notna().all()
    assert set(runs["status"]) <= {"completed", "diverged"}  # a trial at lr 5 may blow up (bench's divergence rule)
    kept = {Path(run).parent.name: len(list(Path(run).glob("ckpt-*.pt"))) for run in runs["run"]}
    assert kept == {name: 0 if "-t0" in name else 1 for name in kept}  # trials keep none, reruns their final one
    verdict = (out / "verdict.md").read_text()
    assert "| 32 | nesterov" not in verdict and "SGD" in verdict and "LARS" in verdict
    claims = [f"- {claim}" for claim in claims_of(verdict)]  # what it ends with: the verdict in words, two paths
    assert claims and done.stdout.splitlines()[-len(claims) - 3 :] == [
        f"wrote {1 + len(tables.SWEEP_TABLES)} tables (markdown and csv) to {out} and "
        f"{len(list(plots.glob('*.png')))} figures (PNG and SVG) to {plots}",
        *claims,
        f"verdict table: {out / 'verdict.md'}",
        f"main figure: {plots / 'tuned_top1_vs_batch.png'}",
    ]
    assert f"wrote {out}" not in done.stdout  # the files it wrote, one line for all
    assert {p.name for p in plots.iterdir()} >= {
        "steps_to_result.png",
        "lr_sensitivity.png",
        "performance_profile.png",
        "tuned_top1_vs_batch.png",
    }
    capsys.readouterr()
    assert main(cmd) == 0
    again = capsys.readouterr().out
    assert "run directory" not in again  # nothing left to train, and the first line says why
    assert again.startswith(f"{out}: 4 of the 4 trials finished already, reused (to train anew: another --out)\n")
    assert len(results.load([out])) == 8
    assert main([*cmd, "--list"]) == 0
    listed = capsys.readouterr().out
    assert listed.count("tiny-") == 4 and "| tiny-lars-b32-t00 | lars | 32 | 2 epochs | 8 |" in listed
    # the bound split into what finished (and the hours it took) and what is left
    assert "finished: 4 trials, 0 local points, 4 reruns (2,048 images at their budgets; " in listed
    assert "left: at most 0 runs (0 trials, at most 0 local, at most 0 reruns), at most 0 images" in listed
    assert listed.rstrip().endswith("; `bench sweep` writes the tables")  # and, in so many words, complete


def test_list_reads_a_results_folder_before_its_first_run_finished(sweep_file, tmp_path, capsys):
    """A sweep's results folder holds its space file and claims before any run finished: --list counts none
    finished (it said "no run directories found" and exit 2), nor another sweep's runs beside them."""
    out = tmp_path / "results"
    (out / ".claim-tiny-sgd-b32-t00").mkdir(parents=True)
    assert main(["sweep", str(sweep_file), "--out", str(out), "--list"]) == 0
    assert "4 trials + at most 0 local points + at most 4 reruns = at most 8 runs" in capsys.readouterr().out
    # another sweep's finished run in the folder is not this one's: neither counted nor timed by
    sweep_run(out, "lars", 32, "trial", 0, [50, 61])
    assert main(["sweep", str(sweep_file), "--out", str(out), "--list"]) == 0
    said = capsys.readouterr().out
    assert "finished:" not in said and "time: give --throughput IMG_S, or run one trial" in said


def test_only_runs_a_subset_and_an_unknown_subset_is_exit_2(sweep_file, tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--only", "sgd-b32-t01", "--allow-dirty"]) == 0
    assert [p.name for p in out.iterdir() if p.is_dir()] == ["tiny-sgd-b32-t01"]
    assert main(["sweep", str(sweep_file), "--out", str(out), "--only", "adamw", "--allow-dirty"]) == 2
    assert "no trial of" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--out", str(out), "--only", "sgd", "--wait", "--allow-dirty"]) == 2
    assert "--only runs no local stage and no reruns, so --wait has nothing to wait for" in capsys.readouterr().err


def test_a_worker_with_nothing_to_claim_exits_and_runs_no_rerun_of_an_incomplete_cell(sweep_file, tmp_path, capsys):
    """Another process (a job array's other task) holds every trial: this one trains nothing, waits for
    nothing and ends saying so, writing no tables. Once the holder lets go of one trial, a worker trains it
    and no rerun: a cell is complete only when its trials are (the last worker runs the reruns: the next
    test)."""
    out = tmp_path / "results"
    write_recipe(sweep_file, SWEEP.replace("seeds: [1, 2]", "seeds: [1]"))
    spec, trials = load(sweep_file)
    held = {t.name: sweep.Claim(out, t.name) for t in trials}
    assert all(c.take() for c in held.values()) and not sweep.Claim(out, trials[0].name).take()
    cmd = ["sweep", str(sweep_file), "--out", str(out), "--plots", str(tmp_path / "plots"), "--allow-dirty"]
    assert main(cmd) == 0
    said = capsys.readouterr().out
    assert f"other processes hold 4 run(s) ({', '.join(held)})" in said and "run directory" not in said
    assert not list(out.glob("*/*/meta.json")) and not (out / "verdict.md").exists()
    held.pop(trials[0].name).release()
    runs, waiting, others = sweep.run_sweep(sweep_file, out, allow_dirty=True)
    assert others == [t.name for t in trials[1:]] and len(waiting) == 2
    assert [p.parent.parent.name for p in out.glob("*/*/meta.json")] == [trials[0].name]  # no rerun yet


def test_until_starts_no_run_after_its_time_and_the_same_command_goes_on(sweep_file, tmp_path, capsys, monkeypatch):
    """--until TIME: a time already passed starts no run and says so (exit 0, nothing written); a time that passes
    during a run lets that run finish and starts no other; the same call goes on from there. A bad time is exit
    2."""
    out = tmp_path / "results"
    cmd = ["sweep", str(sweep_file), "--out", str(out), "--plots", str(tmp_path / "plots"), "--allow-dirty"]
    past = (datetime.now() - timedelta(minutes=1)).isoformat(timespec="seconds")
    assert main([*cmd, "--until", past]) == 0
    assert capsys.readouterr().out.endswith(
        f"--until {past} has passed: no run starts after it (0 run(s) trained by this process); run the same "
        "command to go on\n"
    )
    assert not list(out.glob("*/*/meta.json")) and not (out / "verdict.md").exists()
    from bench.engine import train as engine_train

    clock, real = [0.0], engine_train.train
    monkeypatch.setattr(sweep, "time", SimpleNamespace(time=lambda: clock[0]))

    def train_past_the_time(*args, **kwargs):
        done = real(*args, **kwargs)
        clock[0] += 2.0  # the time passes while the run trains
        return done

    monkeypatch.setattr(engine_train, "train", train_past_the_time)
    for finished in (1, 2):
        with pytest.raises(sweep.Until, match="^1 run"):
            sweep.run_sweep(sweep_file, out, allow_dirty=True, until=clock[0] + 1.0)
        assert len(list(out.glob("*/*/meta.json"))) == finished  # the one going finished; none started after
    assert main([*cmd, "--until", "9pm"]) == 2
    assert "bench sweep --until '9pm': expected HH:MM (its next occurrence, local time)" in capsys.readouterr().err


def test_until_hh_mm_is_its_next_occurrence():
    from bench.commands.sweep import until_time

    now = time.time()
    for text in ("00:00", "12:30", "23:59", datetime.fromtimestamp(now - 60).strftime("%H:%M")):
        assert now < until_time(text) <= now + 86400
    assert until_time("2026-11-29T09:00") == datetime(2026, 11, 29, 9, 0).timestamp()


def test_claims_are_atomic_files_and_a_dead_holders_claim_is_taken_over(tmp_path, monkeypatch):
    """A claim is a file created with O_EXCL naming its holder; it is taken over only from a holder known to be
    gone: a process no longer on this host, or an earlier start of this SLURM job (a requeue), never a live
    process or a holder on another node."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = sweep.socket.gethostname()

    def claimed_by(name, **holder):
        folder = tmp_path / name
        folder.mkdir()
        (folder / ".claim-0").write_text(json.dumps({"host": host, "pid": os.getpid(), "job": None, **holder}))

    claimed_by("dead", pid=int(gone.stdout))
    claimed_by("alive")
    claimed_by("elsewhere", host="node-2", pid=1)
    claimed_by("requeued", host="node-2", pid=1, job="77", restart=0)
    claimed_by("same-start", host="node-2", pid=1, job="77", restart=1)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    taken = {
        name: sweep.Claim(tmp_path, name).take() for name in ("dead", "alive", "elsewhere", "requeued", "same-start")
    }
    assert taken == {"dead": True, "alive": False, "elsewhere": False, "requeued": True, "same-start": False}
    for name in ("dead", "requeued"):  # the stale claim is replaced by this process's, one generation up
        [claim] = (tmp_path / name).glob(".claim-*")
        assert claim.name == ".claim-1" and json.loads(claim.read_text())["pid"] == os.getpid()
    assert not sweep.Claim(tmp_path, "dead").take()  # now held, by this live process
    fresh = sweep.Claim(tmp_path, "fresh")
    assert fresh.take() and not sweep.Claim(tmp_path, "fresh").take()
    fresh.release()
    assert not list((tmp_path / "fresh").iterdir()) and sweep.Claim(tmp_path, "fresh").take()


@pytest.mark.slow
def test_two_workers_at_once_never_train_a_trial_twice(sweep_file, tmp_path):
    """Two `bench sweep` processes on one sweep, started together (two array tasks on one node): between them
    every trial and rerun trains once, the reruns start once their cells are complete, and the process that
    finishes last writes the tables."""
    out = tmp_path / "results"
    cmd = ["sweep", str(sweep_file), "--out", str(out), "--allow-dirty", "--plots", str(tmp_path / "plots")]
    write_recipe(sweep_file, SWEEP.replace("seeds: [1, 2]", "seeds: [1]").replace("{epochs: 2}", "{epochs: 1}"))
    base = sweep_file.with_name("base.yaml")  # bench's own model: the processes import no timm
    base.write_text(base.read_text().replace("{name: resnet10t}", "{name: resnet8_cifar}"))
    said = bench_processes(cmd, cmd, OMP_NUM_THREADS="1")
    assert [code for code, _, _ in said] == [0, 0], said
    trained = [line for _, stdout, _ in said for line in stdout.splitlines() if "run directory:" in line]
    runs = sorted(p.parent.parent.name for p in out.glob("*/*/meta.json"))
    assert len(runs) == len(set(runs)) == len(trained) == 6  # 4 trials + 2 arms x 1 seed, each once
    assert not any(json.loads(m.read_text()).get("resumed") for m in out.glob("*/*/meta.json"))
    assert (out / "verdict.md").is_file() and not list(out.glob("*/.claim-*"))


def test_selection_score_prefers_the_holdout_and_scores_diverged_trials_lowest(tmp_path):
    good = make_run(tmp_path, "a", "sgd", 100, 0, [50, 60], holdout=[55, 58])
    bad = make_run(tmp_path, "b", "sgd", 100, 0, [50, 70], holdout=[55, 52])
    gone = make_run(tmp_path, "c", "sgd", 100, 0, [50, 80], holdout=[60, 90], status="diverged")
    recipe = type("R", (), {"target_top1": 56.0})()
    holdout = sweep.Select(split="holdout", metric="top1")
    assert sweep.selection_score(good, recipe, holdout) > sweep.selection_score(bad, recipe, holdout)
    assert sweep.selection_score(gone, recipe, holdout) == (-math.inf,)
    on_val = sweep.Select(split="validation", metric="top1")
    assert sweep.selection_score(bad, recipe, on_val) > sweep.selection_score(good, recipe, on_val)
    fastest = sweep.Select(split="holdout", metric="steps_to_target")
    assert sweep.selection_score(good, recipe, fastest) == (1.0, -20.0, 58.0)
    assert sweep.selection_score(bad, recipe, fastest) == (0.0, 0.0, 52.0)


def test_holdout_top1_is_in_metrics_and_read_back(tmp_path):
    run = make_run(tmp_path, "a", "sgd", 100, 0, [50, 60], holdout=[41, 42])
    assert pd.read_csv(run / "metrics.csv")["holdout_top1"].tolist() == [41, 42]
    assert results.load([run])["holdout_top1"].tolist() == [42]


def test_perf_sweep_reports_the_overhead_per_trial(sweep_file, tmp_path):
    base = sweep_file.parent / "base.yaml"
    done = cli("perf", "sweep", "--recipe", str(base), "--epochs", "1", "--trials", "2")
    assert done.returncode == 0, done.stderr
    assert "overhead / training time, median of trials 2-2:" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("perf-base-b32-t0")]
    assert len(rows) == 2
    for _, wall, train, evaluation, overhead, ratio in rows:
        assert float(wall) == pytest.approx(float(train) + float(evaluation) + float(overhead), abs=0.02)
        assert float(train) > 0 and float(evaluation) > 0
    bad = cli("perf", "sweep", "--trials", "1")
    assert bad.returncode == 2 and "argument --trials: expected an integer >= 2" in bad.stderr


def test_list_prints_the_search_warnings_the_runs_and_their_gpu_hours(sweep_file, capsys):
    """4 trials of 2 epochs of the 128 training images, at most 2 arms x 2 seeds reruns of the same: 1,024 images
    each side (32 steps each at batch 32), at 0.1 img/s 2.8 GPU-hours each. The default throughput is ResNet-50's
    at 224 px only; without one, the time on this machine comes from the sweep's finished runs."""
    assert main(["sweep", str(sweep_file), "--list", "--throughput", "0.1"]) == 0
    said = capsys.readouterr()
    assert said.out.count("| tiny-") == 4
    assert "4 trials + at most 0 local points + at most 4 reruns = at most 8 runs (2 arms x 1 batch; reruns: " in (
        said.out
    )
    assert "at most 2,048 training images (trials 1,024, locals 0, reruns 1,024) in 64 steps, 128 training" in said.out
    assert "GPU-hours of training: 2.8 trials + at most 0 local + at most 2.8 reruns = at most 5.7, at 0.1" in said.out
    assert "arms.lars: 2 trials for 2 searched keys" in said.err and "studies: 1" in said.err
    assert main(["sweep", str(sweep_file), "--list"]) == 0
    assert "time: give --throughput IMG_S, or run one trial" in capsys.readouterr().out
    assert sweep.measured_speed(sweep.own_finished_runs(sweep.load(sweep_file), sweep_file.parent / "nowhere")) is None


def test_submit_a_sweep_file_as_a_job_array_of_workers(sweep_file, tmp_path, monkeypatch):
    from bench import rundir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rundir, "checkout_state", lambda *files: ("c0ffee", ()))  # a clean tree, whatever this one's
    cmd = ["submit", str(sweep_file), "--nodes", "1", "--gpus-per-node", "1", "--dry-run"]
    done = cli(*cmd)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert "#SBATCH --array=0-3" in script  # one worker per trial: 2 arms x 1 batch x 2 trials
    assert f"-m bench sweep {sweep_file} --out results/tiny" in script and "torch.distributed.run" not in script
    assert 'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" ' in script  # Slurm >= 22.05: srun does not inherit it
    plan = "# batch 32: plan: 1 rank x 1 micro-batches x 32 images = batch 32; 1 gradient group of 1 micro-batch(es)"
    assert plan + "; micro_batch auto: the device's memory may lower it\nset -uo" in script  # as bench run prints it
    done = cli(*cmd, "--array", "2", "--out", "elsewhere", "--account", "proj42", "--exclusive")
    assert "#SBATCH --array=0-1" in done.stdout and "--out elsewhere" in done.stdout
    assert "#SBATCH --account=proj42" in done.stdout and "#SBATCH --exclusive" in done.stdout  # the same header
    bad = cli(*cmd[:3], "2", "--gpus-per-node", "1", "--dry-run")
    assert bad.returncode == 2 and "job array of one-GPU workers" in bad.stderr
    # an uncommitted tree is refused at submit, not in each array task once the queue starts them
    monkeypatch.setattr(rundir, "checkout_state", lambda *files: ("c0ffee", ("M bench/optim/lars.py",)))
    dirty = cli(*cmd)
    assert dirty.returncode == 2 and dirty.stdout == "" and "(M bench/optim/lars.py)" in dirty.stderr
    assert "pass --allow-dirty" in dirty.stderr and not (tmp_path / "slurm").exists()
    allowed = cli(*cmd, "--allow-dirty")
    assert allowed.returncode == 0 and f"-m bench sweep {sweep_file} --out results/tiny --allow-dirty" in allowed.stdout
    one = cli("submit", str(RECIPES / "demo-sgd.yaml"), *cmd[2:], "--allow-dirty")
    assert one.returncode == 2 and "--allow-dirty is a sweep file's option" in one.stderr


def near_tie_trials(root):
    """Two trials of each arm at batch 64 (1,000 holdout images): LARS's 80.6 against 80.4, a near tie; VRGD-LARS's
    85 against 80, clear."""
    for arm, scores in (("lars", [80.6, 80.4]), ("vrgd_lars", [85.0, 80.0])):
        for trial, score in enumerate(scores):
            make_run(
                root,
                f"s-{arm}-b64-t{trial:02d}",
                "lars",
                64,
                0,
                [50, 70],
                holdout=[50, score],
                tags={"sweep": "s", "arm": arm, "trial": trial, "study": 0, "role": "trial"},
                meta_extra={"holdout_size": 1000},
            )


def test_a_near_tie_selection_is_flagged_and_a_better_that_rests_on_it_says_so(tmp_path):
    """Reruns whose holdout Top-1 varies 1 pp from seed to seed: the trials' 80.6 against 80.4 is 0.2 pp apart, well
    inside the sqrt(2) x 1 pp two one-seed trials differ by: a near tie; 85 against 80 is not. The verdict's
    'better' names the near-tie selection it rests on."""
    near_tie_trials(tmp_path)
    for arm in ("lars", "vrgd_lars"):
        for seed in (1, 2, 3):
            val = [50, (70 if arm == "lars" else 60) + seed * 0.1]
            sweep_run(tmp_path, arm, 64, "rerun", seed, val, holdout=[50, 70 + seed])
    by_arm = cells.cells(results.load_study([tmp_path])).set_index("arm")
    assert by_arm.loc["lars", "seed_noise"] == pytest.approx(1.0)  # the reruns' holdout Top-1: 71, 72, 73
    assert by_arm.loc["lars", "near_tie"] and not by_arm.loc["vrgd_lars", "near_tie"]
    assert by_arm.loc["lars", "runner_up_top1"] == 80.4
    assert by_arm.loc["lars", "selection_se"] == pytest.approx(100 * math.sqrt(0.806 * 0.194 / 1000))
    rows, _ = verdict_rows(tmp_path)
    assert (
        rows[(64, "VRGD-LARS", "LARS")][-1] == "LARS better; rests on a near tie (LARS) whose runner-up was not rerun"
    )
    table = tuning.tuning(results.load_study([tmp_path]))
    near = {r[1]: r[table.columns.index("near tie")] for r in table.rows}
    assert near == {"LARS": "near tie", "VRGD-LARS": ""}


def near_tie_tree(root, runner_up_val):
    """LARS's selection a near tie (near_tie_trials), its reruns at 70.1-70.3 against VRGD-LARS's 60.1-60.3 (clear,
    but the seeds' spread is 0.1 on both sides), its runner-up rerun with the same seeds at `runner_up_val` +
    seed/10; VRGD-LARS's selection clear."""
    near_tie_trials(root)
    for arm in ("lars", "vrgd_lars"):
        for seed in (1, 2, 3, 4, 5):
            sweep_run(root, arm, 64, "rerun", seed, [50, (70 if arm == "lars" else 60) + seed * 0.1 + seed**2 * 0.01])
    for seed in (1, 2, 3, 4, 5):
        tags = {"sweep": "s", "arm": "lars", "trial": 1, "study": 0, "role": "rerun_top", "rank": 2}
        val = runner_up_val + seed * 0.1 - seed**2 * 0.01
        make_run(root, f"s-lars-b64-top2-seed{seed}", "lars", 64, seed, [50, val], tags=tags, train_eval=[53, val + 3])


@pytest.mark.parametrize(
    "runner_up_val, word",
    [
        (69.0, "LARS better; the same at the near-tied runner-up's reruns (LARS)"),
        (
            60.0,
            "depends on the selection: LARS better at the selected points; within noise (could detect ≥ 0.3 pp) "
            "with LARS's runner-up",
        ),
    ],
)
def test_a_verdict_on_a_near_tie_holds_only_if_the_runner_ups_reruns_agree(tmp_path, runner_up_val, word):
    """Item 5 of issue 49: where a selection is a near tie, the verdict word stands only if the runner-up's reruns
    (reruns.top 2, the same seeds) give the same conclusion; otherwise it says 'depends on the selection' and
    names both results. Its claim sentence carries the same words."""
    near_tie_tree(tmp_path, runner_up_val)
    study = results.load_study([tmp_path])
    by_arm = cells.cells(study).set_index("arm")
    assert by_arm.loc["lars", "near_tie"] and len(by_arm.loc["lars", "runner_up_seeds"]) == 5
    rows, _ = verdict_rows(tmp_path)
    assert rows[(64, "VRGD-LARS", "LARS")][-1] == word
    claims = verdict.verdict(study).claims
    assert len(claims) == 1 and claims[0].startswith("VRGD-LARS − LARS val Top-1 at batch 64: between -10.")
    assert claims[0].endswith(f"pp (95%, uncorrected); {word}.")


def test_the_verdict_names_its_commits_and_platforms_and_warns_when_they_differ(tmp_path):
    for seed in (1, 2, 3):
        for arm in ("lars", "vrgd_lars"):
            capability = "AVX512" if seed == 3 and arm == "lars" else "AVX2"
            run = sweep_run(tmp_path, arm, 64, "rerun", seed, [50, 70 + seed + (arm == "lars")])
            meta = json.loads((run / "meta.json").read_text())
            meta.update(
                git_commit="abcdef0123" + "+dirty" * (seed == 2),
                device="cpu",
                cpu_capability=capability,
                versions={"torch": "2.14.1"},
            )
            (run / "meta.json").write_text(json.dumps(meta))
    rows, table = verdict_rows(tmp_path)
    notes = " ".join(table.notes)
    assert "commits abcdef0, abcdef0+dirty on cpu AVX2, torch 2.14.1; cpu AVX512, torch 2.14.1" in notes
    assert "more than one code version" in notes and "cpu AVX2, torch 2.14.1: 5 runs" in notes
    assert "Warning: 2 of the 6 runs are dirty (commit +dirty)" in notes
    assert rows[(64, "VRGD-LARS", "LARS")][-1].endswith("; pairs across kernel platforms")


def test_the_verdict_names_the_optimizer_libraries_and_warns_when_a_package_s_versions_differ(tmp_path):
    """Each library optimizer's package at the versions its runs recorded (meta.json's versions): bench's own
    optimizers name none, nor does a run made before bench recorded its package's version. Two versions of one
    package in a study are warned about, as two commits are."""
    platform = {"git_commit": "abcdef0123", "device": "cpu", "cpu_capability": "AVX2"}
    for seed in (1, 2, 3):
        for arm, optimizer in (("lars", "lars"), ("nadamw", "nadamw"), ("sf", "schedulefree_adamw")):
            versions = {"torch": "2.14.1", "timm": "1.0.30" if seed == 3 else "1.0.31"}
            versions |= {"schedulefree": "1.4.1"} if seed < 3 else {}  # seed 3: made before bench recorded it
            make_run(
                tmp_path,
                f"s-{arm}-b64-best-seed{seed}",
                optimizer,
                64,
                seed,
                [50, 70 + seed],
                tags={"sweep": "s", "arm": arm, "trial": 0, "study": 0, "role": "rerun"},
                meta_extra={**platform, "versions": versions},
            )
    _, table = verdict_rows(tmp_path)
    assert [n for n in table.notes if n.startswith(("Provenance", "Warning"))] == [
        "Provenance: 9 finished runs from commit abcdef0 on cpu AVX2, torch 2.14.1; optimizer libraries "
        "schedulefree 1.4.1, timm 1.0.30, timm 1.0.31.",
        "Warning: the runs come from more than one version of timm (1.0.30: 1 runs; 1.0.31: 2 runs); a reviewer "
        "cannot rerun them with one.",
    ]


def test_the_plan_table_sizes_a_next_study_at_the_corrected_level(tmp_path):
    """From a pilot's paired noise: the seeds a side needs for 0.25, 0.5 and 1 pp after Holm over the family, at
    the observed sd and at the upper end of its interval (more seeds)."""
    rng = np.random.default_rng(2)
    shared = rng.normal(80, 1.0, 5)
    for batch in (64, 256):
        for seed in range(1, 6):
            sweep_run(tmp_path, "lars", batch, "rerun", seed, [50, shared[seed - 1]])
            sweep_run(tmp_path, "vrgd_lars", batch, "rerun", seed, [50, shared[seed - 1] + rng.normal(0.3, 0.3)])
    table = verdict.plan(results.load_study([tmp_path]))
    assert [r[0] for r in table.rows] == [64, 256]
    row = dict(zip(table.columns, table.rows[0]))
    assert row["tests m"] == 2 and row["level α/m"].value == pytest.approx(0.025) and row["seeds now"] == 5
    observed, planning = (int(v) for v in row["seeds for 0.5 pp (observed / planning)"].split(" / "))
    assert 2 <= observed < planning
    small, _ = (int(v) for v in row["seeds for 0.25 pp (observed / planning)"].split(" / "))
    assert small > observed
    assert main(["table", "plan", str(tmp_path)]) == 0


def test_a_sweep_refuses_an_uncommitted_tree_and_another_kernel_platform(sweep_file, tmp_path, monkeypatch, capsys):
    """A study's runs come from one clean commit and one kernel platform: a dirty tree is refused unless
    --allow-dirty; a resume on another platform than the finished runs' is refused unless --allow-mixed-kernels;
    another commit is named in a warning. Nothing is trained or written when refused."""
    from bench import rundir

    out = tmp_path / "results"
    monkeypatch.setattr(rundir, "checkout_state", lambda *files: ("0123456789abcdef", ("M bench/optim/lars.py",)))
    assert main(["sweep", str(sweep_file), "--out", str(out), "--only", "sgd-b32-t00"]) == 2
    err = capsys.readouterr().err
    assert "differs from its commit 0123456789ab (M bench/optim/lars.py)" in err and not any(out.glob("*/*/meta.json"))
    monkeypatch.setattr(rundir, "checkout_state", lambda *files: ("0123456789abcdef", ()))
    finished = make_run(
        out,
        "tiny-sgd-b32-t01",
        "sgd",
        32,
        0,
        [50, 60],
        meta_extra={
            "git_commit": "fedcba9876543210",
            "device": "cpu",
            "cpu_capability": "AVX512",
            "versions": {"torch": "0"},
        },
    )
    assert main(["sweep", str(sweep_file), "--out", str(out), "--only", "sgd-b32-t00"]) == 2
    err = capsys.readouterr().err
    assert "used cpu AVX512, torch 0 and this process would use cpu" in err and "ATEN_CPU_CAPABILITY=avx512" in err
    assert "give another --out for a new study" in err and "'?'" not in err  # its path is recorded
    meta = json.loads((finished / "meta.json").read_text())
    import torch

    from bench.rundir import versions

    meta.update(cpu_capability=torch.backends.cpu.get_cpu_capability(), versions=versions(), cpu_model="Other CPU")
    (finished / "meta.json").write_text(json.dumps(meta))
    # the same kernel path on another processor: its numbers differ too (an Intel Xeon and an AMD EPYC did)
    with pytest.raises(UserError, match=r"used cpu \w+ on Other CPU, torch"):
        sweep.check_provenance(sweep.load(sweep_file), out, allow_dirty=False, allow_mixed_kernels=False)
    (finished / "meta.json").write_text(json.dumps({**meta, "cpu_model": rundir.cpu_model()}))
    sweep.check_provenance(sweep.load(sweep_file), out, allow_dirty=False, allow_mixed_kernels=False)
    assert "came from fedcba987654; this process runs 0123456789abcdef" in capsys.readouterr().err


def test_an_allowed_dirty_tree_is_recorded_in_each_run_and_the_verdict_counts_it(sweep_file, checkout, tmp_path):
    """A recipe edited in bench's checkout (the sweep file and its base recipe lie elsewhere, unchanged) makes the
    tree dirty: a sweep refuses it; with allow_dirty its run records the commit as '+dirty', and the verdict's
    provenance counts the dirty run. The run's meta.json holds the installed version of every package a library
    optimizer's record names."""
    from importlib import metadata

    from bench import catalog

    out = tmp_path / "results"
    with open(checkout / "recipes" / "base.yaml", "a") as f:
        f.write("# edited\n")
    with pytest.raises(UserError, match=r"differs from its commit \w{12} \(M recipes/base.yaml\)"):
        sweep.run_sweep(sweep_file, out, only="sgd-b32-t00")
    sweep.run_sweep(sweep_file, out, only="sgd-b32-t00", allow_dirty=True)
    [meta] = [json.loads(path.read_text()) for path in out.glob("*/*/meta.json")]
    sha = git(checkout, "rev-parse", "HEAD").strip()
    assert meta["git_commit"] == f"{sha}+dirty"
    assert {p: meta["versions"][p] for p in catalog.LIBRARIES} == {p: metadata.version(p) for p in catalog.LIBRARIES}
    notes = cells.provenance_notes(results.load_study([out]))
    assert notes[0].startswith(f"Provenance: 1 finished runs from commit {sha[:7]}+dirty on cpu ")
    assert "Warning: 1 of the 1 runs are dirty (commit +dirty)" in " ".join(notes)


def test_a_thin_search_is_named_in_a_warning(sweep_file):
    spec = sweep.load(sweep_file)  # 2 trials, arms of 1 and 2 searched keys, one study
    warnings = sweep.search_warnings(spec)
    assert warnings == [
        "arms.sgd: 2 trials for 1 searched keys; a quasi-random search resolves them from about 4 (2^(d+1)) trials "
        "a study",
        "arms.lars: 2 trials for 2 searched keys; a quasi-random search resolves them from about 8 (2^(d+1)) trials "
        "a study",
        "studies: 1; headline sweeps use at least 2 (AlgoPerf: 3 studies x 5 trials), each its own scramble, so the "
        "best point's luck is seen",
    ]
    assert sweep.search_warnings(spec.model_copy(update={"trials": 8, "studies": 2})) == []
    assert sweep.search_warnings(sweep.load(RECIPES / "demo.yaml")) == []  # a grid: no scramble for studies to vary


def test_steps_figures_carry_their_grid_and_a_ratio_inside_it_is_unresolved(tmp_path):
    """Evaluations every epoch (10 steps here): both arms first reach 60% at step 20, so their steps are equal by
    construction; the ratio says it is unresolved and the tuning table prints the grid."""
    for seed in (1, 2, 3):
        sweep_run(tmp_path, "lars", 100, "rerun", seed, [50, 61, 62])
        sweep_run(tmp_path, "vrgd_lars", 100, "rerun", seed, [50, 60.5, 62])
    for arm in ("lars", "vrgd_lars"):
        sweep_run(tmp_path, arm, 100, "trial", 0, [50, 61, 62])
    rows, _ = verdict_rows(tmp_path)
    ratio = rows[(100, "VRGD-LARS", "LARS")]["steps to target X / Y"]
    assert ratio.value == 1.0 and "unresolved: the medians differ by no more than the grid of 10 steps" in ratio.note
    runs = results.load([tmp_path])
    assert set(runs["steps_to_target"]) == {20} and set(runs["steps_to_target_grid"]) == {10}
    table = tuning.tuning(results.load_study([tmp_path]))
    assert table.rows[0][table.columns.index("steps to result")].text() == "20 (grid 10)"


def test_top_and_matched_reruns_are_planned_from_the_ranked_trials(sweep_file):
    """reruns.top: 2 reruns the runner-up too (-top2-seed<S>); reruns.matched: each arm of the pair reruns at the
    other's selected point (-at-<other>-seed<S>) with its own fixed keys and the other's searched values."""
    write_recipe(
        sweep_file,
        SWEEP.replace(
            "      optimizer.lr: {low: 0.01, high: 0.5, scale: log}\n",
            "      optimizer.lr: {low: 0.01, high: 0.5, scale: log}\n      schedule.warmup_epochs: {low: 0.0, high: 1.0}\n",
        ).replace("reruns: {seeds: [1, 2]}", "reruns: {seeds: [1, 2], top: 2, matched: [[lars, sgd]]}"),
    )
    spec, trials = load(sweep_file)
    by = {(t.arm, t.index): t for t in trials}
    ranked = {("sgd", 32): [by[("sgd", 1)], by[("sgd", 0)]], ("lars", 32): [by[("lars", 0)], by[("lars", 1)]]}
    names = {r.name: r for r in sweep.all_reruns(spec, ranked)}
    assert sorted(names) == sorted(
        [f"tiny-{a}-b32-{k}-seed{s}" for a in ("sgd", "lars") for k in ("best", "top2") for s in (1, 2)]
        + [f"tiny-{a}-b32-at-{b}-seed{s}" for a, b in (("sgd", "lars"), ("lars", "sgd")) for s in (1, 2)]
    )
    sgd_at_lars = names["tiny-sgd-b32-at-lars-seed1"].recipe
    assert sgd_at_lars.optimizer.name == "sgd" and sgd_at_lars.optimizer.lr == by[("lars", 0)].recipe.optimizer.lr
    assert sgd_at_lars.tags["role"] == "matched" and sgd_at_lars.tags["point_of"] == "lars"
    assert names["tiny-lars-b32-top2-seed2"].recipe.tags["role"] == "rerun_top"
    same = {("sgd", 32): [by[("sgd", 0)]], ("lars", 32): [by[("lars", 0)]]}  # the same unit point, other ranges
    assert any("-at-" in r.name for r in sweep.all_reruns(spec, same))
    bad = SWEEP.replace("reruns: {seeds: [1, 2]}", "reruns: {seeds: [1, 2], matched: [[lars, sgd]]}")
    write_recipe(sweep_file, bad)
    with pytest.raises(UserError, match="search different keys"):
        sweep.load(sweep_file)


def test_the_matched_table_pairs_both_arms_at_each_ones_point(tmp_path):
    """A hand-made 2 x 2 at one batch: VRGD-LARS at its point 2 points above LARS there; at LARS's point within
    noise. Paired by seed, one Holm family of two."""
    for seed, luck in zip((1, 2, 3, 4), (0.0, 0.4, -0.3, 0.2)):
        sweep_run(tmp_path, "vrgd_lars", 64, "rerun", seed, [50, 80 + luck])
        sweep_run(tmp_path, "lars", 64, "rerun", seed, [50, 79 + luck + seed * 0.05])
        for arm, other, final in (
            ("lars", "vrgd_lars", 78 + luck + seed * 0.01),
            ("vrgd_lars", "lars", 79 + luck - seed * 0.02 + 0.05),
        ):
            make_run(
                tmp_path,
                f"s-{arm}-b64-at-{other}-seed{seed}",
                "lars",
                64,
                seed,
                [50, final],
                tags={"sweep": "s", "arm": arm, "trial": 0, "study": 0, "role": "matched", "point_of": other},
            )
    table = verdict.matched(results.load_study([tmp_path]))
    rows = {r[1]: dict(zip(table.columns, r)) for r in table.rows}
    assert set(rows) == {"VRGD-LARS", "LARS"} and all(r["test"] == "paired" for r in rows.values())
    at_vrgd = rows["VRGD-LARS"]
    assert (at_vrgd["X"], at_vrgd["Y"]) == ("VRGD-LARS", "LARS")
    assert at_vrgd["Δ val Top-1 (X − Y)"].value == pytest.approx(2 - 0.01 * 2.5) and at_vrgd["verdict"] == (
        "VRGD-LARS better"
    )
    assert rows["LARS"]["Δ val Top-1 (X − Y)"].value == pytest.approx(0.05 - 0.02 * 2.5 - 0.05 * 2.5)
    assert rows["LARS"]["p Holm"].value >= rows["LARS"]["p"].value


def test_the_sweep_figures_say_what_their_bars_are_and_draw_no_value_above_one(tmp_path):
    """The performance profile draws fractions (no offsets that read as values above 1); the tuned Top-1 figure says
    its bars are sample sds over n reruns that the verdict pairs; the steps figure draws the reruns' medians."""
    from bench.analysis import tuning_plots

    for arm in ("lars", "vrgd_lars"):
        sweep_run(tmp_path, arm, 100, "trial", 0, [50, 61, 62])
        for seed in (1, 2, 3):
            sweep_run(tmp_path, arm, 100, "rerun", seed, [50, 61, 62])
    study = results.load_study([tmp_path])
    table_cells, order = cells.cells(study), cells.arms(cells.sweep_runs(study))
    profile = tuning_plots.plot_performance_profile(table_cells, order)
    assert max(max(line.get_ydata()) for line in profile.axes[0].get_lines()) == 1.0
    top1 = tuning_plots.plot_reruns_vs_batch(table_cells, order, "val_top1", "val", "Top-1")
    [note] = [t for t in top1.axes[0].texts if t.get_gid() == "error-bar-note"]
    assert note.get_text() == "mean ± sample sd over n = 3 reruns; the verdict pairs them by seed"
    steps = tuning_plots.plot_steps_to_result(table_cells, order)
    assert "best trial (winner's luck)" in [t.get_text() for t in steps.legends[0].get_texts()]
    assert "reruns' median" in steps.axes[0].get_ylabel()  # the lines are the reruns'; the best trials faint marks


def test_the_steps_figure_marks_a_median_that_missed_the_target(tmp_path):
    """Two of three reruns never reach the target (their median is a miss): no point, a mark in the band."""
    from bench.analysis import tuning_plots

    sweep_run(tmp_path, "lars", 100, "trial", 0, [50, 61])
    for seed, val in enumerate(([50, 61], [50, 55], [50, 56]), 1):
        sweep_run(tmp_path, "lars", 100, "rerun", seed, val)
    table_cells = cells.cells(results.load_study([tmp_path]))
    fig = tuning_plots.plot_steps_to_result(table_cells, ["lars"])
    [band] = [line for line in fig.axes[0].get_lines() if line.get_gid() == "miss-band"]
    assert len(band.get_xdata()) == 1
    assert "did not reach the target (reruns' median)" in [t.get_text() for t in fig.legends[0].texts]


def test_the_scaling_table_gives_steps_images_over_linear_and_each_arms_fit(tmp_path):
    from bench.analysis import ladder, tuning_plots

    # 1,000 training images, one evaluation an epoch, target 60: steps per epoch 20, 10 and 5 at batch 50, 100, 200
    curves = {50: [50, 61], 100: [50, 61], 200: [50, 55, 61]}  # images to target 2,000, 2,000, 3,000
    fast = {50: [50, 61], 100: [50, 61], 200: [50, 61]}  # perfect scaling: B_noise at infinity
    missed = {50: [50, 61], 100: [50, 61], 200: [50, 55, 58]}  # 200 never reaches it within its 15 steps
    for arm, by_batch in (("lars", curves), ("vrgd_lars", fast), ("lamb", missed)):
        for batch, val in by_batch.items():
            for seed in (1, 2, 3):
                sweep_run(tmp_path, arm, batch, "rerun", seed, val)
    study = results.load_study([tmp_path])
    table = scaling.scaling(study)
    rows = {(r[0], r[1]): Row(r, table.columns) for r in table.rows}
    assert rows[("LARS", 200)]["images / linear"].value == pytest.approx(1.5)
    assert rows[("LARS", 200)]["steps to result (reruns' median [≥ 95% or min-max])"].value == 15
    fits = scaling.ladder_fits(cells.cells(study))
    assert rows[("VRGD-LARS", 50)]["critical batch [95%]"].startswith("above ")  # linear: open above
    assert math.isfinite(fits["lamb"].b_noise)  # the miss at 200 (a lower bound at 15 steps) bends the curve
    for arm in ("lars", "lamb"):
        assert rows[(display(arm), 50)]["critical batch [95%]"] == ladder.interval_text(*fits[arm].critical)
    ax = tuning_plots.plot_steps_to_result(cells.cells(study), ["lars", "vrgd_lars", "lamb"]).axes[0]
    arrows = [a for a in ax.texts if a.arrow_patch is not None]
    assert len(arrows) == sum(math.isinf(f.high) for f in fits.values())  # an interval open above: an arrow
    dotted = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert dotted == [pytest.approx(f.critical[0]) for f in fits.values() if f.resolved]  # a point only if resolved
    fitted = {line.get_gid() for line in ax.get_lines() if (line.get_gid() or "").startswith(("fit-", "perfect-"))}
    assert fitted == {f"{kind}-{arm}" for arm in ("lars", "vrgd_lars", "lamb") for kind in ("fit", "perfect-scaling")}
    assert "Zhang et al. 2024" in " ".join(table.notes)
    assert table.notes[0].startswith("This sweep selected each cell's point on the final Top-1")  # not on steps


def test_a_steps_sweep_ranks_its_trials_by_steps_and_flags_a_tie_within_the_grid(tmp_path):
    tags = {"sweep": "s", "arm": "lars", "study": 0, "role": "trial", "select": "steps_to_target"}
    for trial, val in enumerate(([50, 61, 80], [61, 62, 63], [40, 59, 90])):  # target 60: steps 20, 10, never
        make_run(tmp_path, f"s-lars-b100-t{trial:02d}-s0", "lars", 100, 0, val, tags={**tags, "trial": trial})
    [c] = cells.cells(results.load_study([tmp_path])).to_dict("records")
    assert c["select_metric"] == "steps_to_target" and c["best_trial"] == "s-lars-b100-t01-s0"
    assert c["best_steps"] == 10 and c["runner_up_steps"] == 20
    assert c["near_tie"] is False  # 10 steps apart, one grid of 10: resolved
    assert "selected each cell's point on the final Top-1" not in " ".join(
        scaling.scaling(results.load_study([tmp_path])).notes
    )
    table = tuning.tuning(results.load_study([tmp_path]))
    [row] = [Row(r, table.columns) for r in table.rows]
    assert row["runner-up"].value == 20  # the runner-up's steps, what the selection ranked on
    notes = " ".join(table.notes)
    assert "select.metric steps_to_target" in notes and "select.metric top1" not in notes  # says how it chose


def test_a_steps_sweeps_tuning_table_gives_the_runner_ups_reruns_steps(tmp_path):
    """Whether a near-tie selection mattered, in the figure the sweep selected on: the runner-up's reruns' steps."""
    tags = {"sweep": "s", "arm": "lars", "study": 0, "select": "steps_to_target"}
    for trial, hit in ((0, 2), (1, 3)):  # one evaluation an epoch, 10 steps at batch 100: 20 and 30 steps
        make_run(
            tmp_path,
            f"s-lars-b100-t0{trial}",
            "lars",
            100,
            0,
            [50] * (hit - 1) + [61],
            tags=tags | {"role": "trial", "trial": trial},
        )
    for seed, (best, second) in enumerate(((2, 3), (2, 5)), 1):
        for name, role, hit in (("best", "rerun", best), ("top2", "rerun_top", second)):
            run_tags = tags | {"role": role, "trial": 0 if role == "rerun" else 1}
            make_run(
                tmp_path, f"s-lars-b100-{name}-seed{seed}", "lars", 100, seed, [50] * (hit - 1) + [61], tags=run_tags
            )
    table = tuning.tuning(results.load_study([tmp_path]))
    [row] = [Row(r, table.columns) for r in table.rows]
    assert row["runner-up steps to target (reruns)"].value == pytest.approx(40)  # 30 and 50 steps
    assert row["steps to target (reruns)"].value == pytest.approx(20)
    assert "2/2 reached" in row["runner-up steps to target (reruns)"].note


def test_a_steps_sweep_breaks_ties_on_val_top1_even_when_its_trials_held_images_out(tmp_path):
    """select.metric steps_to_target is read on the validation curve (the sweep accepts no other split): the table
    ranks and reports the val Top-1, as the sweep did, not the holdout's."""
    tags = {"sweep": "s", "arm": "lars", "study": 0, "role": "trial", "select": "steps_to_target"}
    # both reach 60 at step 20; val ranks t01 first, the holdout would rank t00 first
    for trial, (val, held) in enumerate((([50, 61], [50, 70]), ([50, 64], [50, 65]))):
        make_run(
            tmp_path, f"s-lars-b100-t{trial:02d}-s0", "lars", 100, 0, val, holdout=held, tags={**tags, "trial": trial}
        )
    [c] = cells.cells(results.load_study([tmp_path])).to_dict("records")
    assert c["best_trial"] == "s-lars-b100-t01-s0" and c["best_selection_top1"] == 64
    notes = " ".join(tuning.tuning(results.load_study([tmp_path])).notes)
    assert "Selection used the validation set (its steps to the target" in notes and "held-out" not in notes


def test_a_steps_sweep_gets_a_speed_verdict_on_the_steps_ratio_and_no_top1_test(tmp_path):
    # one evaluation an epoch (10 steps at batch 100), target 60: VRGD-LARS reaches it at 10-20 steps, LARS at 30-40.
    # Each run stops at its first evaluation at the target, VRGD-LARS's at 65-66% and LARS's at 61%: a Top-1
    # "difference" of that crossing evaluation, which a Top-1 test would call significant, is no quality
    for batch in (100, 200):
        for arm, hits, final in (("vrgd_lars", [1, 1, 2, 1, 1], 65), ("lars", [3, 4, 3, 3, 4], 61)):
            tags = {"sweep": "s", "arm": arm, "trial": 0, "study": 0, "role": "trial", "select": "steps_to_target"}
            make_run(tmp_path, f"s-{arm}-b{batch}-t00", "lars", batch, 0, [50] * (hits[0] - 1) + [final], tags=tags)
            for seed, hit in enumerate(hits, 1):
                val = [50] * (hit - 1) + [final + seed % 2]
                rerun = {**tags, "role": "rerun"}
                make_run(tmp_path, f"s-{arm}-b{batch}-best-seed{seed}", "lars", batch, seed, val, tags=rerun)
    rows, table = verdict_rows(tmp_path)
    row = rows[(100, "VRGD-LARS", "LARS")]
    assert row["steps to target X / Y"].value == pytest.approx(10 / 30)
    assert row[-1].startswith("speed: VRGD-LARS faster (98.41% interval [")  # two batches: m = 2, 97.5% asked
    for column in ("val Top-1 X", "Δ val Top-1 (X − Y)", "p Holm", "Δ gap (X − Y)"):
        assert row[column].value is None or math.isnan(row[column].value), column
    assert "all (pooled)" not in {key[0] for key in rows}  # no average Top-1 difference either
    assert "select.metric steps_to_target" in " ".join(table.notes)
    assert not verdict.plan(results.load_study([tmp_path])).rows  # nothing to plan a Top-1 test on
    from bench.analysis import tuning_plots

    drawn = {path.stem for path in tuning_plots.plot_all(results.load_study([tmp_path]), tmp_path / "plots")}
    assert drawn == {"steps_to_result", "lr_sensitivity", "performance_profile"}  # no Top-1 or gap figure


def test_a_steps_to_target_sweep_that_decays_over_its_budget_is_warned(sweep_file):
    """One line for cosine (the base's default) under select steps_to_target; none for a constant lr after the
    warm-up, and none for a top1 sweep (its result is read at the end of the budget, where the decay ends)."""
    text = sweep_file.read_text() + "select: {split: validation, metric: steps_to_target}\n"
    path = write_recipe(sweep_file.with_name("steps.yaml"), text)
    spec, trials = load(path)
    said = sweep.schedule_warning(spec, trials)
    assert said.startswith("a steps-to-target sweep with schedule.decay cosine decays over its budget")
    assert "\n" not in said
    constant = write_recipe(
        sweep_file.with_name("constant.yaml"),
        text.replace("base: base.yaml\n", "base: base.yaml\nset: {schedule.decay: constant, eval.ema_epochs: 0.5}\n"),
    )
    assert sweep.schedule_warning(*load(constant)) is None
    assert sweep.schedule_warning(*load(sweep_file)) is None


LOCAL = SWEEP.replace("trials: 2\n", "trials: 2\nlocal: {steps: 1, extend: 1}\n")


def test_the_local_stage_steps_around_the_best_and_outward_from_an_edge(sweep_file):
    """lr x and ÷ sqrt 2 at the best trial's other keys (warm-up), named -up1/-down1 and tagged role local; one
    step further out only on a side whose outermost point is the best, at most `extend` times."""
    spec, trials = load(write_recipe(sweep_file, LOCAL))
    center = next(t for t in trials if t.arm == "lars")
    up, down = sweep.local_trials(spec, center, [1, -1])
    lr = center.point["optimizer.lr"]
    assert up.name == "tiny-lars-b32-up1" and down.name == "tiny-lars-b32-down1"
    assert up.recipe.optimizer.lr == pytest.approx(lr * math.sqrt(2), rel=1e-5)
    assert down.recipe.optimizer.lr == pytest.approx(lr / math.sqrt(2), rel=1e-5)
    assert up.recipe.schedule.warmup_epochs == center.recipe.schedule.warmup_epochs
    assert up.recipe.tags["role"] == "local" and up.recipe.tags["local_step"] == 1
    assert up.recipe.seed == center.recipe.seed == spec.trial_seed
    assert sweep.next_local_steps(spec, [center], []) == [-1, 1]
    assert sweep.next_local_steps(spec, [center, up, down], [-1, 1]) == []  # the centre stays best
    assert sweep.next_local_steps(spec, [up, center, down], [-1, 1]) == [2]  # the edge was best: step out
    [up2] = sweep.local_trials(spec, center, [2])
    assert up2.recipe.optimizer.lr == pytest.approx(lr * 2, rel=1e-5)
    assert sweep.next_local_steps(spec, [up2, up, center], [-1, 1, 2]) == []  # extend: 1 is spent
    assert sweep.next_local_steps(spec, [down, center], [-1, 1, 2]) == [-2]  # each side extends on its own
    [down2] = sweep.local_trials(spec, center, [-2])
    assert sweep.next_local_steps(spec, [down2, down], [-1, 1, 2, -2]) == []


@pytest.mark.parametrize(
    "local, words",
    [
        ("local: {key: schedule.warmup_epochs}", "local.key: schedule.warmup_epochs is not a log range of arms.sgd"),
        ("local: {factor: 1.0}", "local.factor"),
        ("local: {steps: 0}", "local.steps"),
    ],
)
def test_a_bad_local_stage_is_one_sentence(sweep_file, local, words, capsys):
    write_recipe(sweep_file, SWEEP + local + "\n")
    with pytest.raises(UserError, match=words.replace(".", r"\.")):
        sweep.load(sweep_file)


def test_the_tuning_table_shows_neighbours_edges_and_what_the_search_left_fixed(tmp_path):
    """A hand-made tree: at batch 64 the best trial has the largest lr tried (an edge, its neighbour only at another
    warm-up: '*'); at 128 the local stage tried lr x/÷ sqrt 2 at the best's warm-up, so the best is inside and its
    neighbours are exact. The space comes from s.sweep.yaml; VRGD's fixed gamma (its default) and k are printed."""
    (tmp_path / "s.sweep.yaml").write_text(
        "arms:\n  vrgd_lars:\n    space:\n      optimizer.lr: {low: 0.5, high: 8.0, scale: log, values: null}\n"
        "      schedule.warmup_epochs: {low: 0.0, high: 1.0, scale: linear, values: null}\n"
    )
    plan = {"batch": 64, "world_size": 1, "accum_steps": 8, "micro_batch": 8, "gsnr_groups": 8}
    points = {  # name -> (batch, role, lr, warm-up, holdout Top-1)
        "s-vrgd_lars-b64-t00": (64, "trial", 1.0, 0.5, 80.0),
        "s-vrgd_lars-b64-t01": (64, "trial", 4.0, 0.2, 82.0),
        "s-vrgd_lars-b128-t00": (128, "trial", 1.0, 0.5, 80.0),
        "s-vrgd_lars-b128-t01": (128, "trial", 4.0, 0.2, 82.0),
        "s-vrgd_lars-b128-up1": (128, "local", 5.65685, 0.2, 81.0),
        "s-vrgd_lars-b128-down1": (128, "local", 2.82843, 0.2, 79.5),
    }
    for name, (batch, role, lr, warmup, score) in points.items():
        make_run(
            tmp_path,
            name,
            "vrgd_lars",
            batch,
            0,
            [50, 70],
            holdout=[50, score],
            lr=lr,
            schedule={"warmup_epochs": warmup},
            tags={
                "sweep": "s",
                "arm": "vrgd_lars",
                "trial": int(name[-1]) if role == "trial" else 1,
                "study": 0,
                "role": role,
            },
            meta_extra={"holdout_size": 1000, "plan": {**plan, "batch": batch, "gsnr_groups": batch // 8}},
        )
    table = tuning.tuning(results.load_study([tmp_path]))
    rows = {r[0]: Row(r, table.columns) for r in table.rows}
    assert rows[64]["on the edge of the search"] == (
        "lr 4: the largest tried; range 0.5-8; warmup_epochs 0.2: the smallest tried; range 0-1"
    )
    assert rows[64]["lr neighbours (÷ · ×)"] == "÷4.00*: 80.00"
    assert rows[128]["on the edge of the search"] == "warmup_epochs 0.2: the smallest tried; range 0-1"  # lr inside
    assert rows[128]["lr neighbours (÷ · ×)"] == "÷1.41: 79.50 · ×1.41: 81.00"
    assert rows[128]["best lr"].value == 4.0  # the local points count as tried, not as the best
    assert rows[128]["BatchNorm batch, groups k"] == "BatchNorm batch auto, k 16 (8 images a group)"
    notes = " ".join(table.notes)
    assert "VRGD-LARS: " in notes and "gamma 0.1, " in notes and "No .sweep.yaml" not in notes
    (tmp_path / "s.sweep.yaml").unlink()
    table = tuning.tuning(results.load_study([tmp_path]))
    rows = {r[0]: Row(r, table.columns) for r in table.rows}
    assert rows[64]["on the edge of the search"].startswith("lr 4: the largest tried; warmup")  # no declared range
    assert "No .sweep.yaml beside the runs of s" in " ".join(table.notes)


@pytest.mark.slow
def test_a_tiny_sweep_with_a_local_stage_reruns_the_best_of_all_and_resumes_with_nothing_to_train(
    sweep_file, tmp_path, capsys
):
    """One arm, 2 trials, then lr x/÷ sqrt 2 around the better one (and one step further out where the best is the
    outermost point), then the rerun of the best over trials and local points; the same command again trains
    nothing. The sweep's space is written beside the runs."""
    text = LOCAL.replace("reruns: {seeds: [1, 2]}", "reruns: {seeds: [1]}").replace("epochs: 2}", "epochs: 1}")
    text = text[: text.index("  sgd:")] + text[text.index("  lars:") :]
    write_recipe(sweep_file, text)
    out = tmp_path / "results"
    runs, waiting, held = sweep.run_sweep(sweep_file, out, allow_dirty=True)
    assert waiting == [] and held == []
    local = [t for t in runs if t.role == "local"]
    assert {t.name for t in local} >= {"tiny-lars-b32-up1", "tiny-lars-b32-down1"} and len(local) <= 3
    ranked, _ = sweep.ranked_trials(
        [t for t in runs if t.role in ("trial", "local")],
        {t.name: sweep.finished_run(out, t.recipe) for t in runs},
        sweep.load(sweep_file),
    )
    [rerun] = [t for t in runs if t.role == "rerun"]
    assert rerun.recipe.optimizer.lr == ranked[("lars", 32)][0].recipe.optimizer.lr
    assert sweep.load(sweep_file).local.steps == 1
    assert (out / "tiny.sweep.yaml").is_file()
    capsys.readouterr()
    again, _, _ = sweep.run_sweep(sweep_file, out, allow_dirty=True)
    assert [t.name for t in again] == [t.name for t in runs]
    assert "run directory" not in capsys.readouterr().out  # nothing left to train
    assert len(results.load([out])) == len(runs)


@pytest.mark.slow
def test_list_says_what_the_sweep_would_start_now_and_when_it_is_complete(sweep_file, tmp_path, capsys):
    """--list's last line, read from the finished runs alone (sweep.next_runs): after the two trials, the cell's two
    local points (not the bound's three); once the sweep ran, that it is complete, though the bound still counts the
    extension its local stage did not need (a complete sweep whose bound said runs were left was taken for an
    unfinished one)."""
    out, names, held = held_local_points(sweep_file, tmp_path)
    spec = sweep.load(sweep_file)
    trials = sweep.expand(sweep_file, spec)
    assert sorted(t.name for t in sweep.next_runs(spec, trials, out)) == names
    capsys.readouterr()
    assert main(["sweep", str(sweep_file), "--out", str(out), "--list"]) == 0
    assert (
        capsys.readouterr()
        .out.rstrip()
        .endswith(
            f"next: 2 runs can start now (2 local points: {', '.join(sorted(names))}); more may follow as they finish"
        )
    )
    for claim in held:
        claim.release()
    runs, _, _ = sweep.run_sweep(sweep_file, out, allow_dirty=True)
    assert sweep.next_runs(spec, trials, out) == [] and [t.role for t in runs].count("rerun") == 1
    assert main(["sweep", str(sweep_file), "--out", str(out), "--list"]) == 0
    listed = capsys.readouterr().out.rstrip().splitlines()
    assert listed[-1].startswith("complete: every cell's trials, local stage and reruns have finished")
    if [t.role for t in runs].count("local") < 3:  # the bound counts the extension the cell did not take
        assert any("left: at most 1 run (0 trials, at most 1 local, at most 0 reruns)" in line for line in listed)


def held_local_points(sweep_file, tmp_path):
    """LARS at batch 32 after its two trials, its two local points held by another process: (out, names, claims)."""
    text = LOCAL.replace("reruns: {seeds: [1, 2]}", "reruns: {seeds: [1]}").replace("epochs: 2}", "epochs: 1}")
    write_recipe(sweep_file, text[: text.index("  sgd:")] + text[text.index("  lars:") :])
    out = tmp_path / "results"
    sweep.run_sweep(sweep_file, out, only="-t0", allow_dirty=True)  # the two quasi-random trials
    names = ["tiny-lars-b32-down1", "tiny-lars-b32-up1"]
    held = [sweep.Claim(out, name) for name in names]
    assert all(c.take() for c in held)
    return out, names, held


@pytest.mark.slow
def test_a_held_local_point_is_named_and_wait_goes_on_once_it_is_let_go(sweep_file, tmp_path, capsys, monkeypatch):
    """Another process holds the local points: a process without --wait ends naming them held (the holder goes
    on and writes the tables); with --until due before its next check, --wait stops as --until does; with --wait
    it checks again every WAIT_S seconds and, once they are let go, trains them and the rerun."""
    out, names, held = held_local_points(sweep_file, tmp_path)
    _, waiting, others = sweep.run_sweep(sweep_file, out, allow_dirty=True)
    assert sorted(others) == names and waiting == ["lars at batch 32"]
    with pytest.raises(sweep.Until, match="^0 run") as stopped:
        sweep.run_sweep(sweep_file, out, allow_dirty=True, until=time.time() + sweep.WAIT_S / 2, wait=True)
    assert sorted(stopped.value.held) == names  # the wait would pass the time, not a run's start
    sleeps = []

    def let_go(seconds):  # at the second check
        sleeps.append(seconds)
        for claim in held if len(sleeps) == 2 else ():
            claim.release()

    monkeypatch.setattr(sweep, "time", SimpleNamespace(time=time.time, sleep=let_go))
    capsys.readouterr()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)  # bars are drawn on a terminal only
    runs, waiting, others = sweep.run_sweep(sweep_file, out, allow_dirty=True, wait=True)
    assert sleeps == [sweep.WAIT_S] * 2 and waiting == [] and others == []
    err = capsys.readouterr().err
    line = f"waiting for 2 run(s) other processes hold ({', '.join(sorted(names))})"
    assert err.count(line) == 1  # named once while the same runs are held, not once a check
    assert "sweep tiny" in err[: err.index(line)] and "sweep tiny" not in err[err.index(line) :]  # no bars redrawn
    assert {t.name for t in runs} >= set(names) and [t.role for t in runs].count("rerun") == 1
    assert all(sweep.finished_run(out, t.recipe) for t in runs)
    cmd = ["sweep", str(sweep_file), "--out", str(out), "--plots", str(tmp_path / "plots"), "--allow-dirty"]
    assert main([*cmd, "--wait"]) == 0 and (out / "verdict.md").is_file()  # nothing held: it writes the tables


@pytest.mark.slow
def test_wait_names_the_held_runs_again_when_they_change(sweep_file, tmp_path, capsys, monkeypatch):
    """--wait prints its waiting line when the set of held runs changes (2 held, then 1 after the first check),
    once for each set, not once a check."""
    out, names, held = held_local_points(sweep_file, tmp_path)
    sleeps = []

    def let_go(seconds):  # one claim at each check
        sleeps.append(seconds)
        held[len(sleeps) - 1].release()

    monkeypatch.setattr(sweep, "time", SimpleNamespace(time=time.time, sleep=let_go))
    capsys.readouterr()
    sweep.run_sweep(sweep_file, out, allow_dirty=True, wait=True)
    err = capsys.readouterr().err
    lines = [
        f"waiting for 2 run(s) other processes hold ({', '.join(names)})",
        f"waiting for 1 run(s) other processes hold ({names[1]})",
    ]
    assert sleeps == [sweep.WAIT_S] * 2 and [err.count(line) for line in lines] == [1, 1]
    assert err.index(lines[0]) < err.index(lines[1])


@pytest.mark.slow
def test_wait_goes_on_at_once_when_what_others_held_finished_during_the_pass(sweep_file, tmp_path, monkeypatch):
    """The other process finishes the local points it held while this one's pass goes on: their cell was left
    waiting in that pass, so --wait starts another pass at once (no sleep) and trains the cell's next round and its
    rerun, rather than ending with the cell waiting."""
    text = LOCAL.replace("reruns: {seeds: [1, 2]}", "reruns: {seeds: [1]}").replace("epochs: 2}", "epochs: 1}")
    write_recipe(sweep_file, text[: text.index("  sgd:")] + text[text.index("  lars:") :])
    out = tmp_path / "results"
    sweep.run_sweep(sweep_file, out, only="-t0", allow_dirty=True)
    held = [sweep.Claim(out, f"tiny-lars-b32-{side}1") for side in ("down", "up")]
    assert all(c.take() for c in held)
    real, sleeps = sweep.run_trials, []

    def the_other_finishes_them(trials, results, spec, bar, progress):
        done, others = real(trials, results, spec, bar, progress)
        if others and held:  # the other process trains what it held, then lets go, before this pass ends
            for claim in held:
                claim.release()
            held.clear()
            real(others, results, spec, bar, sweep.Progress())
        return done, others

    monkeypatch.setattr(sweep, "run_trials", the_other_finishes_them)
    monkeypatch.setattr(sweep, "time", SimpleNamespace(time=time.time, sleep=sleeps.append))
    runs, waiting, others = sweep.run_sweep(sweep_file, out, allow_dirty=True, wait=True)
    assert sleeps == [] and waiting == [] and others == []
    assert [t.role for t in runs].count("rerun") == 1 and all(sweep.finished_run(out, t.recipe) for t in runs)


PAIRED = """
base: base.yaml
set: {model.name: test_resnet, epochs: 1, micro_batch: 16}
batches: [32]
arms:
  lars:
    set: {optimizer.name: lars}
    space: {optimizer.lr: {values: [1.0]}}
  vrgd_lars:
    set: {optimizer.name: vrgd_lars}
    space: {optimizer.lr: {values: [1.0]}}
search: grid
budget: {epochs: 1}
select: {split: validation}
reruns: {seeds: [1, 2, 3]}
"""


@pytest.mark.slow
def test_bench_run_of_a_sweep_file_runs_it_and_ends_with_the_verdict_in_words(
    tmp_path, tiny_dataset, capsys, monkeypatch
):
    """The main job's shape (recipes/demo.yaml): `bench run` of a sweep file runs the sweep (one lr per arm, three
    paired seeds) and ends as `bench sweep` does, with the verdict's claims in words and the paths of its table and
    the comparison figure; the options of one recipe's run are refused in one line, before anything runs."""
    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)).replace("holdout: 32", "holdout: 0"))
    path = write_recipe(tmp_path / "paired.yaml", PAIRED)
    assert main(["run", str(path), "--set", "epochs=2"]) == 2
    assert capsys.readouterr().err == (
        f"bench: error: {path}: a sweep file, which takes no --set (an option of one recipe's run); "
        f"`bench sweep {path} --help` lists a sweep's options\n"
    )
    out = tmp_path / "mine"
    monkeypatch.chdir(tmp_path)  # the figures go to plots/<the results folder's name> under the working directory
    assert main(["run", str(path), "--out", str(out)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("paired-")) == sorted(
        [f"paired-{a}-b32-t00" for a in ("lars", "vrgd_lars")]
        + [f"paired-{a}-b32-best-seed{s}" for a in ("lars", "vrgd_lars") for s in (1, 2, 3)]
    )
    verdict = pd.read_csv(out / "verdict.csv")
    [row] = verdict.to_dict("records")
    assert (row["X"], row["Y"], row["family"]) == ("VRGD-LARS", "LARS", "primary")
    claims = [line for line in said if line.startswith("- VRGD-LARS − LARS val Top-1 at batch 32")]
    assert len(claims) == 1 and claims[0].endswith(".")  # the table's claim: its interval, then what it resolved
    if row["verdict"].startswith("within noise"):  # what a reader takes away: nothing resolved, and how little could be
        mde = float(row["MDE 80% at α/m [95%]"])
        assert f"within noise (could detect ≥ {mde:.1f} pp)" in claims[0]
    else:
        assert row["verdict"] in claims[0]
    assert said[-2:] == [f"verdict table: {out / 'verdict.md'}", "main figure: plots/mine/tuned_top1_vs_batch.png"]
    assert (tmp_path / "plots" / "mine" / "tuned_top1_vs_batch.png").is_file()


def test_the_imagenet_kit_validates_with_mlperfs_schedule_and_epochs_by_batch(capsys):
    """recipes/sweeps/imagenet-32k-64k.yaml and the poly(2) MLPerf recipe variants: each batch's epochs, warm-up
    and lr are the RCP table's row (epochs: the upper end of its range), the decay MLPerf's poly(2) to 1e-4, the
    loader DALI; `bench validate` reads the sweep file as a sweep."""
    recipes = Path(__file__).parents[1] / "recipes"
    rcp = pd.read_csv(recipes.parent / "results/reference/mlperf_resnet50_rcp.csv", comment="#").set_index("batch")
    path = recipes / "sweeps/imagenet-32k-64k.yaml"
    assert main(["validate", "--schema-only", str(path)]) == 0  # no ImageNet here: its data unchecked
    assert "ok (sweep imagenet-32k-64k: 256 trials, arms lars, vrgd_lars, nesterov, adamw" in capsys.readouterr().out
    spec, trials = load(path)
    assert (
        spec.select.split == "holdout"
        and spec.reruns.matched == [("vrgd_lars", "lars")]
        and not sweep.search_warnings(spec)
    )
    assert {(t.batch, t.recipe.epochs) for t in trials} == {(b, rcp.epochs_max[b]) for b in (32768, 65536)}
    assert {t.recipe.schedule.decay for t in trials} == {"poly"} and {t.recipe.data.loader for t in trials} == {"dali"}
    for name in ("lars", "vrgd_lars"):
        for batch, size in ((32768, "32k"), (65536, "64k")):
            r = recipe_mod.load(recipes / f"paper/imagenet/{name}-{size}-mlperf.yaml")
            row = rcp.loc[batch]
            assert (r.global_batch, r.epochs, r.schedule.warmup_epochs) == (batch, row.epochs_max, row.warmup_epochs)
            assert (r.optimizer.lr, r.optimizer.momentum, r.weight_decay) == (row.lr, row.momentum, row.weight_decay)
            assert (r.schedule.decay, r.schedule.power, r.schedule.end_lr, r.data.loader) == ("poly", 2, 1e-4, "dali")
    for path in (recipes / "paper/imagenet").glob("*.yaml"):
        assert "results/reference/mlperf_resnet50_rcp.csv" in path.read_text(), path


def test_no_progress_bar_where_output_is_no_terminal_but_a_line_a_trial(sweep_file, tmp_path):
    """Output to a file or a pipe (tqdm's non-terminal rule): no bar redrawn between the log lines, a line naming
    each trial as it starts, and the evaluation lines as ever."""
    done = cli("sweep", str(sweep_file), "--out", str(tmp_path / "out"), "--only", "sgd-b32-t00", "--allow-dirty")
    assert done.returncode == 0, done.stderr
    assert "sweep: training tiny-sgd-b32-t00\n" in done.stderr and "val top1" in done.stderr
    assert "\r" not in done.stderr and "trial/s" not in done.stderr and "step/s" not in done.stderr


def test_titles_give_epochs_as_the_budget_meant_them():
    """Whole steps move a run's epochs off its budget (4.9984, 3.0016, 7.9872 for 5, 3 and 8 at these batches of
    17,000 images): the title reads the shortest number within one step, and keeps digits a step resolves."""
    import pandas as pd

    from bench.analysis.cells import epochs_text

    cells = pd.DataFrame(
        {"planned_epochs": [4.9984, 3.0016, 7.9872, 1.9275], "global_batch": [64, 256, 2048, 64]}
    ).assign(planned_images=lambda c: c["planned_epochs"] * 17_000)
    assert [epochs_text(e, cells) for e in cells["planned_epochs"]] == ["5", "3", "8", "1.93"]
    one = pd.DataFrame({"planned_epochs": [1.9275] * 2, "global_batch": [8, 1024], "planned_images": [32_767.5] * 2})
    assert epochs_text(1.9275, one) == "1.9275"  # a step of 8 images resolves four decimals: the smallest step rules
