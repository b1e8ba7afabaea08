"""What the branching windows imply and how they are checked: the batch schedule they imply (bench table
branching's claim), the windows chained end to end into steps at a ladder's batches (bench table ladder-check), and
the schedules table that runs the implied schedule against the others (bench table schedules)."""

import math

import pytest

from bench.analysis import branch_check, branching, schedules
from bench.analysis import results as results_mod
from tests.helpers import make_run


def window(point: int, delta: int, ratios: dict, target: float = 60.0) -> branching.Window:
    return branching.Window("lars", "lars", 64, point, delta, "val_top1", 50.0, target, ratios)


def test_the_implied_schedule_doubles_while_the_cautious_critical_batch_passes_it_and_never_falls():
    linear = {2: {0: 1.0}, 4: {0: 1.0}, 8: {0: 1.0}, 16: {0: 1.0}}  # no k passes 1.2: ∞, capped at 16 x 64
    ws = [
        window(1000, 500, {2: {0: 1.0}, 4: {0: 1.3}, 8: {0: 3.0}, 16: {0: 4.0}}),  # between 128 and 256
        window(1000, 1000, {2: {0: 1.0}, 4: {0: 1.0}, 8: {0: 1.3}, 16: {0: 4.0}}),  # between 256 and 512
        window(2000, 500, {2: {0: 1.5}, 4: {0: 2.0}, 8: {0: 3.0}, 16: {0: 4.0}}),  # below 128: the batch stays
        window(3000, 500, linear),
    ]
    crits = [w.critical() for w in ws]
    assert 128 < crits[0] < 256 < crits[1] < 512 and crits[2] < 128 and math.isinf(crits[3])
    # at 1,000: the smaller Δ's (the cautious one) gives 128; at 2,000 no fall; at 3,000 the cap, 1,024
    assert branching.implied_schedule(ws) == {1000: 128, 3000: 1024}
    [said] = branching._schedule_claim("lars", ws)
    assert "64 at first, then 128 from 1,000 images, 1,024 from 3,000 images" in said
    assert "by_images: {1000: 128, 3000: 1024}" in said
    waiting = [*ws[:3], branching.Window(**{**ws[3].__dict__, "waiting": True})]
    assert branching.implied_schedule(waiting) is None  # no schedule while a window waits


def test_windows_chained_end_to_end_give_each_stretch_its_points_ratio():
    # stretches [0, 2000), [2000, 3000), [3000, total): the first from 0, the last to the reference's images
    assert branch_check.chained_images([1000, 2000, 3000], [1.0, 2.0, 4.0], 3500) == pytest.approx(
        2000 * 1.0 + 1000 * 2.0 + 500 * 4.0
    )
    assert branch_check.chained_images([1000, 2000], [1.5, 1.5], 1200) == pytest.approx(1800)  # before 2,000
    ws = [window(1000, 500, {2: {0: 1.0, 1: 1.2}}), window(2000, 500, {2: {0: 2.0, 1: 2.4}})]
    cell, word = branch_check._prediction(ws, 2, 3000, 128)
    assert word is None and cell.value == pytest.approx((2000 * 1.1 + 1000 * 2.2) / 128)
    assert cell.ci == pytest.approx(((2000 * 1.0 + 1000 * 2.0) / 128, (2000 * 1.2 + 1000 * 2.4) / 128))
    # an unreadable window lends its stretch the previous point's ratio, and the cell says so
    unreadable = [ws[0], window(2000, 500, {2: {0: math.nan, 1: math.nan}}, target=math.nan)]
    cell, _ = branch_check._prediction(unreadable, 2, 3000, 128)
    assert cell.value == pytest.approx(3000 * 1.1 / 128) and "2,000 carried" in cell.note
    assert branch_check._prediction(ws, 1, 3000, 64)[0].value == pytest.approx(3000 / 64)  # the reference itself
    assert branch_check._prediction(ws, 4, 3000, 256)[1] == "not branched"
    missed = [ws[0], window(2000, 500, {2: {0: math.inf, 1: math.inf}})]
    assert branch_check._prediction(missed, 2, 3000, 128)[1] == "missed"
    # a missed window, then one after the reference's target (unreadable, its stretch empty): still missed, and the
    # empty stretch is neither inf x 0 nor 'carried'
    past = [*missed, window(4000, 500, {2: {0: math.nan, 1: math.nan}}, target=math.nan)]
    cell, word = branch_check._prediction(past, 2, 3000, 128)
    assert word == "missed" and cell.value is None
    cell, _ = branch_check._prediction([ws[0], ws[1], past[2]], 2, 3000, 128)
    assert cell.value == pytest.approx((2000 * 1.1 + 1000 * 2.2) / 128) and "carried" not in cell.note


