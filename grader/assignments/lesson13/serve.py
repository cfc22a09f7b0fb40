"""Lesson 13, parent side of the grader's server: the load plan, and the judgement of what it sent back.

From the server's raw times, ``judge`` gives the P95 ratio with its interval, and
``answers_problem`` refuses latency points to a model that answers otherwise when timed.
"""

from __future__ import annotations

import base64
import statistics
from dataclasses import dataclass

import numpy as np

from effkit.abtest import median_ci, median_ci_coverage

ROUNDS, PER_ROUND, WARMUP = (
    24,
    600,
    200,
)  # 16 x 300 left identical models 1.5x vs 1.9x apart in one run
TOLERANCE = 1e-4  # the same row through the same session: onnxruntime answers it bit for bit


@dataclass
class LatencyAB:
    ratio: float  # median over rounds of P95(baseline) / P95(candidate)
    ci_low: float
    ci_high: float
    coverage: float
    rounds: int
    baseline_ms: tuple[float, float, float]  # pooled P50, P95, P99
    candidate_ms: tuple[float, float, float]


def _pct(values: np.ndarray) -> tuple[float, float, float]:
    p50, p95, p99 = np.percentile(values * 1e3, [50, 95, 99])
    return float(p50), float(p95), float(p99)


def judge(times: np.ndarray) -> list[LatencyAB]:
    """Each candidate (sessions 1...) against the baseline (session 0); ``times`` [session, round, request] s."""
    p95s = np.percentile(times, 95, axis=2)
    out = []
    for i in range(1, len(times)):
        ratios = list(p95s[0] / p95s[i])
        lo, hi = median_ci(ratios)
        out.append(
            LatencyAB(
                statistics.median(ratios),
                lo,
                hi,
                median_ci_coverage(len(ratios)),
                len(ratios),
                _pct(times[0].ravel()),
                _pct(times[i].ravel()),
            )
        )
    return out


def answers_problem(accuracy_logits: np.ndarray, idx: np.ndarray, answers: np.ndarray) -> str:
    """'' when every timed answer equals the accuracy pass's answer to the same row; else what differs."""
    want = accuracy_logits[idx]
    bad = ~np.all(np.isclose(answers, want, rtol=TOLERANCE, atol=TOLERANCE), axis=1)
    bad |= answers.argmax(1) != want.argmax(1)
    if not bad.any():
        return ""
    return (
        f"{int(bad.sum())} of the {len(idx)} requests the grader timed were answered otherwise than the same "
        f"row one request at a time in the accuracy check (first: request {int(np.flatnonzero(bad)[0])}): "
        "a model must give the same answer whenever it is asked"
    )


def b64(data) -> str:
    return base64.b64encode(
        data
        if isinstance(data, bytes | bytearray)
        else np.ascontiguousarray(data, np.float32).tobytes()
    ).decode()


def floats(r, i: int, shape: tuple, dtype=np.float32) -> np.ndarray | None:
    """Blob ``i`` of a server answer as an array of the shape the parent asked for (None otherwise)."""
    want = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not r.ok or len(r.blobs) <= i or len(r.blobs[i]) != want:
        return None
    return np.frombuffer(r.blobs[i], dtype).reshape(shape)
