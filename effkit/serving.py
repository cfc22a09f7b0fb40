"""Serving measurements: one request at a time (closed loop), and open-loop load with a queue and a batcher.

`closed_loop(servers, n, count)` times single requests of several servers interleaved in blocks (A B B A ...),
so drift and a neighbour's job hit all of them alike. `open_loop(serve, feeds, rate)` replays Poisson arrivals in
real time against one batching server; a request's latency runs from its arrival, so queueing counts, as in an
SLO. A run past capacity ends when its requests are served, so its P95 depends on how many were sent: report the
number. `replay_queue(service, arrivals)` computes, without waiting, the latencies a one-at-a-time FIFO server
with those service times would give (Lindley's recursion): it is a model (service times independent of the
load), to be checked against `open_loop` where both exist. `pad_to_longest` batches requests of different
lengths by padding each batch only to its own longest request (as lesson 7 pads training batches).
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


def pad_to_longest(feeds: Sequence[dict], pad: int | dict[str, int] = 0) -> dict:
    """One batch from single-request feeds of shape [1, length_i]: each array right-padded along axis 1
    to the batch's longest request, with ``pad`` (per key when a dict: a tokenizer's pad id for the ids,
    0 for the attention mask). A batch of one is returned as it is: no padding at all."""
    if len(feeds) == 1:
        return feeds[0]
    longest = max(f[k].shape[1] for f in feeds for k in f)
    out = {}
    for k in feeds[0]:
        value = pad[k] if isinstance(pad, dict) else pad
        rows = [
            np.pad(f[k], ((0, 0), (0, longest - f[k].shape[1])), constant_values=value)
            for f in feeds
        ]
        out[k] = np.concatenate(rows)
    return out


def closed_loop(
    servers: dict[str, Callable[[int], object]],
    available: int,
    count: int,
    rounds: int = 10,
    warmup: int = 5,
    sync: Callable[[], None] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-request seconds of each server, one request at a time, in interleaved blocks.

    ``servers[name](i)`` serves request ``i`` (of ``available``); every server gets the same
    ``count`` requests in ``rounds`` blocks, the order of servers reversed every other block (A B, B A,
    ...) so that slow drift hits all alike. ``sync`` runs before each clock read (a GPU's synchronise:
    without it the clock reads a kernel launch, not its work). Returns ({name: seconds}, the request
    index each timing belongs to, the same for every server).
    """
    if count < 1 or rounds < 1 or available < 1:
        raise ValueError(
            f"count, rounds and available must be >= 1: {count}, {rounds}, {available}"
        )
    wait = sync or (lambda: None)
    for serve in servers.values():  # first calls allocate and fill caches: not requests
        for i in range(min(warmup, available)):
            serve(i)
    wait()
    blocks = np.array_split(np.arange(count) % available, rounds)
    out: dict[str, list[float]] = {name: [] for name in servers}
    for r, block in enumerate(blocks):
        for name in list(servers) if r % 2 == 0 else list(reversed(servers)):
            serve = servers[name]
            for i in block:
                wait()
                t0 = _clock()
                serve(int(i))
                wait()
                out[name].append(_clock() - t0)
    return {k: np.asarray(v) for k, v in out.items()}, np.concatenate(blocks)


def replay_queue(service_s: np.ndarray, arrivals_s: np.ndarray) -> np.ndarray:
    """Latencies (s) of requests arriving at ``arrivals_s`` (sorted) at one FIFO server that serves one
    at a time, request i taking ``service_s[i]``: finish_i = max(arrival_i, finish_(i-1)) + service_i.

    Vectorised: with C the running sum of service times, finish_i = C_i + max over j <= i of
    (arrival_j - C_(j-1)), the latest idle moment before i. A model: it assumes a request's service time
    does not depend on the load (caches, frequency and a neighbour's job say otherwise).
    """
    service = np.asarray(service_s, dtype=float)
    arrivals = np.asarray(arrivals_s, dtype=float)
    if service.shape != arrivals.shape:
        raise ValueError(f"one service time per arrival: {service.shape} vs {arrivals.shape}")
    done = np.cumsum(service)
    before = done - service  # C_(j-1)
    finish = done + np.maximum.accumulate(arrivals - before)
    return finish - arrivals


def open_loop(
    serve: Callable[[dict], object],
    feeds: Sequence[dict],
    rate: float,
    count: int,
    max_batch: int = 1,
    max_wait_s: float = 0.0,
    warmup: int = 20,
    seed: int = 0,
    collate: Callable[[Sequence[dict]], dict] = concat_feeds,
) -> LoadResult:
    """Serve ``count`` Poisson arrivals at ``rate``/s (the first ``warmup`` not counted); see the module doc.

    ``feeds`` are single requests, used in turn; ``serve`` gets one batch per call, made by ``collate``
    (``concat_feeds``; `pad_to_longest` for requests of different lengths).
    """
    if max_batch < 1 or max_wait_s < 0:
        raise ValueError(f"max_batch >= 1 and max_wait_s >= 0, got {max_batch}, {max_wait_s}")
    if not 0 <= warmup < count:
        raise ValueError(f"warmup must be in [0, count), got {warmup} of {count}")
    serve(collate(list(feeds[:1])))  # the first call allocates: not a request
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
        serve(collate([feeds[i % len(feeds)] for i in range(head, tail)]))
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
