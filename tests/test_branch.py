"""`bench branch`: the criterion (a synthetic images / linear curve with a known critical batch is recovered), the
state a branch carries (bitwise: a branch at k = 1 continues the reference exactly) and bad input (one sentence,
exit code 2)."""

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from bench.analysis import branching
from bench.analysis import results as results_mod
from bench.engine import checkpoint
from tests.conftest import RECIPES, cli, write_recipe
from tests.helpers import family

BASE = """
model: {name: resnet8_cifar}
data: {dataset: folder, path: DATA, image_size: 24, crop_scale_min: 0.35, workers: 0, eval_batch: 64}
global_batch: 16
micro_batch: 16
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
schedule: {warmup_epochs: 0.2, decay: constant}
epochs: 1
eval: {every_epochs: 0.1, ema_epochs: 0.5, stop_at_chance: 0}
target_top1: 90
engine: {threads: 1}  # bitwise repeats hold for one thread count
"""  # 160 training images: an evaluation every 16 images, every step of the reference

BRANCH = """
base: base.yaml
b0: 16
points: [64, 128]
k: [1, 2]
deltas: [32]
metric: train_loss
"""  # branches run 2 x 32 images: the one at k = 1 from 64 ends at the reference's second point, 128


# --- the criterion ------------------------------------------------------------------------------------------


def test_a_synthetic_curve_s_known_critical_batch_is_recovered():
    """images / linear 1 up to 2 x B0, then doubling with each doubling: log-log linear between 2 and 4 x B0, so
    the crossing of 1.2 is at 2 x 2^(log 1.2 / log 2) x B0 = 2.4 x B0 exactly."""
    b0, ks = 64, [2, 4, 8, 16]
    ratios = [1.0, 2.0, 4.0, 8.0]
    assert branching.critical_batch(b0, ks, ratios) == pytest.approx(2.4 * b0)
    # the same through the branches' curves: a reference that gains one point per 100 images, branches that gain
    # it `ratio` times slower, read at a window of 1,000 images from 5,000
    point, delta = 5000, 1000
    ref_x = np.arange(0, 9001, 250.0)
    ref_y = 50 + ref_x / 100
    target = branching.value_at(ref_x, ref_y, point + delta)
    start = branching.value_at(ref_x, ref_y, point)
    found = []
    for ratio in ratios:
        x = point + np.arange(250, 2 * delta + 1, 250.0)
        y = start + (x - point) / (100 * ratio)
        found.append(branching.images_needed(x, y, point, start, target, False, 2 * delta) / delta)
    assert found[:2] == pytest.approx([1.0, 2.0]) and found[2:] == [math.inf, math.inf]  # past the cap 2Δ: a miss
    assert branching.critical_batch(b0, ks, found) == pytest.approx(2.4 * b0)


def test_no_batch_past_the_rule_lies_above_the_branches_and_a_miss_at_the_first_k_puts_it_at_b0():
    assert branching.critical_batch(64, [2, 4], [1.0, 1.1]) == math.inf
    assert branching.critical_batch(64, [2, 4], [math.inf, math.inf]) == 64
    # a lower-is-better metric (the training loss) crossing between two evaluations
    assert branching.images_needed([10, 20], [2.0, 1.0], 0, 3.0, 1.5, True, 100) == pytest.approx(15)


# --- the state carried, bitwise -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def branched(tmp_path_factory, tiny_dataset):
    folder = tmp_path_factory.mktemp("branch")
    write_recipe(folder / "base.yaml", BASE.replace("DATA", str(tiny_dataset)))
    spec = write_recipe(folder / "tiny.yaml", BRANCH)
    results = folder / "results"
    done = cli("branch", str(spec), "--out", str(results), "--plots", str(folder / "plots"))
    assert done.returncode == 0, done.stderr
    assert (folder / "plots" / "critical_batch_along_training.png").is_file() and "1 figure(s)" in done.stdout
    return spec, results, done.stdout


def _run(results, name):
    [run] = [p for p in (results / name).iterdir() if p.is_dir()]
    return run


