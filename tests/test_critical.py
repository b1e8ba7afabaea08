"""The critical batch's curve-free and three-parameter estimates and the F test of alpha = 1 (bench/analysis/critical.py),
against the equations in float64."""

import math

import numpy as np
import pytest

from bench.analysis import critical

LADDER = np.array([16.0, 32, 64, 128, 256, 512, 1024, 2048])


def steps_of(batches, b_noise, alpha, s_min=100.0):
    """S(B) = S_min (1 + (B_noise / B)^alpha), the three-parameter curve itself."""
    return s_min * (1 + (b_noise / np.asarray(batches, float)) ** alpha)


def reruns(steps, seeds=5, noise=0.0, rng=None):
    """Per batch `seeds` reruns about `steps` (lognormal noise), no grid, none missed: (batches, steps, ran, grids)."""
    rng = rng or np.random.default_rng(0)
    b = np.repeat(LADDER, seeds)
    s = np.repeat(steps, seeds) * np.exp(noise * rng.standard_normal(len(b)))
    return b, s, s.copy(), np.zeros(len(b))


def test_critical3_at_alpha_one_is_the_two_parameter_curves_closed_form():
    # images(B) / images(B0) = (B_noise + B) / (B_noise + B0) = 1.2 at B = 0.2 B_noise + 1.2 B0
    b_noise = np.array([10.0, 300.0, 5000.0])
    got = critical.critical3(b_noise, np.ones(3), 16.0)
    np.testing.assert_allclose(got, 0.2 * b_noise + 1.2 * 16, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.6, 1.5])
def test_critical3_solves_the_three_parameter_ratio(alpha):
    b_noise, base = 400.0, 16.0
    (got,) = critical.critical3(np.array([b_noise]), np.array([alpha]), base)
    ratio = got * steps_of(got, b_noise, alpha) / (base * steps_of(base, b_noise, alpha))
    assert ratio == pytest.approx(1.2, rel=1e-5)
    grid = np.geomspace(base, got, 200)[:-1]  # the first crossing: every batch below it is under 1.2
    assert (grid * steps_of(grid, b_noise, alpha) / (base * steps_of(base, b_noise, alpha)) < 1.2).all()


def test_the_three_parameter_fit_recovers_a_bent_curve_and_its_critical_batch():
    b_noise, alpha = 300.0, 1.4
    truth = critical.critical3(np.array([b_noise]), np.array([alpha]), 16.0)[0]
    curve = critical.curve3(*reruns(steps_of(LADDER, b_noise, alpha), noise=0.01), level=0.95)
    assert curve.alpha == pytest.approx(alpha, rel=0.05)
    assert curve.critical == pytest.approx(truth, rel=0.05)
    assert curve.critical_low <= truth <= curve.critical_high
    assert curve.alpha_low <= alpha <= curve.alpha_high
    assert curve.alpha_low > 1  # 1% noise on 40 reruns resolves the bend


def test_a_draw_of_every_rerun_once_is_the_fits_own_point():
    data = reruns(steps_of(LADDER, 250.0, 0.8), noise=0.05)
    grid = critical.curve_grid(LADDER)
    curve = critical.curve3(*data, level=0.95, grid=grid)
    draws = critical.Curve3Draws(grid, critical.readings(*data))
    assert draws.critical(np.arange(len(data[0]))) == curve.critical


def test_the_model_free_crossing_interpolates_on_log_batch():
    batches = np.array([16.0, 32, 64, 128])
    images = np.array([1.0, 1.1, 1.3, 2.0])  # images / linear: passes 1.2 between 32 and 64
    fraction = (math.log(1.2) - math.log(1.1)) / (math.log(1.3) - math.log(1.1))
    expected = 32 * 2**fraction
    assert critical.crossing(batches, 100 * images * 16 / batches) == pytest.approx(expected, rel=1e-12)


