"""Lesson 12: the grader's own tuning task, a small MLP whose held-out accuracy depends on its hyperparameters.

**What it does.** ``task_data(seed)`` draws a classification task from a random ReLU "oracle"
network with some label noise: ``N_TRAIN`` training samples (few: the model can overfit),
``N_VAL`` validation samples (what a search sees, epoch by epoch) and ``N_TEST`` held-out ones
(what only the final verdict uses). ``Trial`` trains an MLP with SGD + momentum for one epoch per
``step()`` at a configuration of ``SPACE`` (learning rate, batch size, weight decay), seeded per
trial, and returns the validation accuracy after that epoch. ``grid_search(seed)`` is the grader's
exhaustive search: every point of ``GRID`` trained ``MAX_EPOCHS`` epochs, the best by validation
accuracy. ``test_accuracy(seed, config, seeds)`` retrains a configuration on fresh seeds and
measures it on the held-out set: the number a choice is judged by.

**When to use it.** By :mod:`grader.assignments.lesson12.search_checks`, in the grader's process
only: no learner code runs here.

**Expected gain.** An epoch costs a few milliseconds on one thread, so a search of ~150 epochs and
the grid's 1,080 run in a grading's time.

**Pitfalls.** One thread for every run (deterministic per seed). The LR that works depends on the
batch size (SGD's noise scale) and the task: no fixed LR is safe, which is what makes the search matter.
"""

from __future__ import annotations

import functools
import itertools
import json
import math

import torch
import torch.nn.functional as F
from torch import nn

DIM, CLASSES, WIDTH = 16, 4, 64
N_TRAIN, N_VAL, N_TEST = 2048, 2048, 4096
LABEL_NOISE = 0.05
MAX_EPOCHS = 9  # a trial that is never stopped trains this many epochs (Hyperband's R)
MOMENTUM = 0.9

SPACE = {  # what a search may choose; the notebook shows the same
    "lr": {"type": "float", "low": 1e-3, "high": 3.0, "log": True},
    "batch_size": {"type": "categorical", "choices": [32, 64, 128, 256, 512]},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
}
GRID = {  # the grader's exhaustive search: 8 x 5 x 3 = 120 configurations
    "lr": [10 ** (-3 + 0.5 * i) for i in range(8)],  # 1e-3 ... 3.16 (clipped to 3.0)
    "batch_size": [32, 64, 128, 256, 512],
    "weight_decay": [1e-6, 1e-4, 1e-2],
}


def grid_configs() -> list[dict]:
    lrs = [min(v, SPACE["lr"]["high"]) for v in GRID["lr"]]
    return [{"lr": lr, "batch_size": b, "weight_decay": wd}
            for lr, b, wd in itertools.product(lrs, GRID["batch_size"], GRID["weight_decay"])]  # fmt: skip


@functools.lru_cache(maxsize=4)
def task_data(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(DIM, 32, generator=g) / math.sqrt(DIM)
    w2 = torch.randn(32, CLASSES, generator=g) / math.sqrt(32)
    x = torch.randn(N_TRAIN + N_VAL + N_TEST, DIM, generator=g)
    y = (torch.relu(x @ w1) @ w2).argmax(1)
    flip = torch.rand(len(y), generator=g) < LABEL_NOISE  # noisy labels: overfitting costs accuracy
    y = torch.where(flip, torch.randint(0, CLASSES, y.shape, generator=g), y)
    a, b = N_TRAIN, N_TRAIN + N_VAL
    return {"x": x[:a], "y": y[:a], "x_val": x[a:b], "y_val": y[a:b], "x_test": x[b:], "y_test": y[b:]}


class _OneThread:
    def __enter__(self):
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.threads)


def _accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


class Trial:
    """One configuration on task ``task_seed``, trained one epoch per ``step()`` (trial seed ``seed``)."""

    def __init__(self, task_seed: int, config: dict, seed: int):
        self.data, self.config, self.epochs = task_data(task_seed), config, 0
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(DIM, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                                 nn.Linear(WIDTH, CLASSES))  # fmt: skip
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config["lr"], momentum=MOMENTUM,
                                   weight_decay=config["weight_decay"])  # fmt: skip
        steps = math.ceil(N_TRAIN / config["batch_size"]) * MAX_EPOCHS  # cosine to 0 over a full trial
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=steps)
        self.gen = torch.Generator().manual_seed(seed + 1)
        self.diverged = False

    def step(self) -> float:
        """Train one epoch; the validation accuracy after it (chance when the loss blew up)."""
        x, y, batch = self.data["x"], self.data["y"], self.config["batch_size"]
        with _OneThread(), torch.enable_grad():
            if not self.diverged:
                for idx in torch.randperm(N_TRAIN, generator=self.gen).split(batch):
                    self.opt.zero_grad()
                    loss = F.cross_entropy(self.net(x[idx]), y[idx])
                    if not torch.isfinite(loss):
                        self.diverged = True  # a blown-up run stays blown up: nothing to train
                        break
                    loss.backward()
                    self.opt.step()
                    self.sched.step()
            self.epochs += 1
            if self.diverged:
                return 1.0 / CLASSES
            return _accuracy(self.net, self.data["x_val"], self.data["y_val"])

    def test_accuracy(self) -> float:
        if self.diverged:
            return 1.0 / CLASSES
        with _OneThread():
            return _accuracy(self.net, self.data["x_test"], self.data["y_test"])


def full_run(task_seed: int, config: dict, seed: int) -> tuple[list[float], float]:
    """MAX_EPOCHS epochs: the validation curve and the held-out accuracy at the end."""
    trial = Trial(task_seed, config, seed)
    curve = [trial.step() for _ in range(MAX_EPOCHS)]
    return curve, trial.test_accuracy()


@functools.lru_cache(maxsize=4)
def grid_search(task_seed: int) -> tuple[dict, float, int]:
    """The grader's exhaustive search: (best config by final validation accuracy, its validation
    accuracy, epochs it cost)."""
    best, best_val = None, -1.0
    configs = grid_configs()
    for i, config in enumerate(configs):
        curve, _ = full_run(task_seed, config, seed=task_seed * 1000 + i)
        if curve[-1] > best_val:
            best, best_val = config, curve[-1]
    return best, best_val, len(configs) * MAX_EPOCHS


def test_accuracy(task_seed: int, config: dict, seeds: list[int]) -> float:
    """Mean held-out accuracy of ``config`` retrained on each of ``seeds`` (the seed noise averaged)."""
    return _test_accuracy(task_seed, json.dumps(config, sort_keys=True), tuple(seeds))


@functools.lru_cache(maxsize=16)
def _test_accuracy(task_seed: int, config: str, seeds: tuple[int, ...]) -> float:
    return sum(full_run(task_seed, json.loads(config), s)[1] for s in seeds) / len(seeds)