def test_a_branch_at_k_1_continues_the_reference_bit_for_bit(branched):
    spec, results, out = branched
    reference = _run(results, "tiny-sgd-ref-b16")
    branch = _run(results, "tiny-sgd-at64-k1-seed0")
    kept = checkpoint.kept(reference)
    assert sorted(kept) == [64, 128]
    got = torch.load(checkpoint.saved(branch)[-1], weights_only=False)
    want = torch.load(kept[128], weights_only=False)
    assert got["progress"]["images"] == want["progress"]["images"] == 128
    assert got["progress"]["step"] == want["progress"]["step"] == 8
    for part in ("model", "ema"):
        assert got[part].keys() == want[part].keys()
        for name, tensor in want[part].items():
            assert torch.equal(got[part][name], tensor), (part, name)
    momenta = [s["momentum_buffer"] for s in want["optimizer"]["state"].values()]
    assert momenta and all(
        torch.equal(g["momentum_buffer"], w) for g, w in zip(got["optimizer"]["state"].values(), momenta)
    )
    # its evaluations are the reference's at the same images seen, every metric but wall-clock time
    ref = pd.read_csv(reference / "metrics.csv").drop(columns=["train_time_s"])
    mine = pd.read_csv(branch / "metrics.csv").drop(columns=["train_time_s"])
    pd.testing.assert_frame_equal(mine, ref[ref["images_seen"].isin(mine["images_seen"])].reset_index(drop=True))


def test_the_table_reads_the_branches_and_a_rerun_skips_finished_ones(branched):
    spec, results, out = branched
    assert "| arm" in out and "critical batch" in out
    assert (results / "branching.md").read_text() in out and (results / "branching.csv").is_file()
    [w] = [w for w in branching.windows(results_mod.load_study([results])) if w.point == 64]
    assert w.ratios[1][0] <= 1.0  # the reference continued reaches its own value no later than Δ
    assert set(w.ratios) == {1, 2} and w.b0 == 16
    again = cli("branch", str(spec), "--out", str(results), "--plots", str(results.parent / "plots"))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped (finished before)") == 1 + 2 * 2


def test_a_reference_without_its_checkpoint_is_one_sentence(branched, tmp_path):
    spec, results, _ = branched
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    checkpoint.kept_file(_run(copy, "tiny-sgd-ref-b16"), 128).unlink()
    done = cli("branch", str(spec), "--out", str(copy), "--plots", str(tmp_path / "plots"))
    assert done.returncode == 2
    assert "has no checkpoint at 128 images" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# --- bad input ----------------------------------------------------------------------------------------------


