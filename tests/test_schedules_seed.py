import math
import random

import numpy as np
import pytest
import torch

from effkit.schedules import one_cycle, scale_lr, warmup_cosine
from effkit.seed import rng_state, seed_everything, set_rng_state


def _lrs(make, total=10, warmup=3):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = make(opt, total, warmup)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_warmup_is_linear_then_cosine_decays_to_zero():
    lrs = _lrs(warmup_cosine)
    assert lrs[:3] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert lrs[3] == pytest.approx(1.0)
    assert lrs[3 + 7 // 2] == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 7)))
    assert all(a >= b for a, b in zip(lrs[2:], lrs[3:], strict=False))


def test_one_cycle_peaks_after_warmup_then_ramps_down_linearly():
    lrs = _lrs(one_cycle, total=6, warmup=2)
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])


def test_linear_and_sqrt_scaling_rules():
    assert scale_lr(0.1, 128, 512) == pytest.approx(0.4)
    assert scale_lr(1e-4, 32, 128, rule="sqrt") == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="unknown scaling rule"):
        scale_lr(0.1, 128, 512, rule="cubic")
    with pytest.raises(ValueError, match="warmup_steps"):
        _lrs(warmup_cosine, total=5, warmup=6)


def test_rng_state_round_trip_replays_every_generator():
    seed_everything(3)
    state = rng_state()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(1).item())
    assert first == again


def test_seed_everything_validates_and_enables_determinism():
    with pytest.raises(ValueError, match="non-negative int"):
        seed_everything(-1)
    seed_everything(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    seed_everything(0)
    assert not torch.are_deterministic_algorithms_enabled()


def test_rng_state_in_a_process_forked_after_cuda_started_saves_the_host_rngs(monkeypatch):
    # lesson 6 forks a saving child; on a GPU the child cannot touch CUDA, not even its RNG state
    def no_cuda_after_fork():
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", no_cuda_after_fork)
    state = rng_state()
    assert "cuda" not in state and {"python", "numpy", "torch"} <= set(state)
