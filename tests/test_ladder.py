"""The critical batch from the whole ladder (bench/analysis/ladder.py), the scaling table's words and crossings, and
the data the sweep figures draw (tuning_plots)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bench.analysis import ladder, results, tuning, tuning_plots
from tests.helpers import make_run

LADDER = np.array([64, 128, 256, 512, 1024])


def steps_of(b_noise: float, batches=LADDER, s_min: float = 100.0) -> np.ndarray:
    return s_min * (1 + b_noise / np.asarray(batches, float))


def test_the_fit_recovers_b_noise_and_puts_the_critical_batch_at_a_fifth_of_it():
    b = np.repeat(LADDER, 3)
    f = ladder.fit(b, steps_of(400, b), steps_of(400, b), np.zeros(len(b)))
    assert f.b_noise == pytest.approx(400, rel=0.011)  # one step of the grid (1/64 octave)
    assert 400 / 1.02 < f.low <= f.b_noise <= f.high < 400 * 1.02 and f.resolved
    assert f.critical[0] == pytest.approx(0.2 * f.b_noise)  # images 20% above E_min, the small-batch limit


def test_linear_scaling_fits_b_noise_at_infinity_and_a_miss_bounds_the_curve_from_below():
    b = np.repeat(LADDER[:3], 3)
    linear = 64_000 / b  # images to the target the same at every batch
    f = ladder.fit(b, linear, linear, linear / 10)  # on a grid of a tenth of the steps
    assert math.isinf(f.b_noise) and math.isinf(f.high) and 64 < f.low < math.inf and not f.resolved
    assert ladder.interval_text(*f.critical, f.resolved).startswith("above ")
    # a fourth batch, 512, ran 300 steps (linear scaling would need 125) without reaching the target
    missed = ladder.fit(
        [*b, 512, 512, 512], [*linear, math.inf, math.inf, math.inf], [*linear, 300, 300, 300], [0] * 12
    )
    assert math.isfinite(missed.b_noise) and missed.high < math.inf  # the bound pulls the curve up at 512
    # least squares balances the bound against the reached points: near it (0.3 of 64's steps), far from linear (1/8)
    assert steps_of(missed.b_noise, [512], 1.0)[0] / steps_of(missed.b_noise, [64], 1.0)[0] > 0.25


def test_the_interval_covers_a_known_b_noise_in_at_least_90_percent_of_simulated_studies():
    """5 reruns at each of 64-1,024, lognormal noise of 8%, steps read on an evaluation grid of 1/24 of them, a
    budget of 131,072 images (some reruns at 1,024 miss): no training, the steps simulated."""
    rng = np.random.default_rng(2026)
    b = np.repeat(LADDER, 5)
    truth = 500.0
    mean = 650 * steps_of(truth, b) / steps_of(truth, [64])[0]
    grid, budget = np.maximum(1, np.round(mean / 24)), 131072 / b
    covered, missed = 0, 0
    for _ in range(300):
        steps = np.ceil(mean * np.exp(0.08 * rng.standard_normal(len(b))) / grid) * grid
        missed += int((steps > budget).sum())
        f = ladder.fit(b, np.where(steps > budget, np.inf, steps), np.minimum(steps, budget), grid)
        covered += f.low <= truth <= f.high
    assert missed > 0  # the censoring was exercised
    assert covered / 300 >= 0.90


def ladder_run(root, arm, batch, role, seed, hit_eval, trial=0, name=None, lr=0.1, warmup=0.0, top=61.0):
    """A steps-to-target sweep's run: 1,000 training images, an evaluation every epoch (1,000 / batch steps), 20
    planned epochs, the target 60 crossed at evaluation `hit_eval` (0: never)."""
    kind = {"rerun": "best", "rerun_top": "top2"}.get(role)
    name = name or (f"s-{arm}-b{batch}-" + (f"t{trial:02d}-s0" if role == "trial" else f"{kind}-seed{seed}"))
    val = [50.0] * 20 if not hit_eval else [50.0] * (hit_eval - 1) + [top]
    tags = {"sweep": "s", "arm": arm, "trial": trial, "study": 0, "role": role, "select": "steps_to_target"}
    return make_run(
        root, name, "lars", batch, seed, val, epochs=20.0, lr=lr, tags=tags, schedule={"warmup_epochs": warmup}
    )


# hit evaluations (epochs) of the reruns per batch: images S B = S_min (B + B_noise), about 40 (B + 200); the
# runner-up's at 50 reach the target sooner (another valid selection gives another B_noise)
BEST = {25: [9, 9, 10, 9, 8], 50: [10, 10, 11, 10, 9], 100: [12, 12, 13, 12, 11], 200: [16, 16, 17, 16, 15]}
RUNNER_UP_50 = [7, 7, 8, 7, 7]
LINEAR = 8  # every batch reaches the target after 8 epochs: perfect linear scaling


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A hand-made steps sweep at batches 25-200: LARS with a near tie at 50 (its runner-up trial crossed at the
    same evaluation, second on Top-1) whose runner-up was rerun; Nesterov the same points with no near tie (its
    runner-up two evaluations behind); VRGD-LARS scaling perfectly."""
    root = tmp_path_factory.mktemp("ladder")
    for batch, hits in BEST.items():
        for arm, behind in (("lars", 0 if batch == 50 else 2), ("nesterov", 2)):
            ladder_run(root, arm, batch, "trial", 0, hits[0], trial=0)
            ladder_run(root, arm, batch, "trial", 0, hits[0] + behind, trial=1, top=60.5)
            for seed, hit in enumerate(hits, 1):
                ladder_run(root, arm, batch, "rerun", seed, hit, trial=0)
        if batch == 50:
            for seed, hit in enumerate(RUNNER_UP_50, 1):
                ladder_run(root, "lars", batch, "rerun_top", seed, hit, trial=1)
        ladder_run(root, "vrgd_lars", batch, "trial", 0, LINEAR)
        for seed in range(1, 6):
            ladder_run(root, "vrgd_lars", batch, "rerun", seed, LINEAR)
    study = results.load_study([root])
    return study, tuning.cells(study)