def test_the_check_words_count_the_batches_inside_the_ladders_intervals():
    assert branch_check._word(100, (90, 110, 0.9)) == "inside"
    assert branch_check._word(80, (90, 110, 0.9)) == "below" and branch_check._word(120, (90, 110, 0.9)) == "above"
    said = branch_check._check_words({"inside": [64, 128], "below": [256], "not branched": [2048]})
    assert said == "inside the ladder's interval at 2 of 3 batches; below at 256; not branched at 2,048"


def test_ladder_check_of_a_branch_tree_alone_is_one_sentence(tmp_path, monkeypatch):
    make_run(tmp_path, "a", "lars", 100, 1, [50, 61])
    study = results_mod.load_study([tmp_path])
    assert not branch_check.ladder_check(study).rows  # no branches: an empty table that says so
    monkeypatch.setattr(branching, "windows", lambda study: [window(1000, 500, {2: {0: 1.0}})])
    from bench.errors import UserError

    with pytest.raises(UserError, match="bench table ladder-check BRANCH_DIR LADDER_DIR"):
        branch_check.ladder_check(study)


def test_the_schedules_table_compares_steps_and_images_paired_by_seed(tmp_path):
    """A constant batch of 500 that reaches 60% in fewer steps but more images than a declared schedule from 100:
    each ratio is the seeds' geometric mean with its interval, and the words follow the interval."""
    by_images = {"min_batch": 100, "max_batch": 500, "by_images": {10_000: 500}}
    sched = {1: [61, 62, 63], 2: [55, 61, 62], 3: [61, 62, 63], 4: [55, 61, 62]}  # epochs 1, 2, 1, 2
    const = {1: [50, 55, 61], 2: [50, 55, 55, 61], 3: [50, 55, 55, 61], 4: [50, 55, 61]}  # epochs 3, 4, 4, 3
    for seed, val in sched.items():
        make_run(tmp_path, "schedule", "lars", 100, seed, val, adaptive_batch=by_images)
    for seed, val in const.items():
        make_run(tmp_path, "constant-500", "lars", 500, seed, val)
    make_run(tmp_path, "constant-500", "lars", 500, 5, [50], status="running")  # unfinished: not read
    table = schedules.schedules(results_mod.load_study([tmp_path]))
    first, second = table.rows
    assert first[0] == "schedule" and [c.note for c in first[-2:]] == ["reference", "reference"]
    assert second[0] == "constant-500" and second[3] == "4/4"
    steps, images = second[-2:]
    # steps: (6, 8, 8, 6) / (10, 20, 10, 20) = 0.6, 0.4, 0.8, 0.3; images: (3, 4, 4, 3) / (1, 2, 1, 2) thousand
    assert steps.value == pytest.approx(math.exp(sum(map(math.log, [0.6, 0.4, 0.8, 0.3])) / 4))
    assert images.value == pytest.approx(math.exp(sum(map(math.log, [3, 2, 4, 1.5])) / 4))
    assert steps.ci[1] < 1 < images.ci[0]
    [said] = table.claims
    assert "constant-500 takes fewer steps" in said and "constant-500 takes more images" in said
    from bench.analysis.render import FORMATS, render

    assert all(render(table, fmt) for fmt in FORMATS)  # csv too: the reference's cells are cells


def test_the_figure_draws_each_arm_and_delta_and_marks_a_critical_batch_above_the_branches(tmp_path):
    from bench.analysis import branch_plots

    ws = [
        window(1000, 500, {2: {0: 1.0, 1: 1.1}, 4: {0: 1.3, 1: 1.5}}),
        window(2000, 500, {2: {0: 1.0, 1: 1.0}, 4: {0: 1.0, 1: 1.1}}),  # ∞: no k passes 1.2
    ]
    fig = branch_plots.plot_critical_along_training(ws)
    left = fig.axes[0]
    [line] = [ln for ln in left.get_lines() if ln.get_label().startswith("lars")]
    assert list(line.get_ydata()) == pytest.approx([ws[0].critical()]) and 128 < ws[0].critical() < 256
    [above] = left.collections[-1:]  # the open triangle at the largest branch batch, 4 x 64
    assert above.get_offsets().tolist() == [[2000.0, 256.0]]
    assert "no branch batch passed 1.2" in fig.bench_caption


