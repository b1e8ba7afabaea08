"""Gradient noise scale, AdaScale gain and adaptive batches in reports and plots; compare --batch; the
steps-to-target-by-model figure of a width-vs-depth study; all on hand-made run directories."""

import math

import numpy as np
import pandas as pd
import pytest

from bench.analysis import plots, report, results, tables
from bench.analysis.render import render
from bench.cli import main
from bench.errors import UserError
from tests.helpers import make_run


def step(s, **kw):
    return {"step": s, "lr": 0.1, "loss": 2.0, **kw}


NOISY = [
    step(0, noise_trace=10.0, grad_sqnorm=1.0, noise_scale=10.0),
    step(1, noise_trace=30.0, grad_sqnorm=-0.5, noise_scale=None),  # an unbiased |G|^2 estimate below 0
    step(2, noise_trace=20.0, grad_sqnorm=2.0, noise_scale=10.0),
    step(3, noise_trace=None, grad_sqnorm=3.0, noise_scale=None),
]  # one part missing: not used


def row_of(root):
    [row] = results.load([root]).to_dict("records")
    return row


def test_noise_scale_is_the_ratio_of_sums_over_steps_with_both_parts(tmp_path):
    make_run(tmp_path, "r", "sgd", 100, 0, [50, 60], events=NOISY)
    row = row_of(tmp_path)
    assert row["noise_scale"] == pytest.approx((10 + 30 + 20) / (1 - 0.5 + 2))  # 24, not a mean of step ratios
    assert row["noise_scale_steps"] == 3


def test_the_report_and_the_figure_count_the_same_steps_after_the_warm_up(tmp_path):
    """One estimator: B_simple over the steps after the warm-up, in the report and in the diagnostics figure's
    curve. Batch 100 of 1,000 images, warm-up 0.2 epochs = 200 images: steps 0 and 1 are left out of both."""
    make_run(tmp_path, "r", "sgd", 100, 0, [50, 60], events=NOISY, schedule={"warmup_epochs": 0.2})
    study = results.load_study([tmp_path])
    row = study.runs.iloc[0]
    assert row["noise_scale"] == pytest.approx(20 / 2) and row["noise_scale_steps"] == 1
    events = plots.run_events(study, study.groups.iloc[0])
    assert list(events["after_warmup"]) == [False, False, True, True]
    curve = plots.line(events, "noise_scale")
    assert list(curve["noise_scale"].dropna()) == pytest.approx([row["noise_scale"]])


def test_the_windowed_noise_scale_counts_only_the_steps_in_its_epochs(tmp_path):
    """Batch 100 of 1,000 training images: epochs [1, 1.5) are steps 10-14. B_simple rises within a run; the window
    reads the same images at every batch, and a run that stops inside the window has none (not a shorter one)."""
    events = [step(s, noise_trace=float(s * s), grad_sqnorm=1.0) for s in range(25)]  # rising within the run
    make_run(tmp_path / "long", "r", "sgd", 100, 0, [50, 60], events=events)
    make_run(tmp_path / "short", "r", "sgd", 100, 0, [50, 60], events=events[:13])
    rows = {k: row_of(tmp_path / k) for k in ("long", "short")}
    assert rows["long"]["noise_scale_window"] == pytest.approx(sum(s * s for s in range(10, 15)) / 5)  # 146
    assert rows["long"]["noise_scale"] == pytest.approx(sum(s * s for s in range(25)) / 25)  # the whole run's: 196
    assert math.isnan(rows["short"]["noise_scale_window"])


@pytest.mark.parametrize(
    "events",
    [
        [step(0, noise_trace=None, grad_sqnorm=None, noise_scale=None), step(1, noise_trace=None, grad_sqnorm=None)],
        [step(0, noise_trace=5.0, grad_sqnorm=-1.0), step(1, noise_trace=5.0, grad_sqnorm=0.5)],  # Σ|G|² <= 0
        [step(0), step(1)],  # never logged
    ],
)
def test_no_noise_scale_without_data(tmp_path, events):
    make_run(tmp_path, "r", "sgd", 100, 0, [50, 60], events=events)
    assert math.isnan(row_of(tmp_path)["noise_scale"])


