"""Lesson 10, worker side: the learner's ``diagnose(profile)`` on plain profile data, one label per case;
part (b): the learner's ``fast_step`` trained on a task drawn from the parent's seed.

Nothing is profiled or judged here: labels (cut to ``MAX_LABEL``), losses and raw weights go back
as claims. Each case is answered in a forked child of the worker, on a fresh copy of its profile, so
``diagnose`` can neither edit the next case nor remember the last one.
"""

from __future__ import annotations

import copy
import ctypes
import os
import select
import signal
import time

from grader.assignments.lesson10 import slow_step as task
from grader.kit.worker import (
    probe_quiz,  # noqa: F401  (the worker finds probes by name)
    tensor_msg,
)

MAX_LABEL = 40


# One case's answer may take this long (the whole call has the parent's CALL_SECONDS): a hung case is that
# case's answer, not the grading's
CASE_SECONDS = 20.0
_NOT_IMPLEMENTED = "\x00NotImplementedError"


def _one_case(fn, profile) -> str:
    """``fn(profile)`` as a label string, or a short sentence saying what it did instead."""
    try:
        label = fn(copy.deepcopy(profile))
    except NotImplementedError:
        return _NOT_IMPLEMENTED
    except Exception as err:  # noqa: BLE001  (one case's failure, reported as that case's answer)
        return f"raised {type(err).__name__}"[:MAX_LABEL]
    # str.__getitem__: a plain str even from a str subclass with its own methods
    if isinstance(label, str):
        return str.__getitem__(label, slice(0, MAX_LABEL))
    return f"returned {type(label).__name__}"[:MAX_LABEL]


def _isolated(fn, profile) -> str:
    """``_one_case`` in a forked child, so no case sees what ``diagnose`` kept from another: the two copies of
    one step (a slower and a faster host's) are asked apart, and a memo keyed on what they share answers
    nothing (a fresh review found a memo could carry one copy's answer to the other in one process)."""
    read, write = os.pipe()
    pid = os.fork()
    if (
        pid == 0
    ):  # the child: answer, write, leave without running any exit handler of the learner's
        try:
            os.close(read)
            os.write(write, _one_case(fn, profile).encode("utf-8", "replace")[: 4 * MAX_LABEL])
        finally:
            os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + CASE_SECONDS
    try:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([read], [], [], left)
            if not ready:
                break
            chunk = os.read(read, 4096)
            if not chunk:  # the child closed its end: done
                return b"".join(chunks).decode("utf-8", "replace")[:MAX_LABEL] or "returned nothing"
            chunks.append(chunk)
        return f"took over {CASE_SECONDS:g} s"
    finally:
        os.close(read)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


def probe_diagnose(worker, profiles: list):
    fn = worker.ns.get("diagnose")
    if not callable(fn):
        raise NameError("your solution cells define no function 'diagnose'")
    labels = []
    for profile in profiles[:64]:
        label = _isolated(fn, profile)
        if label == _NOT_IMPLEMENTED:
            raise NotImplementedError("diagnose raised NotImplementedError")
        labels.append(label)
    return {"labels": labels}, []


def probe_fast_step(worker, seed: int, batch: int, steps: int, lr: float, weight_decay: float):
    import torch

    fn = worker.ns.get("fast_step")
    if not callable(fn):
        raise NameError("your solution cells define no function 'fast_step'")
    torch.set_num_threads(1)  # as the parent's own run of the original step
    model, losses = task.run(fn, task.Task(seed, batch, steps), lr, weight_decay)
    weights = task.flat(model)  # the grader's own reading of the model it handed over
    if weights.dtype != torch.float32 or weights.numel() != task.numel():
        raise TypeError(
            f"after your steps the model holds {weights.numel()} {weights.dtype} numbers, expected "
            f"{task.numel()} float32: update the parameters in place, keep their dtype"
        )
    meta, raw = tensor_msg(weights)
    return {"losses": [_plain_loss(v) for v in losses], "weights": meta}, [raw]


def _plain_loss(value):
    """A returned loss as a float, or a short sentence saying what it was instead."""
    import torch

    if type(value) in (float, int):
        return float(value)
    if type(value) is torch.Tensor and value.numel() == 1:
        return float(torch.Tensor.item(value.detach()))
    return f"returned {type(value).__name__}"[:MAX_LABEL]


def probe_slow_step(worker, seed: int, batch: int, steps: int, lr: float, weight_decay: float):
    """The original step on the same task, in a worker that holds no learner code: the timed baseline."""
    import torch

    torch.set_num_threads(1)
    model, losses = task.run(task.slow_step, task.Task(seed, batch, steps), lr, weight_decay)
    meta, raw = tensor_msg(task.flat(model))
    return {"losses": losses, "weights": meta}, [raw]


def probe_shield(worker):
    """Make this (baseline) worker non-dumpable before any timing: a process of the learner's, which
    runs as the same user, can then no longer ptrace it or write its memory (PR_SET_DUMPABLE = 0)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    return {"dumpable": libc.prctl(3, 0, 0, 0, 0)}, []  # PR_GET_DUMPABLE: what the kernel now says
