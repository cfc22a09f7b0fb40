"""Lesson 13, the grader's server: the only process that parses or runs a learner's ONNX file.

A grader-only sandboxed worker, so a hostile or endless graph costs one worker, never the grader.
What it sends is evidence, not truth: it runs the learner's graph.
"""

from __future__ import annotations

import base64
import time

import numpy as np

from grader.assignments.lesson13 import artifact, given
from grader.kit.checks import CheckFailed

_STATE: dict = {}  # this worker's sessions and held-out rows, kept between the parent's calls
_clock = time.perf_counter


def plan(seed: int, rows: int, rounds: int, per_round: int, warmup: int) -> np.ndarray:
    """Row indices of every request: ``warmup`` first, then ``rounds`` x ``per_round``, drawn from ``seed``."""
    return np.random.default_rng(seed).integers(0, rows, warmup + rounds * per_round)


def _array(b64: str, cols: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), np.float32).reshape(-1, cols).copy()


def answer(sess, x: np.ndarray, idx, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch-1 request per index: (seconds each, logits each; NaN where the answer was no [1, classes])."""
    times = np.empty(len(idx))
    outs = np.full((len(idx), classes), np.nan, np.float32)
    for k, i in enumerate(idx):
        row = x[i : i + 1]
        t0 = _clock()
        out = sess.run([artifact.OUTPUT], {artifact.INPUT: row})[0]
        times[k] = _clock() - t0
        if np.shape(out) == (1, classes):
            outs[k] = out[0]
    return times, outs


def probe_open(worker, model: str, rows: str, dim: int, classes: int, given_model: dict):
    raw = base64.b64decode(model)
    try:
        checked = artifact.validate(raw, dim, classes)
    except CheckFailed as err:
        return {"problem": str(err)}, []
    # read as data before onnxruntime opens the file: the verdict owes nothing to the learner's graph
    try:
        differs = given.differs(checked.model, given.given_layers(given_model))
    except Exception as err:  # noqa: BLE001  (a tensor numpy cannot read is the file's; fail closed)
        differs = f"the grader could not read your model's tensors ({type(err).__name__})"
    try:
        sess = _STATE["mine"] = artifact.session(checked.clean)
        x = _array(rows, dim)
        outs = [sess.run([artifact.OUTPUT], {artifact.INPUT: x[:n]})[0] for n in (3, 1)]
    except Exception as err:  # noqa: BLE001  (onnxruntime refusing the file is the file's problem)
        return {
            "problem": f"onnxruntime could not run your model: {type(err).__name__}: {str(err)[:200]}"
        }, []
    shapes = [list(np.shape(o)) for o in outs]
    blobs = [
        np.ascontiguousarray(o, np.float32).tobytes() if np.shape(o) == (n, classes) else b""
        for o, n in zip(outs, (3, 1), strict=True)
    ]
    return {"ops": checked.ops, "shapes": shapes, "differs": differs}, blobs


def probe_requests(worker, x: str, dim: int, classes: int):
    _STATE["x"] = _array(x, dim)
    _, outs = answer(_STATE["mine"], _STATE["x"], range(len(_STATE["x"])), classes)
    return {"rows": len(outs)}, [outs.tobytes()]


def probe_latency(
    worker, base: str, own: str, seed: int, rounds: int, per_round: int, warmup: int, classes: int
):
    """The three sessions, one request loop, rounds in A B C / C B A order: drift hits all alike."""
    sessions = [
        artifact.session(base64.b64decode(base)),
        _STATE["mine"],
        artifact.session(base64.b64decode(own)),
    ]
    x = _STATE["x"]
    idx = plan(seed, len(x), rounds, per_round, warmup)
    times = np.empty((len(sessions), rounds, per_round))
    outs = np.empty((len(sessions), len(idx), classes), np.float32)
    for s, sess in enumerate(sessions):
        outs[s, :warmup] = answer(sess, x, idx[:warmup], classes)[1]
    for r in range(rounds):
        at = warmup + r * per_round
        for s in range(len(sessions)) if r % 2 == 0 else reversed(range(len(sessions))):
            times[s, r], outs[s, at : at + per_round] = answer(
                sessions[s], x, idx[at : at + per_round], classes
            )
    return {"requests": len(idx)}, [times.tobytes(), outs.tobytes()]
