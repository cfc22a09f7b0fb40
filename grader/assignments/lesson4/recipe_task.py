"""Lesson 4 part (b), parent side: the grader's own training task for a big-batch recipe.

The head starts at ``HEAD_SCALE`` x the default init so the early loss surface is sharp, the case
warm-up exists for. One thread for every run; compare times only within one grading, interleaved.
``loss_scale`` multiplies the loss: for SGD with momentum (no weight decay) a run at LR ``lr / c``
on a loss scaled by ``c`` takes the very steps of LR ``lr`` on the plain loss, so a grading can
draw the base LR it shows (``BASE_LR / c``) and the calibration at ``c = 1`` still holds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from effkit.accumulate import GradAccumulator
from effkit.schedules import warmup_cosine

MICRO_BATCH = 16  # the memory cap: the largest batch one forward/backward may hold
BASE_LR = 0.0125  # tuned for batch 16 on the plain loss (no warm-up needed at that LR)
MOMENTUM = 0.9
BUDGET = 81920  # samples a recipe may use: 1.67x the baseline's run (BASE_RUN in recipe_checks)
TARGET = 0.85  # held-out accuracy
EVERY = 1024  # samples between evaluations
DIM, CLASSES, WIDTH, TEACHER_WIDTH, HEAD_SCALE = 32, 4, 128, 64, 40.0
N_TEST = 2048


@dataclass
class Run:
    samples: int | None  # samples to the target, None when missed
    seconds: float  # wall time to the target (or to the end of the run), evaluations included
    best: float  # best held-out accuracy seen
    diverged: bool
    steps: int  # optimizer steps taken
    last: float  # held-out accuracy at the last evaluation
    curve: list = field(default_factory=list)  # (samples, accuracy, seconds) at each evaluation

    def to_target(self, target: float) -> tuple[int, float] | None:
        """(samples, seconds) at the first evaluation at or above ``target``, None if never."""
        return next(((n, t) for n, a, t in self.curve if a >= target), None)


def task_data(seed: int) -> tuple[torch.Tensor, ...]:
    """A fresh teacher and its samples: BUDGET training samples (each seen once) and N_TEST held out."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(DIM, TEACHER_WIDTH, generator=g) / math.sqrt(DIM)
    w2 = torch.randn(TEACHER_WIDTH, CLASSES, generator=g) / math.sqrt(TEACHER_WIDTH)
    x = torch.randn(BUDGET + N_TEST, DIM, generator=g)
    y = (torch.relu(x @ w1) @ w2).argmax(1)
    return x[:BUDGET], y[:BUDGET], x[BUDGET:], y[BUDGET:]


def student(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Linear(DIM, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, CLASSES),
    )
    with torch.no_grad():
        net[-1].weight.mul_(HEAD_SCALE)
    return net


def run(
    seed: int,
    accum_steps: int,
    lr: float,
    warmup_steps: int,
    target: float = TARGET,
    stop_at: int | None = None,
    loss_scale: float = 1.0,
) -> Run:
    """Train one recipe on the task of ``seed`` (its loss x ``loss_scale``); stop at ``target`` or
    after ``stop_at`` samples."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(
            seed,
            accum_steps,
            lr,
            warmup_steps,
            task_data(seed),
            target,
            stop_at or BUDGET,
            loss_scale,
        )
    finally:
        torch.set_num_threads(threads)


def _run(seed, accum_steps, lr, warmup_steps, data, target, stop_at, loss_scale) -> Run:
    x, y, x_test, y_test = data
    net = student(seed + 1)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=MOMENTUM)
    batch = MICRO_BATCH * accum_steps
    steps = BUDGET // batch
    schedule = warmup_cosine(opt, steps, min(warmup_steps, steps))
    acc = GradAccumulator(net, opt, accum_steps)
    best, accuracy, curve, start = 0.0, 0.0, [], time.perf_counter()
    for step in range(min(steps, stop_at // batch)):
        window = torch.arange(step * batch, (step + 1) * batch)
        for part in window.split(MICRO_BATCH):
            loss_sum = F.cross_entropy(net(x[part]), y[part], reduction="sum")
            acc.backward(loss_sum * loss_scale, batch)
        acc.step()
        schedule.step()
        seen = (step + 1) * batch
        if (
            seen // EVERY == (seen - batch) // EVERY
        ):  # evaluate each time a multiple of EVERY is passed
            continue
        with torch.no_grad():
            logits = net(x_test)
            loss = float(F.cross_entropy(logits, y_test))
            accuracy = float((logits.argmax(1) == y_test).float().mean())
        best = max(best, accuracy)
        curve.append((seen, accuracy, time.perf_counter() - start))
        if not math.isfinite(loss):
            return Run(None, time.perf_counter() - start, best, True, step + 1, accuracy, curve)
        if accuracy >= target:
            return Run(seen, time.perf_counter() - start, best, False, step + 1, accuracy, curve)
    return Run(None, time.perf_counter() - start, best, False, step + 1, accuracy, curve)
