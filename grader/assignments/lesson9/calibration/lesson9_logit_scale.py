"""Calibrate a drawn teacher logit scale for lesson 9's recipe cell (issue 50).

The candidate draw: the teacher is served with its logits multiplied by ``k`` (an over-confident
``k > 1`` or under-confident ``k < 1`` served model) before the student distils from them. For
each task seed, each ``k`` and each temperature ``T`` (alpha 0.9, 2 hidden layers from scratch,
as a black-box draw), this prints the gap: the student's held-out accuracy minus the same
student's on labels alone (alpha 0, which never reads the teacher, so one per task). Then the
gap per ``k`` of the fixed recipe (T 4) and of rules ``T = c * k``, as the mean of every 3
consecutive tasks (a grading averages 3).

    python grader/assignments/lesson9/calibration/lesson9_logit_scale.py 11 12 13 14 15 16
    python grader/assignments/lesson9/calibration/lesson9_logit_scale.py --alpha 0.5 11 12 13

Same training as ``kd_task.train_student`` (one thread, 30 epochs of Adam on 512 samples, the
teacher's logits cached once), with the cached logits scaled by ``k``.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from effkit.distill import kd_loss
from effkit.measure import device_name, one_thread
from grader.assignments.lesson9 import kd_task as kt

SCALES = (1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8)
TEMPERATURES = (1, 2, 4, 8, 16, 32)


def train(seed: int, temperature: float, alpha: float, scale: float) -> float:
    """``kd_task.train_student`` (2 layers from scratch) on the teacher's logits times ``scale``."""
    data = kt.task_data(seed)
    net = kt.student(seed, 2, "scratch")
    with one_thread(), torch.enable_grad():
        with torch.no_grad():
            cached = kt.teacher(seed)(data["x"]) * scale
        opt = torch.optim.Adam(net.parameters(), lr=kt.LR)
        g = torch.Generator().manual_seed(seed + 4)
        for _ in range(kt.EPOCHS):
            for idx in torch.randperm(kt.N_LABELLED, generator=g).split(kt.BATCH):
                opt.zero_grad()
                kd_loss(
                    net(data["x"][idx]), cached[idx], data["y"][idx], temperature, alpha
                ).backward()
                opt.step()
    return kt.accuracy(net, data["x_test"], data["y_test"])


def served_stats(seed: int, scale: float) -> tuple[float, float]:
    """What a grader could measure of the served logits on the labelled inputs: their std per row
    (mean over rows) and the mean top probability."""
    with torch.no_grad():
        z = kt.teacher(seed)(kt.task_data(seed)["x"]) * scale
    return float(z.std(1).mean()), float(z.softmax(1).amax(1).mean())


def main(seeds: list[int], alpha: float) -> None:
    print(
        f"device: {device_name(torch.device('cpu'))}; torch {torch.__version__}; alpha {alpha}; "
        f"2 layers from scratch; seeds {seeds}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    start = time.perf_counter()
    gap: dict[tuple[int, float, float], float] = {}
    for seed in seeds:
        data = kt.task_data(seed)
        t_acc = kt.accuracy(kt.teacher(seed), data["x_test"], data["y_test"])
        base = kt.train_student(seed, 1.0, 0.0, 2, "scratch")["acc"]
        print(f"task {seed}: teacher {t_acc:.1%}, labels alone {base:.1%}", flush=True)
        for k in SCALES:
            std, top = served_stats(seed, k)
            row = []
            for temp in TEMPERATURES:
                gap[seed, k, temp] = train(seed, temp, alpha, k) - base
                row.append(f"T{temp:g} {gap[seed, k, temp] * 100:+5.1f}")
            print(
                f"  k {k:6.3f} (logit std {std:6.2f}, top prob {top:.2f}): " + " ".join(row),
                flush=True,
            )

    def windows(values: list[float]) -> list[float]:
        n = len(values)
        return (
            [sum(values[(i + j) % n] for j in range(3)) / 3 for i in range(n)] if n >= 3 else values
        )

    print(
        "\nmean gap over labels alone (pp) per k, all seeds; [worst mean of 3 tasks, cyclic windows]"
    )
    print("k       " + " ".join(f"{'T' + format(t, 'g'):>15}" for t in TEMPERATURES))
    for k in SCALES:
        cells = []
        for temp in TEMPERATURES:
            gs = [gap[s, k, temp] for s in seeds]
            cells.append(f"{sum(gs) / len(gs) * 100:+5.1f} [{min(windows(gs)) * 100:+5.1f}]")
        print(f"{k:6.3f}  " + " ".join(f"{c:>15}" for c in cells))
    print("\nrules: worst mean of 3 tasks per k (pp), T = c * k snapped to the measured grid")
    for name, rule in (
        ("T 4 fixed", lambda k: 4),
        ("T 2k", lambda k: 2 * k),
        ("T 4k", lambda k: 4 * k),
        ("T 8k", lambda k: 8 * k),
    ):
        cells = []
        for k in SCALES:
            temp = rule(k)
            if temp not in TEMPERATURES:
                cells.append("   n/a")
                continue
            cells.append(f"{min(windows([gap[s, k, temp] for s in seeds])) * 100:+6.1f}")
        print(f"{name:10} " + " ".join(cells))
    print(f"{time.perf_counter() - start:.0f} s; load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    alpha = float(args[args.index("--alpha") + 1]) if "--alpha" in args else 0.9
    if "--alpha" in args:
        del args[args.index("--alpha") : args.index("--alpha") + 2]
    main([int(s) for s in args] or [11, 12, 13, 14, 15, 16], alpha)
