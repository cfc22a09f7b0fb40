"""The Young/Daly checkpoint interval, Daly's wall-time model, and restoring the best checkpoint."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from effkit.checkpoint_interval import (
    daly_interval,
    expected_wall_time,
    mtbf_for_interval,
    overhead,
    readable_duration,
    steps_between_saves,
    young_holds,
    young_interval,
)
from effkit.resume import CheckpointError, CheckpointManager


def test_young_is_the_square_root_rule():
    # A 30 s save, a failure every 24 h: sqrt(2 * 30 * 86400) = 2277 s, about 38 minutes.
    assert young_interval(30, 86400) == pytest.approx(math.sqrt(2 * 30 * 86400))
    assert young_interval(30, 86400) == pytest.approx(2276.8, abs=0.1)


def test_daly_matches_young_for_cheap_saves_and_caps_at_mtbf():
    assert daly_interval(1, 1e6) == pytest.approx(young_interval(1, 1e6), rel=1e-3)
    assert daly_interval(1000, 3600) < young_interval(1000, 3600) * 1.2
    assert daly_interval(5000, 1000) == 1000


@pytest.mark.parametrize("save_s, mtbf_s", [(10, 3600), (60, 86400), (300, 7200)])
def test_daly_interval_minimises_the_modelled_wall_time(save_s, mtbf_s):
    """A grid search over Daly's own wall-time model finds (nearly) his closed-form optimum."""
    grid = [daly_interval(save_s, mtbf_s) * f for f in (0.25, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 2, 4)]
    costs = [expected_wall_time(1e6, t, save_s, mtbf_s) for t in grid]
    best = grid[costs.index(min(costs))]
    assert best == pytest.approx(daly_interval(save_s, mtbf_s), rel=0.11)


def test_overhead_is_flat_near_the_optimum_and_steep_far_from_it():
    save_s, mtbf_s = 20.0, 6 * 3600.0
    best = overhead(daly_interval(save_s, mtbf_s), save_s, mtbf_s)
    assert best == pytest.approx(math.sqrt(2 * save_s / mtbf_s), rel=0.1)
    assert overhead(2 * daly_interval(save_s, mtbf_s), save_s, mtbf_s) < 1.3 * best
    assert overhead(save_s / 10, save_s, mtbf_s) > 10 * best  # saving all the time
    assert overhead(mtbf_s, save_s, mtbf_s) > 5 * best  # saving about once per failure


def test_no_failures_and_no_saves_cost_nothing_and_bad_inputs_are_refused():
    assert expected_wall_time(100, 10, 1e-9, 1e12) == pytest.approx(100, rel=1e-6)
    assert overhead(1e6, 1, 100) == math.inf  # far past the MTBF: never completes, no overflow
    assert steps_between_saves(30, 0.2) == 150 and steps_between_saves(0.01, 1) == 1
    for bad in [(0, 10), (10, 0), (-1, 10), (float("nan"), 10)]:
        with pytest.raises(ValueError):
            young_interval(*bad)
    with pytest.raises(ValueError):
        expected_wall_time(1, 0, 1, 1)


def test_restore_best_loads_the_best_weights_not_the_last(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    manager = CheckpointManager(tmp_path, metric_mode="min")
    with pytest.raises(CheckpointError):
        manager.restore_best(model)
    weights = {}
    for step, loss in enumerate([1.0, 0.5, 0.7, 0.9]):
        with torch.no_grad():
            model.weight.add_(1.0)
        weights[step] = model.weight.clone()
        manager.save(model, metric=loss, step=step)
    rng_before = torch.get_rng_state()
    progress = manager.restore_best(model)
    assert torch.equal(model.weight, weights[1]) and progress.step == 1 and progress.metric == 0.5
    assert torch.equal(torch.get_rng_state(), rng_before), "restoring the best must not rewind RNGs"


def test_a_short_mtbf_is_never_printed_as_zero_hours():
    # lesson 6 on an H100 printed "an MTBF of 0.00 h": a 10 ms step, a 170.7 ms save
    mtbf = mtbf_for_interval(100 * 10e-3, 170.7e-3)
    assert young_interval(170.7e-3, mtbf) == pytest.approx(100 * 10e-3)
    assert readable_duration(mtbf) == "2.9 s" and young_holds(170.7e-3, mtbf)
    # a save as long as the MTBF: Young's first-order rule says nothing, and the lesson says so
    assert not young_holds(0.1, mtbf_for_interval(100 * 1e-3, 0.1))
    for seconds in (4e-4, 0.5, 2.34, 119, 600, 3 * 3600, 3 * 86400, 400 * 86400):
        number, unit = readable_duration(seconds).split()
        size = {"ms": 1e-3, "s": 1, "min": 60, "h": 3600, "d": 86400}[unit]
        assert float(number) * size == pytest.approx(seconds, rel=0.05), (seconds, number, unit)
    assert young_holds(30, 86400)
