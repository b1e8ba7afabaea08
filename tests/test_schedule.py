import math

import pytest

from bench.recipe import ScheduleSpec
from bench.schedule import lr_at


def lrs(total, spe, **kw):
    return [lr_at(s, 1.0, total, spe, ScheduleSpec(**kw)) for s in range(total)]


def test_linear_warmup_then_cosine_to_end_lr():
    out = lrs(10, 2.0, warmup_epochs=1, decay="cosine", end_lr=0.1)
    assert out[:2] == [0.5, 1.0]  # warm-up over 2 steps: lr*(s+1)/W
    assert out[2] == pytest.approx(1.0) and out[-1] == pytest.approx(0.1)
    mid = 2 + 7 / 2  # halfway through the decay
    assert lr_at(int(mid), 1.0, 10, 2.0, ScheduleSpec(warmup_epochs=1, end_lr=0.1)) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 2) / 7))
    )
    assert all(a >= b for a, b in zip(out[1:], out[2:]))


def test_poly_matches_mlperf_formula():
    out = lrs(11, 1.0, warmup_epochs=1, decay="poly", power=2, end_lr=1e-4)
    for s in range(1, 11):
        assert out[s] == pytest.approx(1e-4 + (1 - 1e-4) * (1 - (s - 1) / 9) ** 2)


def test_step_decay_at_milestones_in_epochs():
    out = lrs(8, 2.0, decay="step", milestones=[1, 3], step_factor=0.1)
    assert out == pytest.approx([1, 1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01])


def test_constant_and_warmup_longer_than_run():
    assert lrs(3, 1.0, decay="constant") == [1.0, 1.0, 1.0]
    assert lrs(2, 1.0, warmup_epochs=5) == [0.5, 1.0]
