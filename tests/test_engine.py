"""The large-batch engine: batch plans, equivalence across ranks and micro-batches, launch."""

import hashlib
import json
import math
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench import recipe as recipe_mod
from bench.engine import distributed
from bench.engine.plan import make_plan
from bench.engine.train import Trainer
from bench.errors import UserError
from bench.rundir import event_lines
from tests.conftest import CHECKOUT_FILES, RECIPES, cli, git, write_recipe
from tests.helpers import EQUIV, equiv_recipe, params_after

PLANS = [
    # (global_batch, micro_batch, world, gsnr_groups, cap) -> (accum_steps, micro_batch, gsnr_groups)
    ((256, "auto", 1, None, 256), (1, 256, 1)),
    ((1024, "auto", 1, None, 256), (4, 256, 4)),
    ((1024, "auto", 8, None, 256), (1, 128, 8)),
    ((98304, "auto", 1, None, 256), (384, 256, 384)),
    ((98304, "auto", 512, None, 256), (1, 192, 512)),
    ((98304, 64, 8, 32, 256), (192, 64, 32)),
    ((2048, "auto", 1, 32, 256), (32, 64, 32)),  # 32 groups of 64 images: micro-batch capped by the group
    ((2048, "auto", 8, 64, 100), (8, 32, 64)),  # 8 groups of 32 images per rank
    ((2048, "auto", 8, 64, 16), (16, 16, 64)),  # ... each group 2 micro-batches under cap 16
    ((1000, "auto", 1, None, 256), (4, 250, 4)),  # largest divisor of 1000 not above 256
]


@pytest.mark.parametrize("args,want", PLANS)
def test_plan(args, want):
    plan = make_plan(*args)
    assert (plan.accum_steps, plan.micro_batch, plan.gsnr_groups) == want
    assert plan.world_size * plan.accum_steps * plan.micro_batch == plan.batch
    assert plan.gsnr_groups * plan.micro_per_group == plan.world_size * plan.accum_steps


@pytest.mark.parametrize(
    "args,words",
    [
        ((100, "auto", 3, None, 256), ["global_batch 100", "3 ranks"]),
        ((96, 20, 1, None, 256), ["micro_batch 20", "per-rank batch 96"]),
        ((96, "auto", 4, 6, 256), ["gsnr_groups 6", "4 ranks"]),
        ((96, "auto", 2, 64, 256), ["gsnr_groups 64", "equal groups"]),
        ((96, 16, 1, 12, 256), ["micro_batch 16", "group of 8 images"]),
        ((32768, 512, 1, 128, 256), ["micro_batch 512 does not divide the group of 256 images", "over 1 rank)"]),
    ],
)
def test_impossible_plans_name_the_numbers(args, words):
    with pytest.raises(UserError) as e:
        make_plan(*args)
    assert all(w in str(e.value) for w in words)


# The lrs are those the float32 test needed before it ran in float64 (at larger ones this net, BatchNorm
# over 4 images, amplifies float32 rounding to 1e-4 in 3 steps); in float64 they only keep the steps sane.
OPTIMIZERS = [("sgd", 0.2), ("lars", 2.0), ("vrgd_lars", 2.0), ("adascale_sgd", 0.005), ("simigrad_lars", 2.0)]


def _max_diff(a: dict, b: dict) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def float64_steps(tmp_path_factory, tiny_dataset):
    """Each of OPTIMIZERS' recipe in float64, its initial parameters, and the parameters 1 process x 8
    micro-batches reaches (the reference the 2- and 4-rank plans are held to)."""
    folder = tmp_path_factory.mktemp("float64")
    paths = [equiv_recipe(folder, tiny_dataset, opt, lr, "fp64", "resnet8_cifar") for opt, lr in OPTIMIZERS]
    initial = Trainer(recipe_mod.load(paths[0]), distributed.Dist(0, 1, 0, torch.device("cpu"))).model
    return folder, paths, dict(initial.named_parameters()), params_after(folder, paths, 1)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4], ids=["2x4", "4x2"])