def reruns_fit(hits: dict) -> ladder.Fit:
    """ladder.fit over reruns crossing at these evaluations (1,000 / batch steps each)."""
    return ladder.fit(*zip(*[(b, 1000 / b * h, 1000 / b * h, 1000 / b) for b in hits for h in hits[b]]))


def test_the_interval_holds_the_estimate_of_the_other_near_tied_selection(tree):
    _, table_cells = tree
    lars_cells = table_cells[table_cells["arm"] == "lars"]
    assert list(lars_cells["near_tie"]) == [False, True, False, False]
    f = ladder.fit_ladder(lars_cells)
    selected, other = reruns_fit(BEST), reruns_fit({**BEST, 50: RUNNER_UP_50})
    assert other.b_noise < selected.b_noise / 1.2  # the two valid selections disagree...
    assert f.b_noise == selected.b_noise and f.alternatives == (other.b_noise,)
    assert f.low <= min(other.low, selected.low) and f.high >= max(other.high, selected.high)  # ...it holds both
    # Nesterov ran the same points with its runner-up two evaluations behind (no near tie): its selection's own
    assert ladder.fit_ladder(table_cells[table_cells["arm"] == "nesterov"]) == selected


def test_the_scaling_table_says_not_resolved_with_no_point_and_no_ratio(tree):
    study, table_cells = tree
    table = tuning.scaling(study, baseline="nesterov")
    rows = {(r[0], r[1]): dict(zip(table.columns, r)) for r in table.rows}
    fits = tuning.ladder_fits(table_cells)
    nesterov, lars, vrgd = fits["nesterov"], fits["lars"], fits["vrgd_lars"]
    assert nesterov.resolved and rows[("Nesterov SGD", 25)][
        "B_noise (fit) [95%]"
    ] == "{:,.0f} [{:,.0f}, {:,.0f}]".format(nesterov.b_noise, nesterov.low, nesterov.high)
    assert rows[("Nesterov SGD", 25)]["critical batch [95%]"] == "{:,.0f} [{:,.0f}, {:,.0f}]".format(*nesterov.critical)
    # the near tie widens LARS's interval past a factor of 2: no point, no ratio
    assert not lars.resolved and rows[("LARS", 25)][
        "critical batch [95%]"
    ] == "between {:,.0f} and {:,.0f} (not resolved)".format(*lars.critical[1:])
    assert not vrgd.resolved and rows[("VRGD-LARS", 25)]["critical batch [95%]"].startswith("above ")
    assert rows[("LARS / Nesterov SGD", "—")]["critical batch [95%]"].startswith("no ratio")
    claims = [n for n in table.notes if n.startswith("Claim: ")]
    critical = rows[("LARS", 25)]["critical batch [95%]"]
    assert (
        f"Claim: LARS: critical batch {critical} (95%); the ladder does not locate it; its interval holds every "
        + ("near-tied selection's estimate.")
        in claims
    )
    assert "Claim: LARS / Nesterov SGD critical batch: no ratio (not resolved)." in claims


def test_the_ratio_of_two_resolved_critical_batches_and_its_words():
    x, y = ladder.Fit(400, 300, 500), ladder.Fit(200, 180, 250)
    point, low, high = ladder.ratio_interval(x, y)
    assert (point, low, high) == (2.0, 300 / 250, 500 / 180)
    assert ladder.ratio_interval(ladder.Fit(400, 100, 500), y) is None  # a factor of 5: not resolved
    assert ladder.interval_text(400, 150, 500, False) == "between 150 and 500 (not resolved)"
    claims = tuning.scaling_claims(
        {"vrgd_lars": x, "lars": y}, ["vrgd_lars", "lars"], "lars", {"vrgd_lars": {}, "lars": {}}
    )
    assert claims[0] == "VRGD-LARS: critical batch 80 [60, 100] (95%)."
    assert claims[2] == "VRGD-LARS / LARS critical batch: 2.00 [1.20, 2.78] (≥ 90%): larger."
    near = tuning.scaling_claims(
        {"vrgd_lars": x, "lars": ladder.Fit(380, 300, 480)},
        ["vrgd_lars", "lars"],
        "lars",
        {"vrgd_lars": {}, "lars": {}},
    )
    assert near[2].endswith(": no difference resolved.")


