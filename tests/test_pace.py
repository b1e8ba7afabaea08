"""The pace of a run (bench/engine/pace.py): fixed batch, AdaScale's scale-invariant schedule and
SimiGrad's adaptive batch; then both through `bench run`, and their recipes' errors."""

import json
import math

import pandas as pd
import pytest

from bench.engine.pace import Pace
from bench.engine.plan import make_plan
from bench.engine.train import Progress
from bench.recipe import Recipe, load
from bench.rundir import event_lines
from bench.schedule import lr_at
from tests.conftest import cli, killed_at, write_recipe


def recipe(**over) -> Recipe:
    raw = dict(
        name="r",
        model={"name": "resnet10t"},
        global_batch=512,
        micro_batch=64,
        optimizer={"name": "sgd", "lr": 1.0},
        schedule={"warmup_epochs": 1, "decay": "cosine"},
        epochs=3,
        target_top1=50,
    )
    return Recipe.model_validate({**raw, **over})


def pace_of(r: Recipe, adascale=False, train_size=1000) -> Pace:
    chunk = r.adaptive_batch.min_batch if r.adaptive_batch else r.global_batch
    return Pace(r, make_plan(chunk, r.micro_batch, 1, r.gsnr_groups), train_size, adascale)


def walk(pace: Pace, gains=None, similarities=None):
    """Steps until done: [(lr, batch)] and the final progress."""
    progress, seen = Progress(), []
    pace.start(progress)
    while not pace.done(progress):
        i = len(seen)
        seen.append((pace.lr(progress), pace.batch(progress)))
        pace.advance(progress, gains[i] if gains else 1.0, similarities[i] if similarities else None)
        assert i < 10_000
    return seen, progress


def test_a_fixed_batch_takes_the_steps_and_lrs_the_schedule_always_gave():
    r = recipe()
    pace = pace_of(r)
    seen, progress = walk(pace)
    total = math.ceil(3 * 1000 / 512)
    assert pace.fixed and pace.total_steps == total == len(seen) == progress.step
    assert [lr for lr, _ in seen] == [lr_at(s, 1.0, total, 1000 / 512, r.schedule) for s in range(total)]
    assert {b for _, b in seen} == {512} and progress.images == total * 512
    # evaluations every epoch: after the steps whose images cross 1000, 2000 (and the last)
    crossings = [s for s in range(total) if pace.crossed(s, s + 1, 1.0)]
    assert crossings == [1, 3, 5]


def test_adascale_advances_the_schedule_by_the_gain():
    r = recipe(optimizer={"name": "adascale_sgd", "lr": 0.1})
    pace = pace_of(r, adascale=True)  # 8 groups of 64: the schedule is that of batch 64
    assert pace.reference == 64 and pace.total_steps is None
    seen, progress = walk(pace, gains=[2.0] * 1000)
    assert len(seen) == math.ceil(3 * 1000 / 64 / 2)  # each step advances 2 schedule steps
    assert progress.images == len(seen) * 512 and progress.images > 3 * 1000  # gain < 8: more images
    assert pace.epoch(progress) >= 3
    warmup = round(1000 / 64)
    assert [lr for lr, _ in seen[:3]] == pytest.approx([0.1 * (s + 1) / warmup for s in (0, 2, 4)])
    # gain = S (perfect scaling): as many steps as a fixed batch of 512
    assert len(walk(pace_of(r, adascale=True), gains=[8.0] * 1000)[0]) == math.ceil(3 * 1000 / 512)


def adaptive(**over):
    spec = {"target_similarity": 0.5, "min_batch": 128, "max_batch": 1024, "adjust": 0.5, **over}
    return recipe(
        optimizer={"name": "simigrad_sgd", "lr": 1.0},
        global_batch=256,
        adaptive_batch=spec,
        schedule={"decay": "constant"},
        epochs=20,
    )