def test_a_tree_from_another_processor_is_not_added_to(branched, tmp_path):
    """A branch is read against its reference: both from one kernel platform, the processor included (the same
    AVX2 path on an Intel Xeon and an AMD EPYC differs from the first step). Nothing is trained when refused."""
    spec, results, _ = branched
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    reference = _run(copy, "tiny-sgd-ref-b16")
    meta = json.loads((reference / "meta.json").read_text())
    (reference / "meta.json").write_text(json.dumps({**meta, "cpu_model": "Other CPU"}))
    shutil.rmtree(copy / "tiny-sgd-at64-k2-seed0")
    done = cli("branch", str(spec), "--out", str(copy), "--plots", str(tmp_path / "plots"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "on Other CPU" in done.stderr and "--allow-mixed-kernels" in done.stderr
    assert not (copy / "tiny-sgd-at64-k2-seed0").exists()


@pytest.mark.parametrize(
    "change, said",
    [
        ({"k": "[1, 3]"}, "k: 3 is not a power of two"),
        ({"points": "[64, 100]"}, "points: 100 images is not a whole number of steps at the largest branch batch"),
        ({"deltas": "[24]"}, "deltas: 24 images is not a whole number of steps"),
        ({"window": "32"}, "unknown key 'window'"),
        ({"metric": "top5"}, "key 'metric'"),
    ],
)
def test_bad_branch_files_are_one_sentence_and_exit_2(tmp_path, tiny_dataset, change, said):
    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)))
    text = BRANCH + "".join(f"{key}: {value}\n" for key, value in change.items() if key not in BRANCH)
    for key, value in change.items():
        text = "\n".join(f"{key}: {value}" if line.startswith(f"{key}:") else line for line in text.splitlines())
    spec = write_recipe(tmp_path / "bad.yaml", text + "\n")
    done = cli("branch", str(spec), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before any run


def test_a_decaying_schedule_and_an_optimizer_of_no_known_kind_are_refused(tmp_path, tiny_dataset):
    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)).replace("constant", "cosine"))
    spec = write_recipe(tmp_path / "b.yaml", BRANCH)
    done = cli("branch", str(spec), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "set schedule.decay: constant" in done.stderr
    write_recipe(tmp_path / "base.yaml", BASE.replace("DATA", str(tiny_dataset)))
    spec = write_recipe(tmp_path / "m.yaml", BRANCH + "arms: {muon: {set: {optimizer: {name: muon, lr: 0.01}}}}\n")
    done = cli("branch", str(spec), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "key 'arms.muon.lr_rule': required for muon" in done.stderr


def test_every_shipped_branch_file_lists_its_runs(tmp_path, monkeypatch):
    """recipes/branch/*.yaml against a stand-in of the embedded data (the same layout, by the same converter): every
    reference and branch recipe builds, with the lr its rule gives."""
    monkeypatch.chdir(tmp_path)
    source = family(tmp_path / "fashion-mnist-400", train_per_class=400)
    assert cli("data", "idx", str(source), "--out", "data/fashion-mnist-20k").returncode == 0
    files = sorted((RECIPES / "branch").glob("*.yaml"))
    assert files
    listed = {}
    for path in files:
        done = cli("branch", str(path), "--list")
        assert done.returncode == 0, done.stderr
        assert "-ref-b" in done.stdout and "-k2-seed" in done.stdout
        checked = cli("validate", str(path))
        assert checked.returncode == 0 and "ok (branch file" in checked.stdout, checked.stderr
        listed[path.name] = done.stdout
    assert "branch-example-lars-at10240-k8-seed0: global_batch 512, lr 15.6" in listed["example.yaml"]  # 1.95 x 8
    # the field file declares lr_rule sqrt for LARS: 1.95098 x sqrt(16)
    assert "branch-field-lars-at8192-k16-seed0: global_batch 1024, lr 7.80392" in listed["field.yaml"]


def test_the_seeds_range_brackets_the_median_s_critical_batch():
    """Two seeds crossing between different k's: each seed's own crossing makes the range, the seeds' median
    images / linear the estimate inside it."""
    w = branching.Window(
        arm="lars",
        optimizer="lars",
        b0=64,
        point=1024,
        delta=512,
        metric="val_top1",
        reference_top1=50.0,
        target=55.0,
        ratios={2: {0: 1.0, 1: 1.0}, 4: {0: 2.0, 1: 1.1}, 8: {0: 4.0, 1: 4.0}},
    )
    low, high = w.seed_range()
    assert low == pytest.approx(1.2 * 128)  # seed 0: log-log between 1 at 128 and 2 at 256
    assert high == pytest.approx(256 * 2 ** (math.log(1.2 / 1.1) / math.log(4 / 1.1)))  # seed 1: between 256 and 512
    assert low < w.critical() < high


def test_bench_run_of_a_branch_file_points_to_bench_branch():
    path = RECIPES / "branch" / "example.yaml"
    done = cli("run", str(path))
    assert done.returncode == 2 and f"`bench branch {path}` runs it" in done.stderr


def test_a_branch_still_running_is_not_read_and_its_window_waits(branched, tmp_path):
    """A branch whose run has not finished has not yet reached what it will: the table leaves it out and reads no
    critical batch for its window ('waiting for branches'), where a miss would have read as a critical batch."""
    import json
    import shutil

    _, results, _ = branched
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    meta = _run(copy, "tiny-sgd-at64-k2-seed0") / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "status": "running"}))
    found = branching.windows(results_mod.load_study([copy]))
    [w] = [w for w in found if w.point == 64]
    assert w.waiting and 2 not in w.ratios and math.isnan(w.critical()) and w.seed_range() is None
    assert not any(other.waiting for other in found if other.point != 64)
    table = branching.branching(results_mod.load_study([copy]))
    assert any("waiting for branches" in str(c) for row in table.rows for c in row)


def test_a_window_past_the_references_curve_reads_no_critical_batch():
    """A window that ends where the reference's evaluations on its usual images stop (past the target they use
    every image, eval.curve_images) has no value to reach: no critical batch, and the table says why (not ∞)."""
    w = branching.Window("lars", "lars", 64, 24576, 8192, "val_top1", 78.2, math.nan, {2: {0: math.nan, 1: math.nan}})
    assert not w.readable and math.isnan(w.critical()) and w.seed_range() is None
    assert branching._why_none(w) == "the reference's curve ends before the window's end"


def test_a_recipe_given_as_a_branch_file_is_one_sentence_saying_how_to_run_it():
    done = cli("branch", str(RECIPES / "demo-sgd.yaml"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "demo-sgd.yaml: a recipe, not a branch file" in done.stderr and "bench run" in done.stderr
