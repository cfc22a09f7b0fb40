"""Lesson 1, worker side: a trainer whose "device" is the grader's process.

Every batch and forward pass of `RemoteTrainer` blocks on the parent, which decides the costs and
records the truth, so this process holds no answer to read. Tensors are tiny on purpose.
"""

from __future__ import annotations

import math

import torch

from effkit.workloads.common import Work
from grader.kit.worker import probe_quiz  # noqa: F401  (the worker finds probes by name)

FEATURES, CLASSES = 8, 4


class _Device:
    def __init__(self, worker):
        self._chan = worker.chan

    def wait(self, kind: str, n: int) -> None:
        self._chan.send({"event": "dev", "kind": kind, "n": n})
        reply = self._chan.receive()
        if not reply or reply.get("cmd") != "dev_ok":
            raise RuntimeError("the grader's device went away")


class RemotePipeline:
    """An endless stream of batches; each ``next()`` waits for the parent's data."""

    def __init__(self, device: _Device, batch_size: int, seed: int):
        self._device, self.batch_size = device, batch_size
        g = torch.Generator().manual_seed(seed)
        self._x = torch.randn(batch_size, FEATURES, generator=g)
        self._y = torch.randint(0, CLASSES, (batch_size,), generator=g)

    def __iter__(self):
        while True:
            self._device.wait("data", self.batch_size)
            yield self._x, self._y


class RemoteModel(torch.nn.Module):
    def __init__(self, device: _Device):
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, CLASSES)
        object.__setattr__(self, "_device", device)

    def forward(self, x):
        self._device.wait("compute", len(x))  # the accelerator's time, decided by the grader
        return self.linear(x)


class RemoteTrainer:
    recipe = "grader"

    def __init__(self, worker, batch_size: int, seed: int):
        dev = _Device(worker)
        self.device = torch.device("cpu")
        self.model = RemoteModel(dev)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.pipeline = RemotePipeline(dev, batch_size, seed)
        self._batches = iter(self.pipeline)

    def train_steps(self, n: int) -> Work:
        samples = 0
        self.model.train()
        for _ in range(n):
            x, y = next(self._batches)
            loss = self.loss_fn(self.model(x), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            samples += len(y)
        return Work(samples=samples)


def _plain(value) -> dict:
    """What the learner's function returned, as JSON the parent validates (never the object)."""
    if isinstance(value, bool):
        return {"type": "bool", "repr": repr(value)}
    if type(value) in (int, float) or isinstance(value, int | float):
        f = float(value)
        return {"type": "number", "value": f if math.isfinite(f) else None, "repr": repr(f)}
    if isinstance(value, str):
        return {"type": "str", "value": str.__str__(value)[:100]}
    return {"type": type(value).__name__, "repr": _safe_repr(value)}


def _safe_repr(value) -> str:
    try:
        return repr(value)[:100]
    except Exception:  # noqa: BLE001 - a learner object whose repr raises
        return "<unprintable>"


def _fn(worker, name: str):
    fn = worker.ns.get(name)
    if not callable(fn):
        raise NameError(f"your solution cells define no function {name!r}")
    return fn


def probe_throughput(worker, batch_size: int, steps: int, warmup: int, seed: int):
    trainer = worker.watch(RemoteTrainer(worker, batch_size, seed), "model", "pipeline")
    value = _fn(worker, "measure_throughput")(trainer, steps=steps, warmup=warmup)
    return _plain(value), []


def probe_data_wait(worker, batch_size: int, steps: int, seed: int):
    trainer = worker.watch(RemoteTrainer(worker, batch_size, seed), "model", "pipeline")
    value = _fn(worker, "data_wait_share")(trainer, steps=steps)
    return _plain(value), []


def probe_bottleneck(worker, batch_size: int, seed: int):
    trainer = worker.watch(RemoteTrainer(worker, batch_size, seed), "model", "pipeline")
    value = _fn(worker, "name_bottleneck")(trainer)
    return _plain(value), []
