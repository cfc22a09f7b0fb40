"""Lesson 6, worker side: run the learner's ``train(task, ckpt_dir)`` on the grader's task.

The parent decides when the run dies; everything the worker reports is a claim.
"""

from __future__ import annotations

import os

import torch

from grader.assignments.lesson6.task import MAX_EPOCHS, Task, reference_loop
from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)

WARM_STEPS = 4


class _Parent:
    """Before each step: tell the parent the (epoch, batch) about to run; wait for its go."""

    def __init__(self, worker):
        self._chan = worker.chan
        self._next: dict = {}  # the batch the last go-ahead carried: the step after it

    def __call__(self, epoch: int, index: int) -> None:
        reply = self._ask("step", epoch, index)
        if "at" in reply:
            self._next = {tuple(reply["at"]): _tensors(reply)}

    def batch(self, epoch: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training batch ``index`` of ``epoch``, from the parent (which alone holds the data)."""
        cached = self._next.pop((epoch, index), None)
        return cached if cached is not None else _tensors(self._ask("batch", epoch, index))

    def _ask(self, kind: str, epoch: int, index: int) -> dict:
        self._chan.send({"event": "dev", "kind": kind, "epoch": epoch, "index": index})
        reply = self._chan.receive()
        if not reply or reply.get("cmd") != "dev_ok":
            raise RuntimeError("the grader went away")
        return reply


def _tensors(reply: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(reply["x"], dtype=torch.int64), torch.tensor(reply["y"], dtype=torch.int64)


def _weights(model) -> tuple[dict, list[bytes]]:
    metas, blobs = {}, []
    for name, tensor in model.state_dict().items():
        meta, raw = tensor_msg(tensor)
        metas[name] = meta
        blobs.append(raw)
    return {"weights": metas}, blobs


def _warm_up(seed: int) -> None:
    """A few steps of a throwaway task before every run, the learner's and the baseline's alike: a
    fresh process's first steps pay one-off costs (allocation, lazy initialisation) that would
    dilute the first timed epoch. The run's own ``Task`` re-seeds the global RNG."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    task = Task(seed + 1)  # its own data, made here: not the run's
    for _, (x, y) in zip(range(WARM_STEPS), task.batches(0), strict=False):
        task.train_step(x, y)
    task.evaluate()


def _train(worker, seed: int, hook):
    fn = worker.ns.get("train")
    if not callable(fn):
        raise NameError("your solution cells define no function 'train'")
    _warm_up(seed)
    task = worker.watch(Task(seed, hook, source=hook))
    fn(task, os.environ["EFFKIT_GRADER_STATE"])
    return _weights(task.model)


def probe_run(worker, seed: int):
    return _train(worker, seed, _Parent(worker))


def probe_bare(worker, seed: int, max_epochs: int = MAX_EPOCHS):
    """The same run with no checkpoints at all, in a worker with no learner code: the baseline, driven
    epoch by epoch beside the learner's workers (:mod:`grader.assignments.lesson6.timing`)."""
    _warm_up(seed)
    parent = _Parent(
        worker
    )  # its batches come over the channel too, as the learner's do: a fair A/B
    return _weights(reference_loop(Task(seed, parent, max_epochs, source=parent))["task"].model)
