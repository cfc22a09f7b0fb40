"""Runtime of pipeline assignments on the CIFAR workload: what workers and the parent call.

The learner's pipeline runs inside the unchanged naive recipe, so any speed-up is the pipeline's;
the parent evaluates on data the learner never had. Weights from a worker are read only as
safetensors (parsed, never unpickled), with strict key/shape checks.
"""

from __future__ import annotations

import secrets
import types
from pathlib import Path

import torch

from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DevicePipeline, DeviceTestSet
from grader.kit.audit import EpochAudit as EpochAudit  # re-exported for the worker
from grader.kit.data import grader_images, write_train_set
from grader.kit.timed_runtime import GraderData as TimedData
from grader.kit.timed_runtime import InvalidWeights as InvalidWeights  # the parent catches it here

# Imported at module level on purpose: the worker snapshots these modules' functions before any
# learner code runs, so replacing one of them from a solution cell is detected and reported.


def build_trainer(
    learner_obj, audit: EpochAudit, data_dir: str, device: str, seed: int, profile: str, hooks: dict
):
    inner = learner_obj if learner_obj is not None else cifar.TorchvisionPipeline
    return cifar.build(
        "naive",
        profile,
        data_dir=data_dir,
        device=device,
        seed=seed,
        pipeline=audit.wrap(inner),
        **hooks,
    )


def _refused(*args, **kwargs):
    raise RuntimeError(
        "effkit's DevicePipeline is the reference answer: it does not run in the grader's timed "
        "worker (write your own FastPipeline)"
    )


def refuse_reference_answers() -> None:
    """In the learner's timed worker only (before its cells run): effkit's DevicePipeline raises
    when built, through any name or subclass; the naive recipe the learner's run uses never builds
    it. A copy of its source is not stopped here: the parent's judge of the kept batches sees it."""
    DevicePipeline.__init__.__code__ = _refused.__code__


def model_of(trainer) -> torch.nn.Module:
    return trainer.model


def reuses_reference(obj) -> str:
    """A reason to refuse the answer when it *is* effkit's reference pipeline, else ''."""
    if isinstance(obj, type) and issubclass(obj, DevicePipeline):
        return (
            "your FastPipeline is (a subclass of) effkit's DevicePipeline, the reference answer: "
            "write your own pipeline to earn the performance points"
        )
    if getattr(obj, "func", None) is DevicePipeline or obj is DevicePipeline:
        return (
            "your FastPipeline wraps effkit's DevicePipeline, the reference answer: write your own"
        )
    return ""


# The timed workers commit every chunk's batches with its state: the parent judges what the timed
# run trained on (timed_checks, parent only) and replays a drawn chunk on exactly those batches.
KEEP_BATCHES = True


class GraderData(TimedData):
    """Lesson 2's data: the grader's synthetic CIFAR-format sets (grader.kit.data)."""

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
        spec = self.spec
        data_seed = secrets.randbits(31)
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


def prepare_learner_data() -> None:
    cifar.prepare_data("smoke")


def learner_run(ns: dict | None) -> float:
    """What the learner runs themselves (``grader budget``): the naive smoke recipe, with the
    solution's ``FastPipeline`` when ``ns`` (its namespace) is given. Returns the accuracy."""
    from effkit.workloads.common import train_to_target

    trainer = cifar.build("naive", "smoke", pipeline=(ns or {}).get("FastPipeline"))
    return train_to_target(trainer, eval_every=trainer.eval_every, progress=False).accuracy
