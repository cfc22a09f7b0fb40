"""Every evaluation pass is on the clock: a recipe only knows it hit the target after evaluating."""

import time

import torch

from effkit.workloads.common import Work, train_to_target


class SlowEval:
    """Training steps take 10 ms each; every evaluation (think TTA) takes 50 ms."""

    recipe, device, steps_per_epoch, total_steps = "fake", torch.device("cpu"), 2, 6
    target, stop_at_target, flops_per_sample, eval_every = 0.5, True, None, 2

    def __init__(self):
        self.evals = 0

    def train_steps(self, n):
        time.sleep(0.01 * n)
        return Work(samples=4 * n)

    def evaluate(self):
        time.sleep(0.05)
        self.evals += 1
        return 0.2 * self.evals  # reaches 0.5 at the third evaluation

    def describe(self):
        return {}


def test_time_to_target_counts_every_evaluation_up_to_the_one_at_the_target():
    r = train_to_target(SlowEval(), progress=False)
    assert r.steps == 6 and len(r.history) == 3
    assert r.eval_seconds >= 3 * 0.05 and r.train_seconds >= 6 * 0.01
    # The old clock stopped during evaluation: ~0.06 s. Honest: ~0.21 s.
    assert r.time_to_target_s >= r.train_seconds + 3 * 0.05
    assert r.time_to_target_s == r.history[-1]["seconds"] == r.wall_seconds
    assert (
        r.time_to_target_train_only_s == r.history[-1]["train_seconds"] < 0.5 * r.time_to_target_s
    )
    assert r.samples_per_s > 0


def test_cifar_tta_evaluation_is_charged_to_the_optimized_recipe(tmp_path):
    from effkit.workloads import cifar

    times = {}
    for tta in (0, 2):
        t = cifar.build(
            "optimized", "smoke", data_dir=tmp_path, device="cpu", tta=tta, epochs=0.5, target=2.0
        )  # unreachable: run the whole (short) schedule
        r = train_to_target(t, progress=False)
        assert r.wall_seconds == r.train_seconds + r.eval_seconds
        times[tta] = r.eval_seconds / len(r.history)
    assert times[2] > 2 * times[0]  # 6 forward passes per image: it shows on the clock
