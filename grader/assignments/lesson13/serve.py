"""Lesson 13: the grader's own server, accuracy and load generator (closed loop, batch 1).

**What it does.** ``accuracy(session, x, y)`` evaluates a session on the held-out set.
``latency_compare(baseline, candidates, requests)`` is a closed-loop load generator: one request at
a time, batch 1, each request's latency taken with the parent's clock around ``session.run``. After
a warm-up of every session it runs ``ROUNDS`` rounds of ``PER_ROUND`` requests per session in
A B C / C B A order, so drift on a shared machine hits all alike; per round it takes each session's P95
and the ratio baseline / candidate (> 1: the candidate is faster), then the median ratio and its
distribution-free interval (``effkit.abtest.median_ci``, real coverage from
``median_ci_coverage``), plus pooled P50/P95/P99 per session.

**When to use it.** By :mod:`grader.assignments.lesson13.checks`, after ``artifact.validate``; no
learner code runs in this process.

**Expected gain.** A P95 ratio that is the same verdict run after run (calibration in
``grader/README.md``, lesson 13).

**Pitfalls.** At batch 1 these models take tens of microseconds: Python's call overhead is part
of every latency, for both sessions alike. One thread per session, as the SLO is stated.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from effkit.abtest import median_ci, median_ci_coverage

ROUNDS, PER_ROUND, WARMUP = 24, 600, 200  # 16 x 300 left identical models 1.5x vs 1.9x apart in one run
_clock = time.perf_counter


@dataclass
class LatencyAB:
    ratio: float  # median over rounds of P95(baseline) / P95(candidate)
    ci_low: float
    ci_high: float
    coverage: float
    rounds: int
    baseline_ms: tuple[float, float, float]  # pooled P50, P95, P99
    candidate_ms: tuple[float, float, float]


def accuracy(sess, x: np.ndarray, y: np.ndarray, batch: int = 256) -> float:
    right = 0
    for i in range(0, len(x), batch):
        logits = sess.run(["logits"], {"features": x[i : i + batch]})[0]
        right += int((np.asarray(logits).argmax(1) == y[i : i + batch]).sum())
    return right / len(x)


def _requests(sess, rows: np.ndarray) -> list[float]:
    out = []
    for row in rows:
        t0 = _clock()
        sess.run(["logits"], {"features": row})
        out.append(_clock() - t0)
    return out


def _pct(values: list[float]) -> tuple[float, float, float]:
    p50, p95, p99 = np.percentile(np.asarray(values) * 1e3, [50, 95, 99])
    return float(p50), float(p95), float(p99)


def latency_compare(baseline, candidates: list, x: np.ndarray, rounds: int = ROUNDS, per_round: int = PER_ROUND,
                    warmup: int = WARMUP) -> list[LatencyAB]:  # fmt: skip
    """Each candidate against the baseline, all timed in one run: rounds in A B C / C B A order."""
    sessions = [baseline, *candidates]
    rows = [x[i : i + 1] for i in range(len(x))]
    pick = [rows[i % len(rows)] for i in range(max(warmup, per_round))]
    for sess in sessions:
        _requests(sess, pick[:warmup])
    pooled: list[list[float]] = [[] for _ in sessions]
    p95s: list[list[float]] = [[] for _ in sessions]
    for r in range(rounds):
        batch = [rows[(r * per_round + i) % len(rows)] for i in range(per_round)]
        order = range(len(sessions)) if r % 2 == 0 else reversed(range(len(sessions)))
        for i in order:  # drift on a shared machine hits every session alike
            times = _requests(sessions[i], batch)
            pooled[i] += times
            p95s[i].append(float(np.percentile(times, 95)))
    out = []
    for i in range(1, len(sessions)):
        ratios = [a / b for a, b in zip(p95s[0], p95s[i], strict=True)]
        lo, hi = median_ci(ratios)
        out.append(LatencyAB(statistics.median(ratios), lo, hi, median_ci_coverage(len(ratios)), len(ratios),
                             _pct(pooled[0]), _pct(pooled[i])))  # fmt: skip
    return out


def latency_ab(baseline, candidate, x: np.ndarray, rounds: int = ROUNDS, per_round: int = PER_ROUND,
               warmup: int = WARMUP) -> LatencyAB:  # fmt: skip
    return latency_compare(baseline, [candidate], x, rounds, per_round, warmup)[0]