def test_same_parameters_for_1x8_2x4_4x2_in_float64(float64_steps, world):
    """1 process x 8 micro-batches, 2 x 4 and 4 x 2 take the same steps (gloo, CPU), for every way the
    engine combines gradients: DDP's all-reduce (sgd, lars), the optimizer's own (vrgd_lars), AdaScale's
    gain and SimiGrad's halves. In float64 the different summation orders differ by rounding near 1e-16,
    which BatchNorm over 4 images amplifies to about 1e-13 in 3 steps: a wrong combination is off by far
    more than the tolerance, and rounding can never reach it. bench's ResNet-8 (BatchNorm in every block, as
    resnet10t; 60x fewer parameters, and the spawned ranks import no timm): float64 convolutions on the CPU take
    the slow path, and the question is how gradients are combined, not which model makes them."""
    folder, paths, initial, references = float64_steps
    for (opt, _), reference in zip(OPTIMIZERS, references):
        assert all(p.dtype == torch.float64 for p in reference.values())
        moved = max((reference[k] - p.double()).abs().max().item() for k, p in initial.items())
        assert moved > 1e-3, f"{opt}: the steps did nothing"
    for (opt, _), got, want in zip(OPTIMIZERS, params_after(folder, paths, world), references):
        for name in want:
            torch.testing.assert_close(
                got[name], want[name], rtol=1e-9, atol=1e-10, msg=f"{opt}: {name} at world {world}"
            )


@pytest.mark.slow
def test_every_rank_holds_the_same_batchnorm_statistics_after_each_step(tmp_path, tiny_dataset):
    """Each rank's micro-batches move its own running statistics; they are averaged after every step, so 2 ranks
    hold one model (the one they evaluate together and rank 0 checkpoints; without it 2 ranks reported val Top-1
    48.00 while their checkpoint evaluated to 47.33). They are not one process's: 2 x 4 moves each rank's 4 times
    a step, 1 x 8 its 8 times (BatchNorm's momentum acts per forward), docs/cluster.md."""
    path = equiv_recipe(tmp_path, tiny_dataset, "sgd", 0.2, "fp64", "resnet8_cifar")
    params_after(tmp_path, [path], 2)
    rank0, rank1 = (torch.load(tmp_path / f"{path.stem}-2-3.pt.buffers{r}") for r in (0, 1))
    running = [k for k in rank0 if k.endswith(("running_mean", "running_var"))]
    assert running and all(torch.equal(rank0[k], rank1[k]) for k in rank0)  # bitwise: one model
    assert all((rank0[k] != 0).any() and (rank0[k] != 1).any() for k in running)  # the statistics moved


@pytest.mark.slow
def test_float32_step_of_2x4_differs_from_1x8_by_less_than_float32_rounding(tmp_path, tiny_dataset):
    """One float32 step on 2 x 4 lies closer to 1 x 8's than 1 x 8's lies to the exact (float64) step: the
    plans differ only in the order of the gradient sums, a part of float32's rounding, measured in the same
    run. Measured at seeds 0-3: plans 1.5e-8..1.2e-7 apart, float32 rounding 6e-7..1.3e-6 (ratio <= 0.19),
    the step itself 0.06..0.17, so a wrong combination (a sum for a mean, a lost micro-batch) fails by far.
    One step: over several, BatchNorm over 4 images amplifies any rounding chaotically (a half-ulp nudge of
    the initial weights moved them by 2e-6..9e-3 after 3 steps), which is what made the old float32
    three-step test fail at 24 px (1.19e-4 against 1e-4)."""
    fp32, fp64 = (equiv_recipe(tmp_path, tiny_dataset, "sgd", 0.2, p) for p in ("fp32", "fp64"))
    one32, one64 = params_after(tmp_path, [fp32, fp64], 1, steps=1)
    [two32] = params_after(tmp_path, [fp32], 2, steps=1)
    rounding = _max_diff(one32, one64)
    assert 0 < rounding < 1e-5
    assert _max_diff(two32, one32) <= rounding


