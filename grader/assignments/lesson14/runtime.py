"""Lesson 14's timed runtime: the naive CIFAR recipe with the learner's changes, in worker and parent.

Both sides build the naive recipe; the learner's side gets its changes as hooks the *parent* read
from the notebook's text (``recipe.read``), so a worker cannot say which changes it made. The one
change that is code, a pipeline, is the learner's class, looked up by its change's name in the
``CHANGES`` the learner's worker evaluated. Weights from a worker are read only as safetensors.
"""

from __future__ import annotations

import functools

import torch

from effkit.workloads import cifar
from effkit.workloads.cifar.pipelines import DevicePipeline
from effkit.workloads.cifar.recipes import OptimizedTrainer
from grader.assignments.lesson14.guard import GUARD
from grader.kit.audit import EpochAudit as KitAudit
from grader.kit.cifar_runtime import CifarGraderData
from grader.kit.timed_runtime import InvalidWeights as InvalidWeights  # the parent catches it here

# The timed workers commit every chunk's batches: the parent judges what the learner's timed run
# trained on (timed_checks, parent only) and replays drawn chunks on exactly those batches.
KEEP_BATCHES = True


def build_trainer(learner_obj, audit: EpochAudit, data_dir, device, seed, profile, hooks: dict):
    """The naive recipe with ``hooks``; ``own_pipeline`` names the learner's change whose class
    feeds it (absent: the naive DataLoader pipeline; in a replay the kept batches feed it)."""
    hooks = dict(hooks)
    # the cells ran since the worker's load held torch's settings (refuse_reference_answers); a
    # previous run's chunks since its last batch: nothing may have moved (guard.py, attack D)
    GUARD.hold_cells()
    GUARD.channels_last = bool(hooks.get("channels_last", False))  # the parent read it, declared
    change = hooks.pop("own_pipeline", None)
    named = hooks.pop("own_pipeline_class", None)
    inner = cifar.TorchvisionPipeline
    workers = hooks.pop("naive_workers", None)  # the grader's baseline only (spec.baseline_hooks)
    if workers is not None:  # naive's DataLoader without (or with other) worker processes
        inner = functools.partial(cifar.TorchvisionPipeline, num_workers=int(workers))
    if change is not None and isinstance(learner_obj, dict):
        inner = learner_obj[change]["pipeline"]
        # the parent read the class's name from the cell's text and checked that class's code there;
        # a CHANGES mutated after that text would run another class under the checked name. A
        # first filter in a learner process, not proof: what runs is judged on what it fed
        # (the kept batches) and timed alone against naive's (capstone._own_pipeline)
        if getattr(inner, "__name__", None) != named:
            raise RuntimeError(
                f"your change {change!r} runs {getattr(inner, '__name__', inner)!r}, not the "
                f"class {named!r} your cell's text gives it: CHANGES changed after its literal"
            )
    trainer = cifar.build(
        "naive",
        profile,
        data_dir=data_dir,
        device=device,
        seed=seed,
        pipeline=audit.wrap(GUARD.wrap(inner)),  # every call into the pipeline held
        **hooks,
    )
    # the pipeline's calls in the build were held; the settings as the recipe's build left them
    # are the ones its chunks are held to
    GUARD.rebase()
    return trainer


class EpochAudit(KitAudit):
    """The kit's audit, with torch's settings held after every chunk (``take_kept`` ends each one
    in the worker, before its commit) and at the run's end: learner code running *during* the
    grader's steps (a thread, a global module hook) that left a setting changed refuses the run."""

    def take_kept(self):
        GUARD.hold("code (during a chunk)")
        return super().take_kept()

    def finish(self, pipeline, expected_epochs: int) -> None:
        super().finish(pipeline, expected_epochs)
        GUARD.hold("pipeline (its last epoch)")


def _refusal():
    __class__ = None  # noqa: F841  (one free variable, as a method that calls super() has)

    def refused(*args, **kwargs):
        __class__  # noqa: B018  (kept free: its code may replace such a method's)
        raise RuntimeError(
            "effkit's optimized recipe and DevicePipeline are the course's answers: they do not "
            "run in the grader's timed worker (write your own changes)"
        )

    return refused


_refused = _refusal()  # for an __init__ that calls super() (one closure cell)


def _PLAIN(*args, **kwargs):  # noqa: N802  (for an __init__ without closure cells)
    raise RuntimeError(
        "effkit's DevicePipeline is the course's answer: it does not run in the grader's timed "
        "worker (write your own pipeline)"
    )


def refuse_reference_answers() -> None:
    """In the learner's timed worker only, before its cells run: effkit's answers raise when built.
    A copy of their source is not stopped here: the parent refuses one from the cell's text
    (``cell_filters._copied_pipeline``) before any worker starts. Torch's settings are read here too,
    as no learner code has run yet: the cells may not change them (``guard.py``)."""
    GUARD.start()
    # The code objects are swapped, not the functions: the worker's tamper check compares function
    # objects, and every name and subclass of these classes reaches the same function.
    for cls in (DevicePipeline, OptimizedTrainer):
        init = cls.__init__
        if len(init.__code__.co_freevars) != len(_refused.__code__.co_freevars):
            init.__code__ = _PLAIN.__code__
        else:
            init.__code__ = _refused.__code__


def model_of(trainer) -> torch.nn.Module:
    return trainer.model


def reuses_reference(obj) -> str:
    """A reason to refuse the recipe when one of its pipelines *is* effkit's, else ''."""
    for name, settings in obj.items() if isinstance(obj, dict) else ():
        cls = settings.get("pipeline") if isinstance(settings, dict) else None
        if cls is DevicePipeline or (isinstance(cls, type) and issubclass(cls, DevicePipeline)):
            return f"your change {name!r} uses effkit's DevicePipeline, the course's answer: write your own"
        if getattr(cls, "func", None) is DevicePipeline:
            return f"your change {name!r} wraps effkit's DevicePipeline, the course's answer"
    return ""


# A subclass here, not a re-export: the parent finds a grading's runtime module (its
# KEEP_BATCHES, its timed_checks) from the module of its data's type (protocol.runtime_of).
class GraderData(CifarGraderData):
    """Lesson 14's data: the grader's synthetic CIFAR-format sets (grader.kit.cifar_runtime)."""