def test_each_arm_and_delta_is_its_own_line_with_its_seeds_range():
    """Two arms x two Δs: four lines, named; an arm's colour shared by its Δs and apart from the other arm's, a Δ's
    line style shared by the arms; each point's seed range as a vertical line."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgb

    from bench.analysis import branch_plots

    spread, same = {2: {0: 1.0, 1: 1.1}, 4: {0: 1.3, 1: 1.5}}, {2: {0: 1.0, 1: 1.0}, 4: {0: 1.4, 1: 1.4}}
    ws = [
        branching.Window(
            arm, arm, 64, point, delta, "val_top1", 50.0 + point / 100, 60.0, spread if arm == "lars" else same
        )
        for arm in ("lars", "nadamw")
        for delta in (500, 1000)
        for point in (1000, 2000)
    ]
    fig = branch_plots.plot_critical_along_training(ws)
    left = fig.axes[0]
    lines = {ln.get_label(): ln for ln in left.get_lines() if ", Δ = " in ln.get_label()}
    assert set(lines) == {f"{a}, Δ = {d}" for a in ("lars", "nadamw") for d in ("500", "1,000")}
    for label, line in lines.items():
        arm = label.split(",")[0]
        expected = [w.critical() for w in ws if w.arm == arm and f"{w.delta:,}" in label]
        assert list(line.get_ydata()) == pytest.approx(expected) and len(expected) == 2
    colour = {label: to_rgb(line.get_color()) for label, line in lines.items()}
    assert colour["lars, Δ = 500"] == colour["lars, Δ = 1,000"] != colour["nadamw, Δ = 500"]
    assert lines["lars, Δ = 500"].get_linestyle() == lines["nadamw, Δ = 500"].get_linestyle()
    assert lines["lars, Δ = 500"].get_linestyle() != lines["lars, Δ = 1,000"].get_linestyle()
    drawn = sorted(
        tuple(y for _, y in segment)
        for c in left.collections
        if isinstance(c, LineCollection)
        for segment in c.get_segments()
    )
    expected = sorted(w.seed_range() for w in ws)  # each point's seeds, LARS's apart
    assert [v for span in drawn for v in span] == pytest.approx([v for span in expected for v in span])
    assert sum(high > low for low, high in drawn) == 4


def test_the_check_counts_a_branchs_own_time_not_the_references_it_carries():
    from types import SimpleNamespace

    reference = SimpleNamespace(meta={"train_time_s": 50.0, "eval_time_s": 200.0})
    carried = {"train_time_s": 20.0, "eval_time_s": 40.0}  # the reference's timers at the checkpoint
    branch = SimpleNamespace(meta={"train_time_s": 30.0, "eval_time_s": 100.0, "branched_from": carried})
    assert branch_check._hours([reference, branch]) * 3600 == pytest.approx(250.0 + 70.0)


def test_a_point_before_the_references_first_evaluation_leaves_the_top1_panel_its_other_points():
    from bench.analysis import branch_plots

    crossing = {2: {0: 1.0}, 4: {0: 1.5}}  # between 128 and 256
    early = branching.Window("lars", "lars", 64, 1000, 500, "val_top1", math.nan, 60.0, crossing)  # no Top-1 yet
    later = [
        branching.Window("lars", "lars", 64, p, 500, "val_top1", t, 60.0, crossing)
        for p, t in ((2000, 40.0), (3000, 50.0))
    ]
    fig = branch_plots.plot_critical_along_training([early, *later])
    by_images, by_top1 = (ax.get_lines()[0].get_xdata() for ax in fig.axes)
    assert len(by_images) == 3 and len(by_top1) == 2 and all(map(math.isfinite, by_top1))
    assert "shows in the left panel only" in fig.bench_caption  # the caption says where the third point went
    assert "left panel only" not in branch_plots.plot_critical_along_training(later).bench_caption