def test_old_runs_without_batch_use_the_plan(tmp_path):
    make_run(tmp_path, "r", "lars", 100, 0, [50, 60], events=[step(s) for s in range(20)], legacy=True)
    row = row_of(tmp_path)
    assert (row["mean_batch"], row["final_batch"], row["batch_varies"]) == (100, 100, False)
    assert math.isnan(row["mean_gain"]) and math.isnan(row["noise_scale"])
    curve = results.load_study([tmp_path]).curves
    assert list(curve["batch"]) == [100, 100] and list(curve["schedule_epoch"]) == list(curve["epoch"])
    # No events at all: mean batch = images seen / steps of the last evaluation.
    make_run(tmp_path / "b", "r", "lars", 250, 0, [50, 60], legacy=True)
    assert row_of(tmp_path / "b")["mean_batch"] == 250


def test_new_metric_columns_are_read(tmp_path):
    run = make_run(tmp_path, "r", "adascale_sgd", 100, 0, [50, 60], legacy=True)
    lines = (run / "metrics.csv").read_text().splitlines()
    lines = [lines[0] + ",schedule_epoch,batch", lines[1] + ",1.5,100", lines[2] + ",3.25,200"]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    curve = results.load_study([tmp_path]).curves
    assert list(curve["schedule_epoch"]) == [1.5, 3.25] and list(curve["epoch"]) == [1.0, 2.0]
    assert list(curve["batch"]) == [100, 200]
    row = row_of(tmp_path)  # no events: the batch from metrics.csv (images seen / steps for the mean)
    assert (row["final_batch"], row["mean_batch"], row["batch_varies"]) == (200, 100, True)


def adaptive(root, seed, noise=(10.0, 30.0)):
    """SimiGrad-LARS starting at batch 100: 100, 100, 200, 400; noise scale (Σ trace / Σ |G|²) per seed given."""
    events = [
        step(0, batch=100, similarity=0.9, noise_trace=noise[0], grad_sqnorm=1.0),
        step(1, batch=100, similarity=0.8, noise_trace=noise[1], grad_sqnorm=1.0),
        step(2, batch=200, similarity=0.5),
        step(3, batch=400, similarity=0.2),
    ]
    return make_run(
        root,
        f"simi-s{seed}",
        "simigrad_lars",
        100,
        seed,
        [50, 62],
        events=events,
        data_workers=seed,
        adaptive_batch={"target_similarity": 0.5, "min_batch": 100, "max_batch": 800},
    )


def test_adaptive_runs_report_mean_and_final_batch_and_aggregate_under_the_start(tmp_path):
    adaptive(tmp_path, 0, (10.0, 30.0))  # B_simple 20
    adaptive(tmp_path, 1, (20.0, 40.0))  # B_simple 30
    make_run(tmp_path, "lars", "lars", 100, 0, [50, 61])
    runs = results.load([tmp_path])
    r = runs.set_index("recipe").loc["simi-s0"]
    assert (r["mean_batch"], r["final_batch"], r["batch_varies"], r["global_batch"]) == (200, 400, True, 100)
    groups = results.aggregate(runs).set_index("optimizer")
    g = groups.loc["simigrad_lars"]
    assert (g["n"], g["global_batch"], g["noise_scale"]) == (2, 100, 25.0)
    assert g["noise_scale_std"] == pytest.approx(np.std([20, 30], ddof=1))
    table = report.table(runs)
    for column in ("noise scale (B_simple)", "mean batch", "final batch"):
        assert column in table.columns
    assert "mean gain" not in table.columns  # no run logged a gain
    rows = {r[0]: dict(zip(table.columns, r)) for r in table.text_rows()}
    assert rows["simi-s*"]["noise scale (B_simple)"] == "25.0 ± 7.1"
    assert rows["lars"]["noise scale (B_simple)"] == "—"  # a run without the statistics gets no value
    assert rows["simi-s*"]["mean batch"] == "200.0 ± 0.0" and rows["simi-s*"]["final batch"] == "400 ± 0"
    assert rows["lars"]["mean batch"] == "100.0" and rows["lars"]["final batch"] == "100"
    text = render(table)
    assert "ratio of sums" in text and "starting batch" in text
    compare = render(tables.build("compare", results.load_study([tmp_path])))
    assert "SimiGrad-LARS" in compare and "Adaptive-batch recipes" in compare