def test_an_arms_fit_does_not_depend_on_the_other_arms(tree):
    _, table_cells = tree
    lars = table_cells[table_cells["arm"] == "lars"]
    others = table_cells[table_cells["arm"] != "lars"]
    alone = tuning.ladder_fits(lars)["lars"]
    assert tuning.ladder_fits(pd.concat([others, lars]))["lars"] == alone  # after the others, not first
    assert tuning.ladder_fits(pd.concat([lars.iloc[::-1], others]))["lars"] == alone  # its rows in any order


def test_the_crossing_is_placed_in_the_schedule_from_the_run_directory(tmp_path):
    run = ladder_run(tmp_path, "lars", 100, "rerun", 1, 3, lr=2.0)  # 10 steps an epoch, 200 planned, hit at 30
    metrics = pd.read_csv(run / "metrics.csv")
    metrics["lr"] = [2.0, 1.5, 0.5]  # a decaying schedule as the run logged it
    metrics.to_csv(run / "metrics.csv", index=False)
    assert ladder.crossing(str(run), 30.0) == (0.15, 0.25)
    assert all(math.isnan(v) for v in ladder.crossing(str(run), math.inf))  # a miss crossed nowhere
    [c] = tuning.cells(results.load_study([tmp_path])).to_dict("records")
    assert ladder.crossings(pd.Series(c)) == (0.15, 0.25)
    row = tuning.scaling(results.load_study([tmp_path])).rows[0]
    assert "15% (lr 0.25 of peak)" in row


def test_the_steps_figure_draws_the_reruns_and_scales_from_them(tmp_path):
    """Lines from the reruns' medians (the best trial only a faint marker), the perfect-scaling line through the
    smallest batch's reruns' median, the performance profile from the reruns."""
    for arm, trial_hit, reruns in (("lars", 3, [4, 4, 5]), ("vrgd_lars", 2, [5, 6, 6])):
        for batch in (100, 200):
            ladder_run(tmp_path, arm, batch, "trial", 0, trial_hit)
            for seed, hit in enumerate(reruns, 1):
                ladder_run(tmp_path, arm, batch, "rerun", seed, hit)
    table_cells = tuning.cells(results.load_study([tmp_path]))
    lines = tuning_plots.steps_lines(table_cells, ["lars", "vrgd_lars"])
    assert list(lines["vrgd_lars"]["median"]) == [60, 30] and list(lines["vrgd_lars"]["best_trial"]) == [20, 10]
    assert tuple(lines["lars"].iloc[0][["low", "high"]]) == (40, 50)  # 3 reruns: the smallest to the largest
    assert tuning_plots.scaling_anchor(lines) == (100, 40)  # LARS's reruns, not VRGD-LARS's best trial (20)
    # VRGD-LARS's best trials were the faster, its reruns the slower: the profile follows the reruns
    profile = tuning.performance_profile(table_cells, np.array([1.0, 1.4, 1.5]))
    assert list(profile["lars"]) == [1, 1, 1] and list(profile["vrgd_lars"]) == [0, 0, 1]


def test_the_lr_figure_joins_only_trials_of_one_warm_up():
    trials = pd.DataFrame({"lr": [0.5, 2.0, 1.0, 4.0], "warmup_epochs": [0.1, 0.1, 0.5, 0.2], "steps": [9, 7, 8, 6]})
    segments = tuning_plots.warmup_segments(trials)
    assert [list(s["lr"]) for s in segments] == [[0.5, 2.0], [4.0], [1.0]]


def test_the_gap_figures_range_is_symmetric_and_no_narrower_than_the_mde():
    gaps = {"lars": [0.1, 0.9, -0.3, 0.6, 0.2], "vrgd_lars": [1.2, 0.5, 0.9, 0.4, 1.3]}  # 0.56 pp apart, noisy
    table_cells = pd.DataFrame(
        [{"arm": a, "global_batch": 64, "gap_top1": tuple(g), "seeds": (1, 2, 3, 4, 5)} for a, g in gaps.items()]
    )
    limit, mde = tuning_plots.gap_axis(table_cells, ["vrgd_lars", "lars"])
    diff = np.subtract(gaps["vrgd_lars"], gaps["lars"])
    assert mde > 0.56 and limit >= mde  # the difference cannot fill the axis
    c = tuning.power.compare(gaps["vrgd_lars"], gaps["lars"], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    assert c.test == "paired" and c.diff == pytest.approx(diff.mean())
    assert mde == pytest.approx(tuning.power.comparison_mde(c, tuning.power.ALPHA))
