"""Lesson 3, worker side: run the learner's policy, scaler and step on probe objects; return data.

The parent recomputes every update; spy records are observations. ``reference_ran`` reports
effkit's own answers run inside learner code, a claim that can only deny points.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import warnings

import torch

from effkit.accumulate import GradAccumulator
from effkit.amp import AmpPolicy, DeviceCaps, choose_precision
from grader.assignments.lesson3 import amp_checks as probe
from grader.kit.worker import probe_quiz, tensor_msg  # noqa: F401  (probe_quiz: the worker finds probes by name)

CASES = tuple(caps for caps, _ in probe.POLICY_CASES)
_SCENARIOS: dict[str, dict] = {}


def _reference_code() -> dict:
    """effkit's own answers to the three solution functions, by code object *identity* (code objects
    compare equal by content: a copy compiled at the same line would match an equality lookup).
    ``GradAccumulator``'s backward and step are a whole scaled backward, unscale, clip, step, update
    and zero: handed the step (one micro-batch per window), they are default_train_step by another name."""
    from effkit.workloads.bert.trainer import default_train_step

    named = {
        "default_train_step": default_train_step,
        "choose_precision": choose_precision,
        "AmpPolicy.make_scaler": AmpPolicy.make_scaler,
        "GradAccumulator.backward": GradAccumulator.backward,
        "GradAccumulator.step": GradAccumulator.step,
    }
    return {id(fn.__code__): (fn.__code__, name) for name, fn in named.items()}


_REFERENCE = _reference_code()  # taken when the worker imports this module, before any learner code


WATCH_REMOVED = "(the grader's watch, removed by your code)"


class _ReferenceWatch:
    """A profile function (~1 us per Python call) noting reference code that starts, in this thread
    and in threads started while it watches. Learner code that takes the watch down (to run the
    reference unseen) is reported as if the reference ran: the watch is evidence, so hiding it
    counts against the hider."""

    def __init__(self):
        self.ran: set[str] = set()

    def __call__(self, frame, event, arg):
        if event == "call":
            code, name = _REFERENCE.get(id(frame.f_code), (None, ""))
            if code is frame.f_code:
                self.ran.add(name)

    @contextlib.contextmanager
    def watching(self):
        previous, previous_threads = sys.getprofile(), threading.getprofile()
        sys.setprofile(self)
        threading.setprofile(self)
        try:
            yield
        finally:
            if sys.getprofile() is not self or threading.getprofile() is not self:
                self.ran.add(WATCH_REMOVED)
            sys.setprofile(previous)
            threading.setprofile(previous_threads)


def _fn(worker, name: str):
    fn = worker.ns.get(name)
    if not callable(fn):
        raise NameError(f"your solution cells define no function {name!r}")
    return fn


def _repr(value) -> str:
    try:
        return repr(value)[:100]
    except Exception:  # noqa: BLE001 - a learner object whose repr raises
        return "<unprintable>"


def policy_report(choose, make, watch=None) -> dict:
    """What ``choose_policy`` returns for each of ``CASES`` and what ``make_scaler`` builds for each
    of ``probe.SCALER_CASES``: observations only (the parent, or ``checks.check_policy``, judges)."""
    watching = watch.watching if watch is not None else contextlib.nullcontext
    cases = []
    for caps in CASES:
        with watching():
            got = choose(DeviceCaps(**caps))
        ok = type(got) is AmpPolicy
        cases.append(
            {
                "is_policy": ok,
                "device_type": str(got.device_type) if ok else "",
                "mode": str(got.mode) if ok else "",
                "repr": _repr(got),
            }
        )
    scalers = []
    for device_type, mode in probe.SCALER_CASES:
        with watching(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # GradScaler("cuda") on a torch without CUDA warns
            s = make(AmpPolicy(device_type, mode))
        ok = isinstance(s, torch.amp.GradScaler)
        scalers.append(
            {
                "device_type": device_type,
                "mode": mode,
                "is_scaler": ok,
                "enabled": bool(s.is_enabled()) if ok else None,
                "device": str(getattr(s, "_device", "")) if ok else "",
                "repr": _repr(s),
            }
        )
    return {"cases": cases, "scalers": scalers, "cuda": torch.cuda.is_available()}


def probe_policy(worker):
    choose, make = _fn(worker, "choose_policy"), _fn(worker, "make_scaler")
    watch = _ReferenceWatch()
    report = policy_report(choose, make, watch)
    return report | {"reference_ran": sorted(watch.ran)}, []


def probe_setup(worker, key: str, seed: int, mode: str, scaler: str, optimizer: str):
    model = probe.ProbeModel(seed)
    watch = _ReferenceWatch()
    if scaler == "learner_choice":  # the learner's own policy and scaler for a CPU with bf16
        with watch.watching():
            policy = _fn(worker, "choose_policy")(DeviceCaps("cpu", "cpu", bf16=True))
            scale = _fn(worker, "make_scaler")(policy)
    elif scaler == "learner":
        policy = AmpPolicy("cpu", mode)
        with watch.watching():
            scale = _fn(worker, "make_scaler")(policy)
    else:
        policy = AmpPolicy("cpu", mode)
        scale = {
            "spy": probe.SpyScaler,
            "off": lambda: torch.amp.GradScaler("cpu", enabled=False),
            "policy": policy.make_scaler,
        }[scaler]()
    opt = {
        "spy": lambda: probe.SpyOptimizer(model.parameters()),
        "adamw": lambda: torch.optim.AdamW(model.parameters(), lr=1e-2),
        "sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1),
    }[optimizer]()
    _SCENARIOS[key] = {"model": model, "optimizer": opt, "policy": policy, "scaler": scale}
    worker.watch(model)
    worker.watch(opt)
    meta, raw = tensor_msg(probe.flat_params(model))
    enabled = isinstance(scale, torch.amp.GradScaler) and scale.is_enabled()
    return {
        "params": meta,
        "scale": float(scale.get_scale()) if enabled else None,
        "reference_ran": sorted(watch.ran),
    }, [raw]


def probe_step(worker, key: str, batch_seed: int, poison: bool = False):
    s = _SCENARIOS[key]
    model, opt, policy, scaler = s["model"], s["optimizer"], s["policy"], s["scaler"]
    model.poison = poison
    model.seen.clear()
    calls = len(getattr(scaler, "calls", []))
    step, batch, watch = (
        _fn(worker, "amp_train_step"),
        probe.probe_batch(batch_seed),
        _ReferenceWatch(),
    )
    with watch.watching():
        loss = step(model, batch, opt, policy, scaler, 1.0)
    if isinstance(loss, bool) or not isinstance(loss, int | float):
        kind = type(loss).__name__
        loss_out = {"type": kind, "value": None}
    else:
        f = float(loss)
        loss_out = {"type": "number", "value": f if math.isfinite(f) else None, "repr": repr(f)}
    meta, raw = tensor_msg(probe.flat_params(model))
    enabled = isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()
    return {
        "loss": loss_out,
        "params": meta,
        "cleared": probe.grads_cleared(model),
        "seen": [[str(dt).removeprefix("torch."), bool(on)] for dt, on in model.seen],
        "calls": list(getattr(scaler, "calls", []))[calls:],
        "scale": float(scaler.get_scale()) if enabled else None,
        "norm": opt.step_norms[-1]
        if isinstance(opt, probe.SpyOptimizer) and opt.step_norms
        else None,
        "optimizer_steps": len(opt.step_norms) if isinstance(opt, probe.SpyOptimizer) else None,
        "reference_ran": sorted(watch.ran),
    }, [raw]