def test_report_without_step_statistics_has_no_new_columns(tmp_path):
    make_run(tmp_path, "r", "lars", 100, 0, [50, 60], events=[step(0), step(1)])
    table = report.table(results.load([tmp_path]), per_run=True)
    assert not {"noise scale (B_simple)", "mean gain", "mean batch"} & set(table.columns)


def test_mean_gain_per_run(tmp_path):
    events = [step(0, gain=1.0), step(1, gain=None), step(2, gain=3.0), step(3, gain=3.5)]
    make_run(tmp_path, "ada", "adascale_lars", 100, 0, [50, 60], events=events)
    runs = results.load([tmp_path])
    assert runs["mean_gain"].item() == pytest.approx(2.5)
    table = report.table(runs, per_run=True)
    assert dict(zip(table.columns, table.text_rows()[0]))["mean gain"] == "2.50"


# compare: any optimizers, one batch.


def three_optimizers(root):
    for seed in (0, 1):
        make_run(root, f"ada-100-s{seed}", "adascale_lars", 100, seed, [50, 63, 70], data_workers=seed)
        make_run(root, f"lamb-100-s{seed}", "simigrad_lamb", 100, seed, [50, 58, 61], data_workers=seed)
    make_run(root, "adamw-500", "adamw", 500, 0, [40, 61])
    make_run(root, "ada-500", "adascale_lars", 500, 0, [40, 55])


def test_compare_any_optimizers_at_one_batch(tmp_path, capsys):
    three_optimizers(tmp_path)
    study = results.load_study([tmp_path])
    table = tables.build("compare", study, baseline="simigrad_lamb", batch=100)
    assert table.title.startswith("Optimizers compared at global batch 100")
    rows = {r[1]: r for r in table.rows}
    assert set(rows) == {"AdaScale-LARS", "SimiGrad-LAMB"} and all(r[0] == 100 for r in table.rows)
    # A reaches 60 at step 20 (epoch 2), B at step 30: speedup 1.5.
    assert rows["AdaScale-LARS"][table.columns.index("speedup steps (a)")].text() == "1.50"
    assert rows["SimiGrad-LAMB"][-1].text() == "baseline B"
    assert main(["table", "compare", str(tmp_path), "--batch", "500", "--baseline", "adamw"]) == 0
    out = capsys.readouterr().out
    assert "AdaScale-LARS" in out and "AdamW" in out and "SimiGrad" not in out and "| 100 " not in out


def test_batch_option_errors(tmp_path, capsys):
    three_optimizers(tmp_path)
    assert main(["table", "compare", str(tmp_path), "--batch", "256"]) == 2
    assert "--batch 256: no run has that global batch; the runs have 100, 500" in capsys.readouterr().err
    assert main(["table", "vrgd-imagenet", str(tmp_path), "--batch", "100"]) == 2
    assert "--batch is an option of `bench table compare` only" in capsys.readouterr().err
    with pytest.raises(UserError):
        tables.build("mlperf-epochs", results.load_study([tmp_path]), batch=100)


# Per-step figure data.


def test_run_events_count_images_from_each_steps_batch(tmp_path):
    adaptive(tmp_path, 0)
    make_run(tmp_path, "old", "lars", 250, 0, [50, 60], events=[step(s) for s in range(4)])
    study = results.load_study([tmp_path])
    groups = study.groups.set_index("optimizer")
    e = plots.run_events(study, groups.loc["simigrad_lars"])
    assert list(e["epoch"]) == [0.1, 0.2, 0.4, 0.8]  # (100, 200, 400, 800 images) / 1000
    old = plots.run_events(study, groups.loc["lars"])
    assert list(old["epoch"]) == [0.25, 0.5, 0.75, 1.0]
    assert groups.loc["simigrad_lars", "batch_varies"] and not groups.loc["lars", "batch_varies"]  # what plots read


