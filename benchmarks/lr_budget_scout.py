"""Scouting for lesson 4's part (b): at the baseline's sample budget, which LR / warm-up settings fail?

Trains the naive CIFAR recipe's ResNet-10 (width 16; SGD, momentum 0.9, weight decay 5e-4, cosine
decay) on 8000 synthetic CIFAR images for 2 epochs — the baseline's budget at batch 128 — with
micro-batches of 128 accumulated (`effkit.accumulate.GradAccumulator`) to each effective batch,
and prints the test-accuracy curve (1000 held-out images) and the samples to 60% per setting and
seed. CPU training here is deterministic: accuracies reproduce exactly; wall times do not.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/lr_budget_scout.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from effkit.accumulate import GradAccumulator
from effkit.schedules import warmup_cosine
from effkit.workloads.cifar.data import synthetic_images
from effkit.workloads.cifar.models import naive_resnet

N_TRAIN, N_TEST, EPOCHS, MICRO, TARGET = 8000, 1000, 2.0, 128, 0.6
SETTINGS = [  # name, effective batch, peak LR, warm-up share of the steps
    ("batch 128, LR 0.1 (baseline)", 128, 0.1, 0.0),
    ("1024, LR 0.1 (unscaled), warm-up 10%", 1024, 0.1, 0.1),
    ("1024, LR 0.8, no warm-up", 1024, 0.8, 0.0),
    ("1024, LR 0.8, warm-up 20%", 1024, 0.8, 0.2),
    ("512, LR 0.4, no warm-up", 512, 0.4, 0.0),
    ("512, LR 0.4, warm-up 20%", 512, 0.4, 0.2),
    ("1024, LR 1.6, no warm-up", 1024, 1.6, 0.0),
    ("1024, LR 1.6, warm-up 20%", 1024, 1.6, 0.2),
]


def tensors(n: int, seed: int):
    images, labels = synthetic_images(n, seed)
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255), torch.from_numpy(labels)


X, Y = tensors(N_TRAIN, 0)
XT, YT = tensors(N_TEST, 1)


def evaluate(net) -> float:
    net.eval()
    with torch.no_grad():
        correct = sum(
            int((net(x).argmax(1) == y).sum())
            for x, y in zip(XT.split(500), YT.split(500), strict=True)
        )
    net.train()
    return correct / N_TEST


def run(batch: int, lr: float, warmup: float, seed: int):
    torch.manual_seed(seed)
    net = naive_resnet(10, 16)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    steps = int(EPOCHS * N_TRAIN / batch)
    schedule = warmup_cosine(opt, steps, int(warmup * steps))
    acc = GradAccumulator(net, opt, batch // MICRO)
    order = (
        torch.randperm(N_TRAIN * (int(EPOCHS) + 1), generator=torch.Generator().manual_seed(seed))
        % N_TRAIN
    )
    curve, start, every = [], time.perf_counter(), max(1, steps // 8)
    for step in range(steps):
        for part in order[step * batch : (step + 1) * batch].split(MICRO):
            acc.backward(F.cross_entropy(net(X[part]), Y[part], reduction="sum"), batch)
        acc.step()
        schedule.step()
        if (step + 1) % every == 0 or step == steps - 1:
            curve.append(((step + 1) * batch, evaluate(net)))
    return curve, time.perf_counter() - start


if __name__ == "__main__":
    for name, batch, lr, warmup in SETTINGS:
        for seed in (0, 1):
            curve, wall = run(batch, lr, warmup, seed)
            hit = next((n for n, a in curve if a >= TARGET), None)
            print(
                f"{name:38} seed {seed}: final {curve[-1][1]:.3f}, samples to {TARGET:.0%}: {hit},"
                f" {wall:.1f} s, curve {[round(a, 2) for _, a in curve]}",
                flush=True,
            )
