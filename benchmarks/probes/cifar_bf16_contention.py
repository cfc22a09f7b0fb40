"""Why the CIFAR smoke whole run can crawl while its A/B bursts look fast: the optimized recipe's
bf16 autocast with 2 OpenMP threads under a busy core, against fp32 and against 1 thread.

Usage (repository root): ``python benchmarks/probes/cifar_bf16_contention.py`` with a busy core beside
(``taskset -c 1 python -c "while True: pass" &``). Prints training samples/s per 4-step chunk (an
evaluation between chunks, as in the whole run) and the 1-minute load average. Figures:
``benchmarks/results/cifar-bf16-contention-epyc-2c.txt``.
"""

import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from effkit.workloads import cifar  # noqa: E402

DATA = cifar.prepare_data("smoke", None)


def chunks(precision: str, threads: int, n_chunks: int = 6, steps: int = 4) -> list[int]:
    torch.set_num_threads(threads)
    trainer = cifar.build(
        "optimized", "smoke", data_dir=DATA, device="cpu", seed=0, precision=precision
    )
    out = []
    for _ in range(n_chunks):
        t0 = time.perf_counter()
        work = trainer.train_steps(steps)
        out.append(round(work.samples / (time.perf_counter() - t0)))
        trainer.evaluate()
    return out


for _ in range(2):
    for precision, threads in (("bf16", 2), ("off", 2), ("bf16", 1), ("off", 1)):
        print(
            precision,
            threads,
            "threads:",
            chunks(precision, threads),
            os.getloadavg()[0],
            flush=True,
        )
