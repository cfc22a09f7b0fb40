"""The optimized CIFAR recipe's batch on a CPU is chosen by timing its own model (issue 49: the optimized
recipe lost to the naive one on AMD EPYC hosts at airbench's GPU-sized batch)."""

import math

import pytest
import torch
from torch import nn

from effkit import batch_probe as bp
from effkit.workloads import cifar


def _tiny():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(4 * 32 * 32, 10))


def test_costs_are_measured_per_sample_for_every_candidate():
    costs = bp.per_sample_seconds(_tiny, [8, 4], torch.contiguous_format, 10, rounds=1)
    assert set(costs) == {8, 4} and all(math.isfinite(c) and c > 0 for c in costs.values())


@pytest.mark.parametrize(
    ("costs", "want"),
    [
        ({250: 1.0, 125: 1.05, 64: 1.10}, 64),  # flat per sample: halve all the way
        ({250: 1.0, 125: 1.05, 64: 1.30}, 125),  # the last halving costs 1.24x: stop before it
        ({250: 1.0, 125: 1.20, 64: 1.0}, 250),  # the first halving does not pay: never look further
        ({250: 1.3, 125: 1.0, 64: 1.0}, 64),  # a larger batch slower per sample: smaller wins
    ],
)
def test_a_halving_is_kept_only_while_it_costs_less_than_it_saves(costs, want):
    assert bp.choose_batch(costs) == want


def test_the_recipe_runs_the_measured_batch_with_its_lr_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFKIT_DATA", str(tmp_path))
    calls = []

    def fake(make_model, batches, *a, **k):
        calls.append(batches)
        return {250: 1e-4, 125: 1.02e-4, 64: 1.4e-4}

    monkeypatch.setattr(bp, "per_sample_seconds", fake)
    d = cifar.build("optimized", "smoke", device="cpu").describe()
    assert d["batch_size"] == 125 and d["lr"] == pytest.approx(cifar.scale_lr_for(125)), d
    assert "batch 125" in d["batch_choice"] and "140" in d["batch_choice"], d
    assert cifar.build("optimized", "smoke", device="cpu").describe()["batch_size"] == 125
    assert calls == [[250, 125, 64]]  # measured once: the second build read the cache
    # A batch_size hook is the learner's or the caller's choice: no probe, no note.
    d = cifar.build("optimized", "smoke", device="cpu", batch_size=250).describe()
    assert d["batch_size"] == 250 and "batch_choice" not in d
    # The naive recipe keeps its first-attempt batch of 128.
    assert cifar.build("naive", "smoke", device="cpu").describe()["batch_size"] == 128