def test_smoothed_noise_scale_is_a_ratio_of_sums_per_slice():
    e = pd.DataFrame(
        {
            "epoch": [0.1, 0.2, 0.3, 0.4],
            "noise_trace": [10.0, 30.0, 8.0, 4.0],
            "grad_sqnorm": [1.0, 1.0, -1.0, 0.5],
            "noise_scale": [10.0, 30.0, None, 8.0],
        }
    )
    two = plots.binned_ratio(e, "noise_scale", "noise_trace", "grad_sqnorm", bins=2)
    assert two["noise_scale"].iloc[0] == pytest.approx(20.0)  # (10 + 30) / (1 + 1)
    assert math.isnan(two["noise_scale"].iloc[1])  # (8 + 4) / (-1 + 0.5): not positive
    assert list(plots.line(e, "noise_scale")["noise_scale"].iloc[:2]) == [10.0, 30.0]  # one slice per step
    assert list(plots.binned(e, "noise_scale", bins=2)["noise_scale"]) == [20.0, 8.0]  # other keys: the mean


@pytest.mark.slow
def test_batch_scaling_figure_only_when_logged(tmp_path):
    adaptive(tmp_path / "a", 0)
    events = [step(s, gain=1 + s / 10) for s in range(10)]
    make_run(tmp_path / "a", "ada", "adascale_lars", 100, 0, [50, 60], events=events)
    written = plots.plot_all(results.load_study([tmp_path / "a"]), tmp_path / "plots")
    assert {p.name for p in written} >= {"batch_scaling.png", "batch_scaling.svg"}
    make_run(tmp_path / "b", "old", "lars", 100, 0, [50, 60], events=[step(s, batch=100) for s in range(10)])
    written = plots.plot_all(results.load_study([tmp_path / "b"]), tmp_path / "plots-b")
    assert not any("batch_scaling" in p.name for p in written)  # a constant batch is not drawn over training


# Width vs depth: steps to target by model.

WIDE = {"layers": [1, 1, 1, 1], "channels": [44, 88, 176, 352]}
DEEP = {"layers": [4, 4, 4, 4], "channels": [20, 40, 80, 160]}


def width_depth(root):
    """Two model shapes on one problem (1000 images): wide reaches 60 at epoch 1 up to batch 500 and misses at
    1000; deep reaches it at epoch 2 at every batch. Seeds 0 and 1 of wide-b100 reach at epochs 1 and 2."""
    for batch in (100, 200, 500, 1000):
        wide = [62, 70] if batch < 1000 else [40, 50]
        make_run(root, f"wide-b{batch}", "lars", batch, 0, wide, model="resnet18", model_kwargs=WIDE)
        make_run(root, f"deep-b{batch}", "lars", batch, 0, [50, 61], model="resnet18", model_kwargs=DEEP)
    make_run(root, "wide-b100", "lars", 100, 1, [55, 65], model="resnet18", model_kwargs=WIDE, data_workers=3)
    make_run(root, "other-problem", "lars", 100, 0, [62, 70], model="resnet18", model_kwargs=WIDE, target=50)


@pytest.mark.slow
def test_steps_to_target_by_model_data(tmp_path):
    width_depth(tmp_path)
    study = results.load_study([tmp_path])
    models = plots.by_model(study)
    assert len(models) == 1  # the target-50 problem has one model: no figure
    [data] = models.values()
    lines = sorted(set(data["line"]))
    assert lines == ["deep: resnet18 4x4x4x4 ch20-40-80-160", "wide: resnet18 1x1x1x1 ch44-88-176-352"]
    wide = data[data["line"] == lines[1]].set_index("global_batch")
    deep = data[data["line"] == lines[0]].set_index("global_batch")
    assert list(deep["steps_to_target"]) == [20, 10, 4, 2]  # epoch 2 at 1000 images
    assert wide.loc[100, "steps_to_target"] == 15 and wide.loc[100, "n"] == 2  # seeds at steps 10 and 20
    assert wide.loc[100, "steps_to_target_std"] == pytest.approx(np.std([10, 20], ddof=1))
    assert list(wide["steps_to_target"].iloc[1:3]) == [5, 2] and math.isinf(wide.loc[1000, "steps_to_target"])
    assert set(data["problem_label"]) == {"synthetic data (10 classes, 1,000 train images), 64 px, target 60%"}
    written = plots.plot_all(study, tmp_path / "plots")
    assert {p.name for p in written} >= {"steps_to_target_by_model.png", "steps_to_target_by_model.svg"}


