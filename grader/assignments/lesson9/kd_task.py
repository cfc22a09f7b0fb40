"""Lesson 9 part (b): the grader's own distillation task (an MLP teacher, a shallower MLP student).

Runs in the grader's process only, one thread; compare times only within one grading, interleaved.
"""

from __future__ import annotations

import functools
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from effkit.abtest import settle
from effkit.distill import kd_loss, layer_map
from effkit.measure import one_thread

DIM, CLASSES, WIDTH, TEACHER_LAYERS = 32, 8, 256, 4
N_TEACHER, N_LABELLED, N_TEST = 16384, 512, 4096
TEACHER_EPOCHS, EPOCHS, BATCH, LR = 4, 30, 64, 1e-3


def task_data(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(DIM, 64, generator=g) / math.sqrt(DIM)
    w2 = torch.randn(64, CLASSES, generator=g) / math.sqrt(64)
    x = torch.randn(N_TEACHER + N_LABELLED + N_TEST, DIM, generator=g)
    y = (torch.relu(x @ w1) @ w2).argmax(1)
    a, b = N_TEACHER, N_TEACHER + N_LABELLED
    return {
        "x_teacher": x[:a],
        "y_teacher": y[:a],
        "x": x[a:b],
        "y": y[a:b],
        "x_test": x[b:],
        "y_test": y[b:],
    }


def mlp(hidden_layers: int, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(hidden_layers):
        layers += [nn.Linear(DIM if i == 0 else WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES))


def _linears(net: nn.Sequential) -> list[nn.Linear]:
    return [m for m in net if isinstance(m, nn.Linear)]


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


@functools.lru_cache(maxsize=4)
def teacher(seed: int) -> nn.Sequential:
    """The teacher of task ``seed``: TEACHER_LAYERS hidden layers trained on the large set."""
    data = task_data(seed)
    net = mlp(TEACHER_LAYERS, seed + 1)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    g = torch.Generator().manual_seed(seed + 2)
    with (
        one_thread(),
        torch.enable_grad(),
    ):  # trained on first use, maybe from inside a no_grad block
        for _ in range(TEACHER_EPOCHS):
            for idx in torch.randperm(N_TEACHER, generator=g).split(128):
                opt.zero_grad()
                F.cross_entropy(net(data["x_teacher"][idx]), data["y_teacher"][idx]).backward()
                opt.step()
    return net.eval().requires_grad_(False)


def student(seed: int, layers: int, init: str) -> nn.Sequential:
    """A student of ``layers`` hidden layers: the teacher's (every other one) or fresh weights."""
    net = mlp(layers, seed + 3)
    if init == "teacher":
        source = _linears(teacher(seed))
        picked = layer_map(TEACHER_LAYERS, layers)  # hidden layers kept, e.g. 4 -> 2: [0, 2]
        with torch.no_grad():
            for dst, i in zip(
                _linears(net)[:-1] + [_linears(net)[-1]], [*picked, TEACHER_LAYERS], strict=True
            ):
                dst.load_state_dict(source[i].state_dict())
    return net


def train_student(seed: int, temperature: float, alpha: float, layers: int, init: str) -> dict:
    """Train the student of a recipe on the labelled set; its held-out accuracy and seconds."""
    data = task_data(seed)
    net = student(seed, layers, init)
    with one_thread(), torch.enable_grad():
        start = time.perf_counter()
        big = teacher(seed)
        with torch.no_grad():
            cached = big(data["x"])  # the teacher's logits, once: no augmentation here
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        g = torch.Generator().manual_seed(seed + 4)
        for _ in range(EPOCHS):
            for idx in torch.randperm(N_LABELLED, generator=g).split(BATCH):
                opt.zero_grad()
                kd_loss(
                    net(data["x"][idx]), cached[idx], data["y"][idx], temperature, alpha
                ).backward()
                opt.step()
        seconds = time.perf_counter() - start
    return {"acc": accuracy(net, data["x_test"], data["y_test"]), "seconds": seconds, "net": net}


# below the smallest real speed-up here (3 of 4 layers: 1.41x): "not faster" rules even this out
NO_GAIN = 1.2


def inference_ab(seed: int, net: nn.Module, pairs: int = 8):
    """Teacher (A) vs student (B) forward on the held-out set, interleaved on one thread (ratio B/A), in
    rounds until settled: (ABResult, "faster" | "not faster" | "inconclusive"), :func:`effkit.abtest.settle`."""
    x = task_data(seed)["x_test"]
    big = teacher(seed)

    def burst(model):
        def once() -> int:
            with torch.no_grad():
                for _ in range(4):
                    model(x)
            return 4 * len(x)

        return once

    with one_thread():
        return settle(burst(big), burst(net), no_gain=NO_GAIN, pairs=pairs)
