"""Open-loop load: requests that arrive on their own schedule, a queue, a batcher, real service times.

`open_loop(serve, feeds, rate)` replays Poisson arrivals in real time against one batching server; a
request's latency runs from its arrival, so queueing counts, as in an SLO. A run past capacity ends when its
requests are served, so its P95 depends on how many were sent: report the number.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_clock = time.perf_counter  # captured at import, as in effkit.abtest


@dataclass
class LoadResult:
    rate: float  # offered requests/s
    latencies: np.ndarray  # seconds per request after the warm-up, in arrival order
    batches: list[int]  # size of every batch served (warm-up included)
    seconds: float  # wall time from the first arrival to the last answer
    served_rate: float  # requests answered per second over the run
    busy: float  # share of the run's wall time the server spent serving (its utilisation, measured)

    def percentiles(self, qs: Sequence[float] = (50, 95, 99)) -> tuple[float, ...]:
        """Latency percentiles in milliseconds."""
        return tuple(float(v) for v in np.percentile(self.latencies * 1e3, qs))

    @property
    def mean_batch(self) -> float:
        return float(np.mean(self.batches))


def poisson_arrivals(rate: float, count: int, seed: int = 0) -> np.ndarray:
    """Arrival times (s from 0) of ``count`` requests, exponential gaps of mean 1/rate."""
    if rate <= 0 or count <= 0:
        raise ValueError(f"rate and count must be positive, got rate={rate}, count={count}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    return np.cumsum(gaps) - gaps[0]  # the first request arrives at 0


def _wait_until(deadline: float) -> None:
    """Sleep most of the way, then spin the last half millisecond (sleep overshoots by ~0.1 ms)."""
    while True:
        left = deadline - _clock()
        if left <= 0:
            return
        if left > 6e-4:
            time.sleep(left - 5e-4)


def concat_feeds(feeds: Sequence[dict]) -> dict:
    """One batch from single-request feeds (dicts of arrays with a leading batch dimension)."""
    if len(feeds) == 1:
        return feeds[0]
    return {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]}


def open_loop(
    serve: Callable[[dict], object],
    feeds: Sequence[dict],
    rate: float,
    count: int,
    max_batch: int = 1,
    max_wait_s: float = 0.0,
    warmup: int = 20,
    seed: int = 0,
) -> LoadResult:
    """Serve ``count`` Poisson arrivals at ``rate``/s (the first ``warmup`` not counted); see the module doc.

    ``feeds`` are single requests, used in turn; ``serve`` gets one batch (``concat_feeds``) per call.
    """
    if max_batch < 1 or max_wait_s < 0:
        raise ValueError(f"max_batch >= 1 and max_wait_s >= 0, got {max_batch}, {max_wait_s}")
    if not 0 <= warmup < count:
        raise ValueError(f"warmup must be in [0, count), got {warmup} of {count}")
    serve(concat_feeds(list(feeds[:1])))  # the first call allocates: not a request
    arrivals = poisson_arrivals(rate, count, seed)
    answered = np.empty(count)
    batches: list[int] = []
    serving = 0.0
    start = _clock()
    due = arrivals + start  # wall-clock arrival of each request
    head = 0  # first request not yet served
    while head < count:
        _wait_until(due[head])  # idle server: wait for the next arrival
        if (
            max_batch > 1 and max_wait_s > 0
        ):  # let the batch fill, but not past the oldest's patience
            full_at = due[min(head + max_batch, count) - 1]
            _wait_until(min(full_at, due[head] + max_wait_s))
        now = _clock()
        tail = head + 1
        while tail < count and tail - head < max_batch and due[tail] <= now:
            tail += 1
        began = _clock()
        serve(concat_feeds([feeds[i % len(feeds)] for i in range(head, tail)]))
        answered[head:tail] = done = _clock()
        serving += done - began
        batches.append(tail - head)
        head = tail
    latencies = answered - due
    seconds = float(answered[-1] - start)
    return LoadResult(
        rate=rate,
        latencies=latencies[warmup:],
        batches=batches,
        seconds=seconds,
        served_rate=count / seconds if seconds > 0 else float("inf"),
        busy=serving / seconds if seconds > 0 else 1.0,
    )