def test_the_controller_grows_the_batch_under_noise_and_shrinks_it_under_clean_gradients():
    pace = pace_of(adaptive())
    noisy, _ = walk(pace, similarities=[0.1] * 1000)
    assert [b for _, b in noisy[:5]] == [256, 384, 640, 1024, 1024]  # x1.5 rounded to chunks, capped
    clean, _ = walk(pace_of(adaptive()), similarities=[0.9] * 1000)
    assert [b for _, b in clean[:3]] == [256, 128, 128]  # at least one chunk, floored at min_batch
    steady, _ = walk(pace_of(adaptive()), similarities=[0.5] * 1000)
    assert {b for _, b in steady} == {256}


def test_the_authors_rule_grows_and_shrinks_by_adjust_floored():
    """SimiGrad's running code: m -> max(m + 1, floor(1.1 m)) up, max(1, min(m - 1, floor(0.9 m))) down (m: chunks);
    not the older one-chunk-down variant max(1, m - 1, floor(0.9 m))."""

    def chunks(rule, first, similarity, n):
        spec = dict(target_similarity=0.5, min_batch=128, max_batch=128 * 40, adjust=0.1, rule=rule)
        r = recipe(
            optimizer={"name": "simigrad_sgd", "lr": 1.0},
            global_batch=128 * first,
            adaptive_batch=spec,
            schedule={"decay": "constant"},
            epochs=200,
        )
        return [b // 128 for _, b in walk(pace_of(r), similarities=[similarity] * 10_000)[0][:n]]

    up = chunks("authors", 2, 0.1, 26)
    expected = [2]
    while len(expected) < 26:
        expected.append(min(max(expected[-1] + 1, math.floor(expected[-1] * 1.1)), 40))
    assert up == expected and up[:4] == [2, 3, 4, 5] and up[18:22] == [20, 22, 24, 26]
    down = chunks("authors", 30, 0.9, 5)
    expected = [30]
    while len(expected) < 5:
        expected.append(max(1, min(expected[-1] - 1, math.floor(expected[-1] * 0.9))))
    assert down == expected == [30, 27, 24, 21, 18]  # about 10% down, floored
    assert chunks("authors", 5, 0.9, 4) == [5, 4, 3, 2]  # floor(0.9 m) = m - 1 here: at least one chunk
    assert chunks("authors", 3, 0.9, 4)[-1] == 1  # never below one chunk (min_batch)
    assert chunks("proportional", 30, 0.9, 3) == [30, 27, 25]  # round(m / 1.1)
    assert chunks("authors", 25, 0.1, 2) == [25, 27] and chunks("proportional", 25, 0.1, 2) == [25, 28]  # 27.5


def test_the_adaptive_batch_scales_lr_by_sqrt_batch_and_counts_images():
    pace = pace_of(adaptive(every_steps=2))
    seen, progress = walk(pace, similarities=[0.0] * 1000)
    assert [b for _, b in seen[:5]] == [256, 256, 384, 384, 640]  # adjusted after every 2 steps
    for lr, b in seen:
        assert lr == pytest.approx(math.sqrt(b / 256))
    assert progress.images >= 20 * 1000 > progress.images - seen[-1][1]  # the last step crossed the end
    assert pace.epoch(progress) == progress.images / 1000


def test_a_declared_batch_schedule_moves_the_batch_at_its_images_and_scales_the_lr_by_sqrt():
    spec = {"min_batch": 64, "max_batch": 1024, "by_images": {1000: 256, 3000: 1024}}
    r = recipe(optimizer={"name": "lars", "lr": 1.0}, global_batch=64, adaptive_batch=spec,
               schedule={"decay": "constant"}, epochs=5)  # fmt: skip
    seen, progress = walk(pace_of(r))
    images = [sum(b for _, b in seen[:i]) for i in range(len(seen))]  # seen before each step
    expected = [64 if i < 1000 else 256 if i < 3000 else 1024 for i in images]
    assert [b for _, b in seen] == expected and {64, 256, 1024} <= set(expected)
    assert images[expected.index(256)] >= 1000 > images[expected.index(256) - 1]  # the first step past 1,000
    for lr, b in seen:
        assert lr == pytest.approx(math.sqrt(b / 64))
    assert progress.images >= 5 * 1000 > progress.images - seen[-1][1]


def test_adaptive_batch_recipes_are_checked(tmp_path):
    bad = {
        "optimizer: {name: sgd, lr: 0.1}": "needs an optimizer that measures the halves' similarity",
        "global_batch: 2048": "must lie in [adaptive_batch.min_batch",
        "global_batch: 192": "is not a multiple of adaptive_batch.min_batch",
        "adaptive_batch: {min_batch: 128, max_batch: 1024}": "give exactly one of target_similarity",
        "adaptive_batch: {target_similarity: 0.3, min_batch: 128, max_batch: 1024, by_images: {64: 256}}":
            "give exactly one of target_similarity",
        "adaptive_batch: {min_batch: 128, max_batch: 1024, by_images: {64: 320}}":
            "by_images.64: batch 320 is not a multiple of min_batch 128",
        "adaptive_batch: {min_batch: 128, max_batch: 1024, by_images: {64: 2048}}": "within [128, 1024]",
    }  # fmt: skip
    base = (
        "model: {name: resnet10t}\nglobal_batch: 256\noptimizer: {name: simigrad_sgd, lr: 0.1}\nepochs: 1\n"
        "target_top1: 50\nadaptive_batch: {target_similarity: 0.3, min_batch: 128, max_batch: 1024}\n"
    )
    for line, message in bad.items():
        key = line.split(":")[0]
        text = "\n".join(line if row.startswith(key + ":") else row for row in base.splitlines())
        done = cli("validate", str(write_recipe(tmp_path / "r.yaml", text)))
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


TINY = """
model: {{name: resnet10t}}
data: {{dataset: folder, path: {data}, image_size: 32, crop_scale_min: 0.35, workers: 1, eval_batch: 64}}
global_batch: 32
micro_batch: 8
optimizer: {optimizer}
schedule: {{warmup_epochs: 1, decay: cosine}}
epochs: 4
eval: {{every_epochs: 2}}
target_top1: 40
{extra}
"""


def run_tiny(tmp_path, data, optimizer, extra=""):
    text = TINY.format(data=data, optimizer=optimizer, extra=extra)
    results = tmp_path / "results"
    done = cli("run", str(write_recipe(tmp_path / "r.yaml", text)), "--out", str(results), "--no-progress")
    assert done.returncode == 0, done.stderr
    [run] = list((results / "r").iterdir())
    events = [json.loads(line) for line in event_lines(run)]
    return json.loads((run / "meta.json").read_text()), pd.read_csv(run / "metrics.csv"), events


@pytest.mark.slow
def test_adascale_run_logs_gain_and_noise_scale_and_ends_on_its_schedule(tmp_path, tiny_dataset):
    meta, metrics, events = run_tiny(tmp_path, tiny_dataset, "{name: adascale_sgd, lr: 0.05, smoothing: 0.5}")
    assert meta["status"] == "completed" and meta["total_steps"] is None
    gains = [e["gain"] for e in events]
    assert all(1.0 <= g <= 4.0 for g in gains) and len(set(gains)) > 1  # 4 groups of 8 images
    assert all(e["batch"] == 32 for e in events)
    assert all(
        e["noise_scale"] == pytest.approx(e["noise_trace"] / e["grad_sqnorm"]) for e in events if e["grad_sqnorm"] > 0
    )
    assert all(e["noise_trace"] == pytest.approx(8 * e["grad_var"]) for e in events)
    last = metrics.iloc[-1]
    # 4 scale-invariant epochs of 160 images at the base batch 8: sum of gains * 8 >= 640, just
    assert last["schedule_epoch"] >= 4 and sum(gains[:-1]) * 8 < 4 * 160 <= sum(gains) * 8
    assert last["schedule_epoch"] == pytest.approx(sum(gains) * 8 / 160)
    assert last["epoch"] == last["images_seen"] / 160 >= last["schedule_epoch"]


@pytest.mark.slow
def test_simigrad_run_adapts_its_batch_and_counts_images(tmp_path, tiny_dataset):
    extra = "adaptive_batch: {target_similarity: 0.99, min_batch: 16, max_batch: 64}"
    meta, metrics, events = run_tiny(tmp_path, tiny_dataset, "{name: simigrad_sgd, lr: 0.1}", extra)
    batches = [e["batch"] for e in events]
    # similarity of two halves of a few images stays below 0.99: the batch grows to the cap
    assert batches[:3] == [32, 48, 64] and set(batches[2:]) == {64}
    assert all(-1 <= e["similarity"] <= 1 for e in events)
    assert sum(batches) == metrics["images_seen"].iloc[-1] >= 4 * 160 > sum(batches[:-1])
    assert metrics["batch"].iloc[-1] == batches[-1] and meta["plan"]["batch"] == 16
    # step 1 starts at schedule step 48 / 32 -> 1 of a 5-step warm-up, at batch 48
    assert events[1]["lr"] == pytest.approx(0.1 * 2 / 5 * math.sqrt(48 / 32))
    assert metrics["epoch"].tolist() == metrics["schedule_epoch"].tolist()


def test_an_optimizer_that_needs_two_groups_is_refused_with_one(tmp_path, tiny_dataset):
    text = TINY.format(data=tiny_dataset, optimizer="{name: adascale_sgd, lr: 0.05}", extra="gsnr_groups: 1")
    done = cli("run", str(write_recipe(tmp_path / "r.yaml", text)), "--out", str(tmp_path / "res"))
    assert done.returncode == 2 and "needs at least 2 gradient groups" in done.stderr
    assert not (tmp_path / "res").exists()


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,extra", [
    ("{name: adascale_sgd, lr: 0.05, smoothing: 0.5}", "checkpoint: {every_steps: 2}"),
    ("{name: simigrad_sgd, lr: 0.1}",
     "checkpoint: {every_steps: 2}\nadaptive_batch: {target_similarity: 0.9, min_batch: 16, max_batch: 64, every_steps: 2}"),
])  # fmt: skip
def test_a_killed_adaptive_run_resumes_to_the_same_results(tmp_path, tiny_dataset, optimizer, extra):
    """The gain's averages, the batch and the controller's half-window are in the checkpoint. On bench's own
    ResNet-8 at 16 px (the killed process imports no timm): what is checked is the state a resumed run restores."""
    import signal

    text = TINY.format(data=tiny_dataset, optimizer=optimizer, extra=extra)
    text = text.replace("{name: resnet10t}", "{name: resnet8_cifar}").replace("image_size: 32", "image_size: 16")
    path = write_recipe(tmp_path / "r.yaml", text)
    outcomes = []
    for name, crash in (("ref", None), ("crashed", "step:5")):
        out = tmp_path / name
        if crash:
            assert killed_at(crash, "run", str(path), "--out", str(out), "--no-progress") == -signal.SIGKILL
        done = cli("run", str(path), "--out", str(out), "--no-progress")
        assert done.returncode == 0, done.stderr
        [run] = list((out / "r").iterdir())
        events = [json.loads(line) for line in event_lines(run)]
        outcomes.append((pd.read_csv(run / "metrics.csv").drop(columns=["train_time_s"]), events))
    pd.testing.assert_frame_equal(outcomes[0][0], outcomes[1][0], check_exact=True)
    assert outcomes[0][1] == outcomes[1][1]


