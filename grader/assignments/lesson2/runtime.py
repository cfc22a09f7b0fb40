"""Runtime of pipeline assignments on the CIFAR workload: what workers and the parent call.

The learner's pipeline runs inside the unchanged naive recipe, so any speed-up is the pipeline's;
the parent evaluates on data the learner never had. Weights from a worker are read only as
safetensors (parsed, never unpickled), with strict key/shape checks.
"""

from __future__ import annotations

import torch

from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DevicePipeline, TorchvisionPipeline
from grader.kit.audit import EpochAudit as EpochAudit  # re-exported for the worker
from grader.kit.cifar_runtime import CifarGraderData
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


def _refused_baseline(*args, **kwargs):
    raise RuntimeError(
        "effkit's TorchvisionPipeline is the naive baseline this exercise replaces: it does not run in "
        "the grader's timed worker of your FastPipeline (write your own pipeline)"
    )


def refuse_reference_answers() -> None:
    """In the learner's timed worker only (before its cells run): effkit's DevicePipeline (the answer)
    and TorchvisionPipeline (the baseline) raise when built, through any name or subclass; the naive
    recipe the learner's run uses builds neither (its pipeline is the learner's). The contract worker
    refused the baseline already; without this, a pipeline honest where probed handed the timed run
    naive's own batches, which the timed judge accepts (a third review, 2026-12-07). A copy of either's
    source is not stopped here: the cells' text check and the parent's judges are."""
    DevicePipeline.__init__.__code__ = _refused.__code__
    TorchvisionPipeline.__init__.__code__ = _refused_baseline.__code__


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


# A subclass here, not a re-export: the parent finds a grading's runtime module (its
# KEEP_BATCHES, its timed_checks) from the module of its data's type (protocol.runtime_of).
class GraderData(CifarGraderData):
    """Lesson 2's data: the grader's synthetic CIFAR-format sets (grader.kit.cifar_runtime)."""


def prepare_learner_data() -> None:
    cifar.prepare_data("smoke")


def learner_run(ns: dict | None) -> float:
    """What the learner runs themselves (``grader budget``): the naive smoke recipe, with the
    solution's ``FastPipeline`` when ``ns`` (its namespace) is given. Returns the accuracy."""
    from effkit.workloads.common import train_to_target

    trainer = cifar.build("naive", "smoke", pipeline=(ns or {}).get("FastPipeline"))
    return train_to_target(trainer, eval_every=trainer.eval_every, progress=False).accuracy
