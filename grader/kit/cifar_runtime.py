"""The timed data of the lessons graded on the naive CIFAR recipe (lessons 2 and 14), in worker and parent.

One class for both: the grader's synthetic CIFAR-format sets (:mod:`grader.kit.data`), a held-out set
per look, and each run's training set kept in the parent for the judge of its timed batches.
"""

from __future__ import annotations

import secrets
import types
from pathlib import Path

from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DeviceTestSet
from grader.kit.data import grader_images, write_train_set
from grader.kit.timed_runtime import GraderData


class CifarGraderData(GraderData):
    """The grader's synthetic CIFAR-format sets; a clean trainer per run is the naive recipe."""

    def __init__(self, workdir: Path, spec, device: str):
        self.eval_sets = []  # one held-out set per look, in this process's memory only
        # per run: (images, labels), for the parent's judge of its timed batches (timed_checks)
        self.run_sets: list[tuple] = []
        super().__init__(workdir, spec, device)

    def write_warmup(self, folder: Path) -> Path:
        return write_train_set(folder, self.spec.n_warmup, secrets.randbits(31), self.spec.data)

    def new_look(self) -> None:
        images, labels = grader_images(self.spec.n_eval, secrets.randbits(31), self.spec.data)
        held_out = types.SimpleNamespace(data=images, targets=labels.tolist())
        self.eval_sets.append(DeviceTestSet(held_out, self.device))

    def new_run(self, r: int, seed: int):
        spec, data_seed = self.spec, secrets.randbits(31)
        path = write_train_set(self.inputs / f"train{r}", spec.n_train, data_seed, spec.data)
        self.run_sets.append(grader_images(spec.n_train, data_seed, spec.data))  # the same set
        hooks = dict(spec.hooks, epochs=spec.epochs)
        trainer = cifar.build(
            "naive", spec.profile, data_dir=path, device=self.device, seed=seed, **hooks
        )
        return path, trainer

    def held_out_accuracy(self, trainer, r: int) -> float:
        trainer.test_set = self.eval_sets[r // self.spec.repeats]
        return trainer.evaluate()