def test_submit_dry_run_prints_an_sbatch_script_calling_torchrun(tmp_path, monkeypatch):
    monkeypatch.chdir(RECIPES.parent)
    done = cli(
        "submit",
        "recipes/demo-sgd.yaml",
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--partition",
        "gpu",
        "--set",
        "global_batch=32768",
        "--set",
        "micro_batch=auto",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    script = done.stdout
    for line in (
        "#SBATCH --nodes=4",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "--nnodes=4",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "-m bench run recipes/demo-sgd.yaml",
        "--set global_batch=32768",
    ):
        assert line in script
    assert script.startswith("#!/bin/bash") and 'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" ' in script
    plan = "# plan: 32 ranks x 4 micro-batches x 256 images = batch 32768; 128 gradient groups of 1 micro-batch(es)"
    assert plan + "; micro_batch auto: the device's memory may lower it\n" in script  # as bench run prints it
    assert "#SBATCH --cpus-per-task=64" in script and "--tensorboard" not in script


def test_submit_takes_the_options_real_clusters_need_and_a_port_per_job(tmp_path, monkeypatch):
    monkeypatch.chdir(RECIPES.parent)
    options = [
        "--account",
        "proj42",
        "--qos",
        "high",
        "--mem",
        "200G",
        "--constraint",
        "h100&ib",
        "--exclusive",
        "--sbatch=--mail-type=END",
        "--sbatch",
        "reservation=bench",
        "--time",
        "1:00:00",
        "--set",
        "micro_batch=25",
    ]
    done = cli(
        "submit",
        "recipes/demo-sgd.yaml",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        *options,
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    header = [line for line in done.stdout.splitlines() if line.startswith("#SBATCH")]
    for line in (
        "#SBATCH --account=proj42",
        "#SBATCH --qos=high",
        "#SBATCH --mem=200G",
        "#SBATCH --constraint=h100&ib",
        "#SBATCH --exclusive",
        "#SBATCH --mail-type=END",
        "#SBATCH --reservation=bench",
        "#SBATCH --time=1:00:00",
        "#SBATCH --requeue",
    ):
        assert header.count(line) == 1, line
    assert "29500" not in done.stdout and "MASTER_PORT=$(( 10000 + SLURM_JOB_ID % 20000 ))" in done.stdout
    assert '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in done.stdout
    port = subprocess.run(
        ["bash", "-c", "SLURM_JOB_ID=123456; MASTER_PORT=$(( 10000 + SLURM_JOB_ID % 20000 )); echo $MASTER_PORT"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert port == "13456"


def test_submit_to_cpu_nodes_asks_for_no_gpus_and_starts_the_workers_asked_for(monkeypatch):
    monkeypatch.chdir(RECIPES.parent)
    done = cli(
        "submit",
        "recipes/demo-sgd.yaml",
        "--nodes",
        "1",
        "--gpus-per-node",
        "0",
        "--workers-per-node",
        "2",
        "--cpus-per-worker",
        "3",
        "--tensorboard",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    assert "--gpus-per-node" not in done.stdout
    for line in ("#SBATCH --nodes=1", "#SBATCH --cpus-per-task=6", "--nproc-per-node=2", "--tensorboard"):
        assert line in done.stdout


def test_submit_bad_recipe_is_exit_2(tmp_path):
    done = cli("submit", str(tmp_path / "missing.yaml"), "--nodes", "1", "--gpus-per-node", "1", "--dry-run")
    assert done.returncode == 2 and "no such recipe file" in done.stderr


@pytest.mark.slow
def test_global_batch_98304_runs_on_one_cpu_process_through_accumulation(tmp_path):
    """One step of a 96k batch: 24 micro-batches of 4096 random 8 px images through timm's test ResNet at 8 channels
    a layer (10k parameters): the accumulation is under test, so each image costs as little as it can."""
    text = """
model: {name: test_resnet, kwargs: {channels: [8, 8, 8, 8], stem_width: 8}}
data: {dataset: synthetic, loader: random, image_size: 8, workers: 0,
       synth: {classes: 10, train_per_class: 20, val_per_class: 2, size: 16}}
global_batch: 98304
micro_batch: 4096
optimizer: {name: vrgd_lars, lr: 1.0}
epochs: 491.52
target_top1: 50
"""
    done = cli("run", str(write_recipe(tmp_path / "huge.yaml", text)), "--out", str(tmp_path), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "1 rank x 24 micro-batches x 4096 images = batch 98304; 24 gradient groups" in done.stdout
    [run] = (tmp_path / "huge").iterdir()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["total_steps"] == 1
    events = [json.loads(line) for line in event_lines(run)]
    assert len(events) == 1 and math.isfinite(events[0]["loss"]) and 0 <= events[0]["gsnr_clip_frac"] <= 1
    assert pd.read_csv(run / "metrics.csv")["images_seen"].tolist() == [98304]


def test_micro_batch_auto_fits_the_memory_and_leaves_the_random_state_alone(tmp_path, monkeypatch, capsys):
    from bench.engine import memory
    from bench.engine.distributed import Dist

    path = write_recipe(
        tmp_path / "r.yaml", (RECIPES / "demo-sgd.yaml").read_text().replace("micro_batch: 50", "micro_batch: auto")
    )
    dist = Dist(0, 1, 0, torch.device("cpu"))
    roomy = Trainer(recipe_mod.load(path), dist)
    assert roomy.plan.micro_batch == 100 and roomy.memory_note is None  # the whole batch fits: engine's cap rules
    per_image = memory.saved_bytes_per_image(roomy.model, 64, torch.device("cpu"), torch.float32)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * 30 * per_image)  # room for 30 images' activations
    tight = Trainer(recipe_mod.load(path), dist)
    assert tight.plan.micro_batch == 25 and "at most 30 images fit" in tight.memory_note  # 25 divides 100
    explicit = Trainer(recipe_mod.load(path, ["micro_batch=25"]), dist)
    probed, trained = tight.model.state_dict(), explicit.model.state_dict()
    assert probed.keys() == trained.keys() and any("running_mean" in key for key in probed)
    for key in probed:  # the probe drew no random numbers and left BatchNorm's running statistics as they were
        assert torch.equal(probed[key], trained[key]), key
    monkeypatch.setattr(memory, "free_bytes", lambda device: per_image / 4)
    assert main_run(path, tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: error: micro_batch auto: one 64 px image of resnet10t keeps") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_micro_batch_auto_builds_the_model_once_and_probes_the_one_it_trains(tmp_path, monkeypatch):
    from bench.engine import memory, train
    from bench.engine.distributed import Dist

    built, probed = [], []
    create_model, saved_bytes_per_image = train.create_model, memory.saved_bytes_per_image
    monkeypatch.setattr(
        train,
        "create_model",
        lambda name, kwargs, classes: built.append(classes) or create_model(name, kwargs, classes),
    )
    monkeypatch.setattr(
        memory,
        "saved_bytes_per_image",
        lambda model, *args: probed.append(model) or saved_bytes_per_image(model, *args),
    )
    path = write_recipe(
        tmp_path / "r.yaml", (RECIPES / "demo-sgd.yaml").read_text().replace("micro_batch: 50", "micro_batch: auto")
    )
    dist = Dist(0, 1, 0, torch.device("cpu"))
    auto = Trainer(recipe_mod.load(path), dist)
    assert built == [auto.data.num_classes] and len(probed) == 1 and probed[0] is auto.model
    built.clear()
    probed.clear()
    Trainer(recipe_mod.load(path, ["micro_batch=25"]), dist)
    assert len(built) == 1 and probed == []  # a given micro-batch probes nothing


def main_run(path, tmp_path) -> int:
    from bench.cli import main

    return main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"])


# The Fashion-MNIST study's model (recipes/sweeps/base/fashion-mnist.yaml): timm's ImageNet stem on 28 px images.
FASHION_MODEL = dict(layers=[1, 1, 1, 1], channels=[32, 64, 128, 256], stem_width=32)


def test_the_probe_counts_taps_that_see_only_padding_and_not_a_silenced_branch():
    """At 28 px layer4 sees 2x2 and 1x1 maps: conv2 keeps its centre tap (8/9 of 589,824 dead), the stride-2
    conv1 its 4 lower-right taps (5/9 of 294,912). At step 0 timm's zero-initialised last BatchNorms silence
    almost everything else too, which the probe does not count; the CIFAR ResNet has no dead parameter."""
    from bench.engine import dead
    from bench.models import timm_models

    timm = timm_models()
    model = timm.create_model("resnet18", num_classes=10, **FASHION_MODEL)
    images = torch.randn(2, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    model(images).sum().backward()
    silenced = sum(int((p.grad == 0).sum()) for p in model.parameters())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    state = torch.get_rng_state()
    found = dead.probe(model, 28)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())  # a copy was probed
    assert (found.total, found.dead) == (1_248_906, 688_128) and found.share == pytest.approx(0.551, abs=0.001)
    assert found.largest == (("layer4.0.conv2.weight", 524_288), ("layer4.0.conv1.weight", 163_840))
    assert silenced > 0.9 * found.total  # what a step-0 count of zero gradients would have said
    cifar = dead.probe(timm.create_model("resnet20_cifar", num_classes=10), 28)
    assert (cifar.total, cifar.dead, cifar.largest) == (269_722, 0, ())
    model.fc.weight.requires_grad_(False)
    assert dead.probe(model, 28).total == 1_248_906 - 2560  # frozen parameters are not counted


DEAD_RECIPE = """
model: {name: resnet18, kwargs: {layers: [1, 1, 1, 1], channels: [32, 64, 128, 256], stem_width: 32}}
data: {dataset: synthetic, loader: random, image_size: 28, workers: 0,
       synth: {classes: 10, train_per_class: 2, val_per_class: 1, size: 28}}
global_batch: 10
micro_batch: 5
optimizer: {name: sgd, lr: 0.1}
epochs: 1
target_top1: 50
"""


def test_a_run_with_dead_parameters_warns_and_records_them_or_refuses(tmp_path, capsys):
    from bench.errors import BenchWarning

    path = write_recipe(tmp_path / "fashion.yaml", DEAD_RECIPE)
    with pytest.warns(BenchWarning) as said:
        assert main_run(path, tmp_path) == 0
    [line] = [str(w.message) for w in said if "gradient" in str(w.message)]
    assert line.startswith("55% of resnet18's parameters (688,128 of 1,248,906) get exactly zero gradient at 28 px")
    assert "layer4.0.conv2.weight 524,288, layer4.0.conv1.weight 163,840" in line and "resnet20_cifar" in line
    [run] = (tmp_path / "out" / "fashion").iterdir()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["dead_params"] == {"share": pytest.approx(0.551, abs=0.001), "count": 688_128, "total": 1_248_906}

    refusing = write_recipe(tmp_path / "refusing.yaml", DEAD_RECIPE + "engine: {dead_params: refuse}\n")
    capsys.readouterr()
    assert main_run(refusing, tmp_path) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("bench: error: key 'engine.dead_params' is refuse and 55% of resnet18's")
        and err.count("\n") == 1
    )
    assert not (tmp_path / "out" / "refusing").exists()  # refused before any run directory


def test_a_small_image_model_runs_without_the_warning(tmp_path):
    import warnings

    from bench.errors import BenchWarning

    text = DEAD_RECIPE.replace(
        "resnet18, kwargs: {layers: [1, 1, 1, 1], channels: [32, 64, 128, 256], stem_width: 32}", "resnet20_cifar"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", BenchWarning)
        assert main_run(write_recipe(tmp_path / "cifar.yaml", text), tmp_path) == 0
    [run] = (tmp_path / "out" / "cifar").iterdir()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["dead_params"] == {"share": 0.0, "count": 0, "total": 269_722}
    # bench run records its recipe file by content: a recipe outside bench's checkout needs no commit into it
    [recorded] = meta["inputs"]
    recipe = tmp_path / "cifar.yaml"
    assert recorded["path"] == str(recipe) and recorded["git_commit"] is None
    assert recorded["sha256"] == hashlib.sha256(recipe.read_bytes()).hexdigest()


def test_a_run_on_images_upscaled_far_beyond_the_dataset_s_warns():
    import yaml

    from bench.engine.distributed import Dist
    from bench.errors import BenchWarning

    text = DEAD_RECIPE.replace(
        "resnet18, kwargs: {layers: [1, 1, 1, 1], channels: [32, 64, 128, 256], stem_width: 32}", "resnet20_cifar"
    ).replace("image_size: 28", "image_size: 64")
    recipe = recipe_mod.Recipe.model_validate({"name": "up", **yaml.safe_load(text)})
    with pytest.warns(
        BenchWarning,
        match=r"^data.image_size 64 is 2x the dataset's own 28 px images \(key "
        r"'data.synth'\): .* train at data.image_size 28 with a small-image model",
    ):
        Trainer(recipe, Dist(0, 1, 0, torch.device("cpu")))


def test_each_progress_field_has_one_writer():
    """Pace moves the schedule, stream and controller fields of Progress; the Trainer the timing, loss and
    evaluation ones (train.Progress's docstring): no field is written by both."""
    import ast
    import dataclasses

    from bench.engine import pace, train

    def written(module) -> set[str]:
        tree = ast.parse(Path(module.__file__).read_text())
        targets = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets += node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets.append(node.target)
        names = set()
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "progress":
                    names.add(t.attr)
        return names

    fields = [f.name for f in dataclasses.fields(train.Progress)]
    assert written(pace) == set(fields[:6])
    assert written(train) and written(train) <= set(fields[6:])


def test_the_recorded_commit_sees_everything_a_run_reads(checkout, tmp_path):
    """git_commit() (what each run records; a sweep refuses '+dirty') says '+dirty' for a tracked file that differs
    from HEAD anywhere in the checkout, in the working tree or only in the index (the code of each subpackage and a
    top-level module, a recipe, pyproject.toml, the README), and for an untracked file in bench/ (a package that
    shadows a tracked module: an untracked bench/optim/lars/__init__.py is imported instead of lars.py; LARS then
    ran as SGD) or in recipes/; not for what bench writes (results/, plots/), an ignored file, an untracked file
    elsewhere, or the run's own input files (its recipe, a sweep file and its base), edited or uncommitted, in
    bench's checkout or another git tree: input_records holds those by content. On a throwaway checkout."""
    from bench.rundir import checkout_state, git_commit, input_records

    mine = tmp_path / "my-sweeps"  # a user's sweep files in a git tree of their own
    (mine / "sweeps").mkdir(parents=True)
    (mine / "sweeps" / "ladder.yaml").write_text("arms: {}\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        git(mine, *args)
    sha = git(checkout, "rev-parse", "HEAD").strip()
    theirs = git(mine, "rev-parse", "HEAD").strip()

    def state(*files: Path) -> str | None:
        checkout_state.cache_clear()
        commit = git_commit(*files)
        for repo in (checkout, mine):  # undo the change for the next probe
            git(repo, "reset", "-q", "--hard")
            git(repo, "clean", "-qfd")
        return commit

    def write(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write("# edited\n")

    ladder = mine / "sweeps" / "ladder.yaml"
    assert state(ladder) == sha
    for name in (n for n in CHECKOUT_FILES if not n.startswith(("results/", "plots/"))):
        write(checkout / name)
        assert state() == f"{sha}+dirty", name
        if name.startswith("recipes/"):  # the run's own recipe: recorded by content instead
            write(checkout / name)
            assert state(checkout / name) == sha, name
    write(checkout / "bench/optim/lars.py")
    git(checkout, "add", "bench/optim/lars.py")
    assert git(checkout, "status", "--porcelain") == "M  bench/optim/lars.py\n" and state() == f"{sha}+dirty"
    for name in ("bench/optim/lars/__init__.py", "recipes/new.yaml"):
        write(checkout / name)
        assert state() == f"{sha}+dirty", name
    write(checkout / "bench/optim/lars.py")
    checkout_state.cache_clear()
    assert checkout_state()[1] == ("M bench/optim/lars.py",)  # what a refusal names
    state()
    [committed] = input_records(ladder)
    digest = hashlib.sha256(ladder.read_bytes()).hexdigest()
    assert committed == {"path": str(ladder), "sha256": digest, "git_commit": theirs, "committed": True}
    write(ladder)
    write(mine / "sweeps" / "new.yaml")
    assert state(ladder, mine / "sweeps" / "new.yaml") == sha  # the user's files need no commit
    write(ladder)
    [edited] = input_records(ladder)
    assert edited["sha256"] != committed["sha256"] and not edited["committed"] and edited["git_commit"] == theirs
    outside = tmp_path / "loose.yaml"
    outside.write_text("arms: {}\n")
    assert input_records(outside)[0]["git_commit"] is None
    for name in ("results/study/run/meta.json", "results/study/run-2/meta.json", "plots/study/scaling.png"):
        write(checkout / name)  # what bench writes
    write(checkout / "notes.txt")  # untracked, outside bench/ and recipes/
    write(checkout / "bench/optim/__pycache__/lars.cpython-311.pyc")  # ignored (.gitignore)
    assert state() == sha


@pytest.mark.parametrize("moving", [False, True])
def test_eval_ema_reads_the_target_on_the_averaged_weights(tmp_path, tiny_dataset, monkeypatch, moving):
    """eval.ema_epochs: the run's final checkpoint holds the exponential moving average of the weights and buffers
    after every step (e_1 = w_1, e_t = d e_(t-1) + (1 - d) w_t, d = exp(-batch / (ema_epochs x train images)),
    computed here by hand from the weights each step left), and the evaluation reads that average, not the
    trained weights: the metrics' val loss is the average's, not the trained model's. `moving`: a declared batch
    schedule (32, then 16 from 64 images): each step's decay is its own batch's."""
    from bench.engine import checkpoint
    from bench.engine import train as train_mod

    text = EQUIV.replace("DATA", str(tiny_dataset)).replace("OPT", "sgd").replace("LR", "0.2")
    text = text.replace("PRECISION", "fp64").replace("epochs: 1\n", "epochs: 0.8\neval: {ema_epochs: 0.25}\n")
    if moving:
        text += "adaptive_batch: {min_batch: 16, max_batch: 32, by_images: {64: 16}}\n"
    recipe = recipe_mod.load(write_recipe(tmp_path / "ema.yaml", text))
    states, step = [], Trainer.step

    def spy(self, *args, **kwargs):
        loss = step(self, *args, **kwargs)
        states.append({k: v.detach().clone() for k, v in self.model.state_dict().items()})
        return loss

    monkeypatch.setattr(Trainer, "step", spy)
    done = train_mod.train(recipe, tmp_path / "results", progress=False)
    batches = [32, 32, 16, 16, 16, 16] if moving else [32] * 4  # 0.8 epochs of 160 images
    assert len(states) == len(batches) and 0.4 < math.exp(-32 / (0.25 * 160)) < 0.5  # the average moves
    ema = dict(states[0])
    for state, batch in zip(states[1:], batches[1:]):
        decay = math.exp(-batch / (0.25 * 160))
        ema = {k: decay * ema[k] + (1 - decay) * v if v.is_floating_point() else ema[k] for k, v in state.items()}
    saved = torch.load(checkpoint.saved(done.path)[-1], weights_only=False)["ema"]
    for k, v in ema.items():
        if v.is_floating_point():
            torch.testing.assert_close(saved[f"module.{k}"], v, rtol=1e-12, atol=1e-12, msg=k)
    final = pd.read_csv(done.path / "metrics.csv").iloc[-1]
    trainer = Trainer(recipe, distributed.Dist(0, 1, 0, torch.device("cpu")))
    losses = {}
    for name, weights in (("ema", ema), ("trained", states[-1])):
        trainer.model.load_state_dict(weights)
        losses[name] = train_mod.evaluate(trainer.model, trainer.data.val(), recipe, trainer.device)["loss"]
    assert final["val_loss"] == pytest.approx(losses["ema"], rel=1e-9)
    assert abs(losses["ema"] - losses["trained"]) > 1e-4


def test_thinned_events_hold_every_nth_step_and_the_last_and_change_no_number(tmp_path):
    """logging.events_every_steps 3 over 5 steps: events.jsonl holds steps 0, 3 and 4 (the last), the metrics
    are those of the full log's run, and the two runs are seeds of one recipe (logging changes no number)."""
    from bench import api

    sets = ["epochs=1", "global_batch=20", "micro_batch=10", "data.synth.train_per_class=10"]
    sets += ["data.synth.val_per_class=2", "schedule.warmup_epochs=0", "optimizer.name=vrgd_sgd"]
    full = api.run(api.load_recipe(RECIPES / "demo-sgd.yaml", sets), out=tmp_path / "full")
    thin = api.run(
        api.load_recipe(RECIPES / "demo-sgd.yaml", [*sets, "logging.events_every_steps=3"]), out=tmp_path / "thin"
    )
    steps = {run: [json.loads(line)["step"] for line in event_lines(run)] for run in (full, thin)}
    assert steps == {full: [0, 1, 2, 3, 4], thin: [0, 3, 4]}
    logged = {run: {json.loads(line)["step"]: json.loads(line) for line in event_lines(run)} for run in (full, thin)}
    for s in (0, 3, 4):
        assert logged[thin][s]["loss"] == logged[full][s]["loss"] and "grad_var" in logged[thin][s]
    pd.testing.assert_frame_equal(
        pd.read_csv(full / "metrics.csv").drop(columns="train_time_s"),
        pd.read_csv(thin / "metrics.csv").drop(columns="train_time_s"),
    )
    from bench.analysis import results

    study = results.load_study([tmp_path / "full", tmp_path / "thin"])
    assert len(study.runs) == 2 and study.runs["group"].nunique() == 1
    # a run an evaluation ends (here at the target, after 2 steps) logs the step it ended at too
    early = [
        *sets,
        "logging.events_every_steps=3",
        "target_top1=1",
        "eval.every_epochs=0.4",
        "eval.stop_at_target=true",
    ]
    stopped = api.run(api.load_recipe(RECIPES / "demo-sgd.yaml", early), out=tmp_path / "early")
    assert [json.loads(line)["step"] for line in event_lines(stopped)] == [0, 1]


def test_evaluation_builds_no_graph_and_frees_each_batch_before_the_next(tmp_path):
    """evaluate() runs without autograd: no module's output requires grad, and when a batch's forward starts, the
    previous batch's convolution outputs are gone, so memory is one batch's, not the pass's (with gradients on the
    running totals keep every batch's graph, and with it every activation, to the end of the pass)."""
    import gc
    import weakref

    from bench import api
    from bench.engine import train as train_mod

    sets = ["data.synth.val_per_class=8", "data.eval_batch=16", "model.name=resnet8_cifar"]
    recipe = api.load_recipe(RECIPES / "demo-sgd.yaml", sets)
    trainer = Trainer(recipe, distributed.Dist(0, 1, 0, torch.device("cpu")))
    grads, alive, earlier = [], [], []

    def keep(module, inputs, output):
        grads.append(output.requires_grad)
        earlier.append(weakref.ref(output))

    def check(module, inputs):
        gc.collect()
        alive.append(sum(ref() is not None for ref in earlier))
        earlier.clear()

    convs = [m for m in trainer.model.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks = [m.register_forward_hook(keep) for m in convs] + [trainer.model.register_forward_pre_hook(check)]
    result = train_mod.evaluate(trainer.model, trainer.data.val(), recipe, trainer.device)
    for hook in hooks:
        hook.remove()
    batches = -(-result["images"] // 16)
    assert batches >= 4 and len(alive) == batches and len(grads) == batches * len(convs)
    assert not any(grads)
    assert alive == [0] * batches  # with the graph kept: 0, then len(convs), 2 x len(convs), ...
    assert trainer.model.training  # evaluate() hands the model back in training mode
