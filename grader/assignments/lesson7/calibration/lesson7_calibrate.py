"""Calibrate lesson 7's measured part: speed ratio and accuracy of bucketed vs random batches.

Run: ``OMP_WAIT_POLICY=PASSIVE flock /tmp/effkit-quiet.lock .venv/bin/python grader/assignments/lesson7/calibration/lesson7_calibrate.py``.
For each task seed, the grader's own ``speed_task.train_ab`` with (a) the reference sampler
(``effkit.length_buckets.bucket_batches``, batch 32) and (b) random batches padded to their own
longest (dynamic padding without bucketing); prints the speed ratio over the grader's baseline
(random batches with dynamic padding, since 2026-12-05) with its interval, both accuracies, the
run's wall time and the load.
"""

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repository

from effkit.length_buckets import bucket_batches  # noqa: E402
from grader.assignments.lesson7 import speed_task as st  # noqa: E402

seeds = [int(s) for s in sys.argv[1:]] or [11, 12, 13, 14, 15]
for seed in seeds:
    lengths = st.task_data(seed)["lengths"]
    arms = {
        "bucketed": [
            bucket_batches(lengths, batch_size=st.BATCH, seed=seed, epoch=e)
            for e in range(st.MAX_PAIRS + 1)
        ],
        "random dyn-pad": st.random_epochs(seed + 99, len(lengths), st.MAX_PAIRS + 1),
    }
    for name, epochs in arms.items():
        started = time.perf_counter()
        r = st.train_ab(seed, epochs)
        ab = r["ab"]
        print(
            f"seed {seed} {name:15s} speed {ab.ratio:.2f}x [{ab.ci_low:.2f}, {ab.ci_high:.2f}] "
            f"({ab.coverage:.0%}, {ab.pairs} pairs, {time.perf_counter() - started:.1f} s) "
            f"acc baseline {r['acc_random']:.3f} "
            f"mine {r['acc_mine']:.3f} diff {r['acc_mine'] - r['acc_random']:+.3f} "
            f"tokens {r['tokens_mine'] / r['tokens_random']:.2f} load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
print("load:", os.getloadavg(), "threads: 1, CPU:", np.__name__ and os.uname().machine)
