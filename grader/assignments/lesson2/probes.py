"""Lesson 2, worker side: run the learner's ``FastPipeline`` on a probe dataset, return raw tensors.

Nothing is decided here: the parent decodes and judges the batches (and compares them with its own run of the
naive baseline). An epoch is cut at ``n + batch_size`` samples so a pipeline that never ends cannot flood the
parent.
"""

from __future__ import annotations

import numpy as np
import torch

from effkit.workloads.cifar.pipelines import TorchvisionPipeline
from grader.assignments.lesson2.probe_data import probe_dataset
from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)


def _describe(value) -> str:
    return type(value).__name__


def _refused(*args, **kwargs):
    raise RuntimeError(
        "effkit's TorchvisionPipeline is the naive baseline this exercise replaces: it does not run in the "
        "grader's checks of your FastPipeline (write your own pipeline that augments a batch at a time)"
    )


def refuse_the_baseline() -> None:
    """In the contract worker only: the naive pipeline raises when built, through any name, subclass or wrapper
    (its code object is replaced, so references taken at load time see it too). A nudge, not the defence: a fresh
    copy of its module gets past it, and the parent finds its batches bit for bit (``checks.not_the_baseline``)."""
    TorchvisionPipeline.__init__.__code__ = _refused.__code__


def probe_epochs(
    worker, n: int, data_seed: int, batch_size: int, seed: int, epochs: int, device: str = "cpu"
):
    cls = worker.ns.get("FastPipeline")
    if not callable(cls):
        raise NameError("your solution cells define no FastPipeline")
    refuse_the_baseline()
    ds = probe_dataset(n, data_seed)
    pipe = cls(ds, batch_size, device, seed)
    length = len(pipe)
    out, blobs = {"len": int(length), "epochs": [], "bad": None}, []
    for _ in range(epochs):
        batches, seen = [], 0
        for batch in pipe:
            if not (isinstance(batch, tuple | list) and len(batch) == 2):
                out["bad"] = f"expected each batch to be a pair (x, y), got {_describe(batch)}"
                return out, blobs
            x, y = batch
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                out["bad"] = (
                    f"expected x and y to be tensors, got {_describe(x)} and {_describe(y)}"
                )
                return out, blobs
            (xm, xb), (ym, yb) = tensor_msg(x), tensor_msg(y)
            batches.append({"x": xm, "y": ym})
            blobs += [xb, yb]
            seen += int(y.shape[0]) if y.dim() else 1
            if seen > n:
                out["bad"] = f"one epoch yielded more than the dataset's {n} samples"
                return out, blobs
        out["epochs"].append(batches)
    data = np.ascontiguousarray(np.asarray(ds.data, dtype=np.uint8))
    out["after"] = {"shape": list(data.shape), "targets": [int(t) for t in ds.targets]}
    blobs.append(data.tobytes())
    return out, blobs
