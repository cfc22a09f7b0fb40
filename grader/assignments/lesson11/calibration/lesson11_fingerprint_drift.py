"""How far honest 2-rank training ends from lesson 11 (b)'s one-process reference, in the grader's fingerprint.

Run: ``OMP_WAIT_POLICY=PASSIVE taskset -c 1 .venv/bin/python grader/assignments/lesson11/calibration/lesson11_fingerprint_drift.py [N]``
(~2 s a grading's worth on one thread).

The budget cell compares each rank's fingerprint (``memory_task.fingerprint``) with the parent's
one-process Adam over the global batch; ``memory_task.TOL`` must sit above the honest gap for every
grading, and the task's MLP has ReLUs, whose kink lets rounding pick a gradient (lesson 10 (b)
lost ~1% of gradings to it: ``grader/assignments/lesson10/calibration/lesson10_drift.py``). Here each of ``N`` seed triples drawn
at random (data, weights, forms), each with its drawn architecture, is trained in one process twice: as the parent does, and with
the 2-rank arithmetic (each rank's micro-batch mean gradient, the two averaged, as an all-reduce
or reduce-scatter of 2 ranks adds them), and the largest fingerprint difference is printed: its
distribution is what ``TOL`` is judged against. Triples over 1e-6 are printed as they come.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repository

from effkit.measure import device_name  # noqa: E402
from grader.assignments.lesson11 import memory_task as mem  # noqa: E402


def two_ranks(init_seed: int, data_seed: int, arch: dict) -> dict:
    """The ranks' arithmetic in one process: the mean of each rank's micro-batch gradient, then Adam."""
    net = mem.model(init_seed, arch)
    opt = torch.optim.Adam(net.parameters(), lr=mem.CONFIG["lr"])
    per_rank = [mem.batches(data_seed, r) for r in range(mem.WORLD)]
    params = list(net.parameters())
    for k in range(mem.STEPS):
        grads = [
            torch.autograd.grad(F.cross_entropy(net(b[k][0]), b[k][1]), params) for b in per_rank
        ]
        for p, *per in zip(params, *grads, strict=True):
            p.grad = sum(per) / mem.WORLD
        opt.step()
        opt.zero_grad(set_to_none=True)
    return net.state_dict()


def main(n: int, seed: int = 1) -> None:
    torch.set_num_threads(1)
    rng, errors, start = random.Random(seed), [], time.perf_counter()
    print(
        f"device: {device_name('cpu')}; torch {torch.__version__}; {n} triples; TOL {mem.TOL:g}",
        flush=True,
    )
    for _ in range(n):
        data, init, form = (rng.randrange(1 << 30) for _ in range(3))
        arch = mem.draw(rng)  # the model is drawn per grading too
        want = mem.fingerprint(mem.reference(init, data, arch), form, arch)
        got = mem.fingerprint(two_ranks(init, data, arch), form, arch)
        errors.append(max(abs(a - b) for a, b in zip(got, want, strict=True)))
        if errors[-1] > 1e-6:
            print(f"  data {data}, init {init}, forms {form}: {errors[-1]:.2e}", flush=True)
    errors.sort()
    q = lambda p: errors[min(len(errors) - 1, int(p * len(errors)))]  # noqa: E731
    print(
        f"{n} triples: median {q(0.5):.1e}, 90th percentile {q(0.9):.1e}, 99th {q(0.99):.1e}, max {errors[-1]:.1e}; "
        f"{sum(e > mem.TOL for e in errors)} above TOL; {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