def spy_on_lr(monkeypatch) -> list[list[float]]:
    """The lr of each update (GroupOptimizer._lr, or AdaScale's, returns it), listed per optimizer step."""
    from bench.optim.base import GroupOptimizer
    from bench.optim.groups import AdaScale

    applied = []

    def spied(lr_of):
        def _lr(self, group):
            applied[-1].append(lr_of(self, group))
            return applied[-1][-1]

        return _lr

    for cls in (GroupOptimizer, AdaScale):
        monkeypatch.setattr(cls, "_lr", spied(cls._lr))
    apply = GroupOptimizer._apply  # step()'s updates (torch wraps a class's step() once, for its profiler: not it)

    def counted(self):
        applied.append([])
        return apply(self)

    monkeypatch.setattr(GroupOptimizer, "_apply", counted)
    return applied


@pytest.mark.parametrize("optimizer,extra,reference", [
    ("{name: adascale_sgd, lr: 0.05, smoothing: 0.5}", "", 8),  # one group of the 4: AdaScale's base batch
    ("{name: simigrad_sgd, lr: 0.1}", "adaptive_batch: {target_similarity: 0.99, min_batch: 16, max_batch: 64}", 32),
    ("{name: lars, lr: 2.0}", "", 32),
    ("{name: lars, lr: 2.0}", "adaptive_batch: {min_batch: 16, max_batch: 64, by_images: {64: 64, 160: 16}}", 32),
])  # fmt: skip
def test_the_lr_of_every_step_is_the_schedule_functions_times_adascales_gain(
    tmp_path, tiny_dataset, monkeypatch, optimizer, extra, reference
):
    """One function decides the lr at a step, bench.schedule.lr_at, from the schedule position, the peak and the
    pace's factor (SimiGrad's sqrt(batch / B0), B0 the first batch); the events log records it, and the lr every
    update applies (GroupOptimizer._lr) is that lr times the gain the same step logged (AdaScale; 1 for the others),
    warm-up steps included. Equal as floats, not approximately."""
    applied = spy_on_lr(monkeypatch)
    text = TINY.format(data=tiny_dataset, optimizer=optimizer, extra=extra).replace("epochs: 4", "epochs: 2")
    text = text.replace("{name: resnet10t}", "{name: resnet8_cifar}").replace("image_size: 32", "image_size: 16")
    path, results = write_recipe(tmp_path / "r.yaml", text), tmp_path / "results"
    done = cli("run", str(path), "--out", str(results), "--no-progress")
    assert done.returncode == 0, done.stderr
    [run] = list((results / "r").iterdir())
    events = [json.loads(line) for line in event_lines(run)]
    r, train_size = load(path, models=False), json.loads((run / "meta.json").read_text())["train_size"]

    assert len(applied) == len(events) > 5
    position, in_warmup = 0.0, 0
    for event, lrs in zip(events, applied):
        lr = lr_at(
            math.floor(position),
            r.optimizer.lr,
            math.ceil(r.epochs * train_size / reference - 1e-9),
            train_size / reference,
            r.schedule,
            factor=math.sqrt(event["batch"] / reference) if r.adaptive_batch else 1.0,
        )
        assert event["lr"] == lr
        assert lrs == [lr * event.get("gain", 1.0)] * 2  # each param group's update (decayed, excluded)
        in_warmup += math.floor(position) < r.schedule.warmup_epochs * train_size / reference
        position += event.get("gain", event["batch"] / reference)  # the schedule position pace.py advances
    assert in_warmup >= 2 and len(events) - in_warmup >= 2
    if "by_images" in extra:  # the declared schedule: 32 until 64 images, 64 until 160, then 16
        assert [e["batch"] for e in events[:5]] == [32, 32, 64, 64, 16]
    if "gain" in events[0]:
        assert len({e["gain"] for e in events}) > 1 and max(e["gain"] for e in events) > 1


def test_a_declared_batch_schedule_needs_an_optimizer_of_a_fixed_pace(tmp_path):
    base = (
        "model: {name: resnet10t}\nglobal_batch: 128\noptimizer: {name: lars, lr: 0.1}\nepochs: 1\n"
        "target_top1: 50\nadaptive_batch: {min_batch: 128, max_batch: 1024, by_images: {512: 256}}\n"
    )
    done = cli("validate", str(write_recipe(tmp_path / "ok.yaml", base)))
    assert done.returncode == 0, done.stderr
    for name in ("adascale_lars", "simigrad_lars"):
        text = base.replace("name: lars", f"name: {name}")
        done = cli("validate", str(write_recipe(tmp_path / "r.yaml", text)))
        assert done.returncode == 2 and "by_images needs an optimizer of a fixed pace" in done.stderr