def test_one_model_shape_draws_no_by_model_figure(tmp_path):
    make_run(tmp_path, "a-b100", "lars", 100, 0, [62], model="resnet18", model_kwargs=WIDE)
    make_run(tmp_path, "b-b100", "sgd", 100, 0, [62], model="resnet18", model_kwargs=WIDE)
    assert plots.by_model(results.load_study([tmp_path])) == {}


def test_by_model_lines_per_optimizer_and_name_prefix(tmp_path):
    width_depth(tmp_path)
    make_run(tmp_path, "wide-sgd-b100", "sgd", 100, 0, [61], model="resnet18", model_kwargs=WIDE)
    [data] = plots.by_model(results.load_study([tmp_path])).values()
    assert "wide: resnet18 1x1x1x1 ch44-88-176-352, LARS" in set(data["line"])
    assert "wide-sgd: resnet18 1x1x1x1 ch44-88-176-352, SGD" in set(data["line"])
    assert plots.name_prefix(["lars-b512-s*", "lars-b128-s*"]) == "lars"
    assert plots.name_prefix(["x-1k", "y-2k"]) == ""


def test_mean_curve_of_adaptive_seeds_pairs_their_evaluations(tmp_path):
    for seed in (0, 1):
        run = make_run(
            tmp_path,
            f"simi-s{seed}",
            "simigrad_lars",
            100,
            seed,
            [50 + seed * 10, 60 + seed * 10],
            data_workers=seed,
            adaptive_batch={"target_similarity": 0.5},
        )
        if seed:  # the second seed grew its batch sooner: fewer steps to the same epochs
            metrics = pd.read_csv(run / "metrics.csv").assign(step=[8, 15], batch=[100, 200])
            metrics.to_csv(run / "metrics.csv", index=False)
    study = results.load_study([tmp_path])
    assert sorted(study.curves["step"]) == [8, 10, 15, 20]
    m = study.mean_curve(study.groups["runs"].iloc[0])
    assert list(m["step"]) == [9, 17.5] and list(m["val_top1"]) == [55, 65] and list(m["n"]) == [2, 2]


def test_thinned_events_are_placed_by_their_step_number(tmp_path):
    """Events every 3rd step and the last (logging.events_every_steps 3) of 26 steps of 100 images in 1,000:
    each logged step sits at its number x the batch, in the figure's epochs, the warm-up's cut (0.2 epochs: steps
    from 2 on count) and the noise window (epochs [1, 1.5): steps 10-14, of which 12 is logged)."""
    logged = [*range(0, 26, 3), 25]
    events = [step(s, noise_trace=float(s * s), grad_sqnorm=1.0) for s in logged]
    make_run(tmp_path, "r", "sgd", 100, 0, [50, 60], events=events, schedule={"warmup_epochs": 0.2})
    study = results.load_study([tmp_path])
    row = study.runs.iloc[0]
    assert row["noise_scale_window"] == pytest.approx(12 * 12)
    assert row["noise_scale"] == pytest.approx(sum(s * s for s in logged[1:]) / len(logged[1:]))
    assert row["noise_scale_steps"] == len(logged) - 1
    e = plots.run_events(study, study.groups.iloc[0])
    assert list(e["epoch"]) == pytest.approx([(s + 1) / 10 for s in logged])
    assert list(e["after_warmup"]) == [s >= 2 for s in logged]
