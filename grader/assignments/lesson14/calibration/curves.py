"""Accuracy against training time of the naive recipe and candidate changes on the grader's data.

In one process, no sandbox: this chooses the grading's target and sizes (the naive recipe must
reach the target before its schedule ends, a good recipe well before), it grades nothing. Each
variant trains ``--epochs`` on ``--n-train`` of the grader's synthetic images and is evaluated on
``--n-eval`` held-out ones after every quarter epoch (the grading's chunk), both on the clock.

    python grader/assignments/lesson14/calibration/curves.py --variants naive pipeline pipeline+lr
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import types
from pathlib import Path

import torch

from effkit.measure import device_name
from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DevicePipeline, DeviceTestSet
from grader.kit.data import grader_images, write_train_set

# Candidate changes, as a learner would name them (DevicePipeline stands in for the learner's own
# device-resident pipeline: this script measures what such a pipeline is worth, it grades nothing).
CHANGES = {
    "pipeline": {"pipeline": DevicePipeline},
    "lr": {"lr": 0.2},
    "batch": {"batch_size": 256, "lr": 0.2},
    "cl": {"channels_last": True},
    "bf16": {"precision": "bf16"},
    "b64": {"batch_size": 64, "lr": 0.05},
    "lr05": {"lr": 0.05},
    "b64lr1": {"batch_size": 64, "lr": 0.1},
    "b32": {"batch_size": 32, "lr": 0.025},
}


def curve(hooks: dict, n_train: int, n_eval: int, epochs: int, chunks: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_train_set(Path(tmp), n_train, seed, "easy")
        images, labels = grader_images(n_eval, seed + 1, "easy")
        trainer = cifar.build("naive", "smoke", data_dir=path, seed=seed, epochs=epochs, **hooks)
        trainer.test_set = DeviceTestSet(
            types.SimpleNamespace(data=images, targets=labels.tolist()), torch.device("cpu")
        )
        spe = trainer.steps_per_epoch
        points, clock = [], 0.0
        for c in range(epochs * chunks):
            j = c % chunks
            n = round((j + 1) * spe / chunks) - round(j * spe / chunks)
            t0 = time.perf_counter()
            trainer.train_steps(n)
            acc = trainer.evaluate()  # the grader's evaluation, on the clock as in the grading
            clock += time.perf_counter() - t0
            points.append((round(clock, 2), round(acc, 4)))
        return {"points": points}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=["naive", "pipeline", "pipeline+lr"])
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--n-eval", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = {"host": device_name(torch.device("cpu")), "load": os.getloadavg(), "runs": []}
    for seed in args.seeds:
        for variant in args.variants:
            hooks = {}
            for name in variant.split("+"):
                hooks.update(CHANGES.get(name, {}))
            run = curve(hooks, args.n_train, args.n_eval, args.epochs, args.chunks, seed)
            result["runs"].append({"variant": variant, "seed": seed, **run})
            print(variant, seed, run["points"], flush=True)
    result["load_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