def test_the_model_free_crossing_at_its_edges():
    batches = np.array([16.0, 32, 64])
    assert critical.crossing(batches, np.array([100.0, 52, 27])) == math.inf  # never 20% above linear
    assert critical.crossing(batches, np.array([100.0, 55, math.inf])) == 32.0  # the median missed: the rung below
    assert math.isnan(critical.crossing(batches, np.array([math.inf, 55, 30])))


def test_model_free_reads_each_rerun_at_the_middle_of_its_last_interval_and_ranks_a_miss_above_all():
    # 5 reruns at each of two batches; at 32 two missed (a median still exact), each read at S - G / 2
    batches = np.array([16.0] * 5 + [32.0] * 5)
    steps = np.array([100, 104, 108, 112, 116, 70, 72, np.inf, 74, np.inf], float)
    ran = np.where(np.isfinite(steps), steps, 80.0)
    grids = np.full(10, 4.0)
    b, med = critical.medians(critical.readings(batches, steps, ran, grids))
    np.testing.assert_array_equal(med, [106.0, 72.0])  # 108 - 2 and 74 - 2
    ratio = 72 * 32 / (106 * 16)  # images / linear at 32: 1.36, so the crossing lies between 16 and 32
    expected = 16 * 2 ** (math.log(1.2) / math.log(ratio))
    assert critical.model_free(batches, steps, ran, grids) == pytest.approx(expected, rel=1e-12)


def test_the_F_test_of_alpha_one_finds_a_bend_and_not_a_straight_curve():
    rng = np.random.default_rng(1)
    straight = critical.alpha_test(*reruns(steps_of(LADDER, 300.0, 1.0), noise=0.03, rng=rng))
    bent = critical.alpha_test(*reruns(steps_of(LADDER, 300.0, 1.5), noise=0.03, rng=rng))
    assert straight.p > 0.05 and straight.alpha == pytest.approx(1.0, abs=0.15)
    assert bent.p < 0.001 and bent.alpha == pytest.approx(1.5, rel=0.1)
    assert bent.batches == len(LADDER)


def test_the_F_test_needs_four_batch_means():
    b, s, ran, g = reruns(steps_of(LADDER, 300.0, 1.0))
    keep = b <= 64
    assert math.isnan(critical.alpha_test(b[keep], s[keep], ran[keep], g[keep]).p)


def test_linear_rungs_stop_at_the_first_batch_off_linear_scaling():
    batches = np.array([16.0, 32, 64, 128])
    rng = np.random.default_rng(2)
    linear = 1000 * 16 / batches  # images / linear 1, 1, 1.3, 2
    truth = linear * np.array([1.0, 1.0, 1.3, 2.0])
    draws = truth[None, :] * np.exp(0.03 * rng.standard_normal((400, 4)))
    assert critical.linear_rungs(batches, draws, 0.95) == [16, 32]


def test_a_bent_curve_through_three_batch_means_says_its_alpha_is_not_testable():
    """Three parameters through three batch means leave no residual: the F test of alpha = 1 has no p, and the
    claim says so rather than 'not rejected (p nan)'."""
    from types import SimpleNamespace

    from bench.analysis import critical
    from bench.analysis.scaling import alternatives_words

    bent = SimpleNamespace(found=True, critical=200.0, critical_low=150.0, critical_high=260.0, alpha=1.1,
                           alpha_low=0.9, alpha_high=1.3)  # fmt: skip
    a = SimpleNamespace(bent=bent, alpha=critical.AlphaTest(1.1, math.nan, math.nan, 3), model_free=(math.nan,) * 3,
                        linear=(64,), smallest=64.0, near_smallest=lambda f: [])  # fmt: skip
    [said, *_] = alternatives_words(a, None)
    assert "alpha = 1 not testable on 3 batch means (the F test needs 4 or more)" in said and "nan" not in said
    tested = a.__class__(**{**a.__dict__, "alpha": critical.AlphaTest(1.1, 40.0, 0.008, 6)})
    assert "alpha = 1 rejected on the 6 batch means (F test p 0.008)" in alternatives_words(tested, None)[0]
