"""Calibrate lesson 8's recipe cell: accuracy of LoRA recipes against the grader's full fine-tuning.

Runs the grader's own task (``grader.assignments.lesson8.lora_task.finetune``: the packaged
all-MiniLM-L6-v2 on negated sentiment sentences, 80 AdamW steps of 16, 12 tokens, one thread) on
the task seeds given, for full fine-tuning and each recipe below, and prints accuracy, the gap to
full fine-tuning, gradient + AdamW state bytes and seconds. ``MARGIN`` and ``MEMORY_SHARE`` in
``checks.py`` come from these figures (grader/assignments/lesson8/README.md).

    python benchmarks/lesson8_calibrate.py 11 12 13 14
    python benchmarks/lesson8_calibrate.py --only reference 21 22 23 24 25 26   # the reference on more tasks
"""

from __future__ import annotations

import sys
import time

import torch

from effkit.measure import device_name
from grader.assignments.lesson8 import lora_task as lt

REFERENCE = {"target_modules": ["query", "value"], "r": 8, "lora_alpha": 16, "lr": 1e-3}
RECIPES = {  # each a change to the reference
    "reference (q,v r8 a16 lr1e-3)": REFERENCE,
    "full fine-tuning's LR (5e-5)": {**REFERENCE, "lr": 5e-5},
    "alpha 1 at r 8 (scale 1/8)": {**REFERENCE, "lora_alpha": 1},
    "no attention (FFN dense only)": {
        **REFERENCE,
        "target_modules": ["intermediate.dense", "output.dense"],
    },
    "rank 1 (q,v a2 lr1e-3)": {**REFERENCE, "r": 1, "lora_alpha": 2},
}


def main(seeds: list[int], only: str = "") -> None:
    print(
        f"device: {device_name(torch.device('cpu'))}; {lt.STEPS} steps of {lt.BATCH}, {lt.MAX_LEN} tokens"
    )
    for seed in seeds:
        full = lt.full_finetune(seed)
        print(
            f"seed {seed}: full fine-tuning acc {full['acc']:.3f}, {full['bytes'] / 2**20:.0f} MiB grad+AdamW, "
            f"{full['seconds']:.1f} s",
            flush=True,
        )
        for name, recipe in RECIPES.items():
            if only not in name:
                continue
            start = time.perf_counter()
            run = lt.finetune(seed, recipe)
            print(
                f"  {name:32} acc {run['acc']:.3f} gap {100 * (full['acc'] - run['acc']):5.1f} pp  "
                f"{run['bytes'] / 2**20:6.2f} MiB ({run['bytes'] / full['bytes']:.2%})  "
                f"{time.perf_counter() - start:.1f} s",
                flush=True,
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    only = args[args.index("--only") + 1] if "--only" in args else ""
    seeds = [int(s) for s in args if s.isdigit()]
    main(seeds or [11, 12, 13], only)
