"""effkit.serving: an open loop shows the queue a closed loop cannot, and batching pays under load."""

import time

import numpy as np
import pytest

from effkit.serving import (
    closed_loop,
    concat_feeds,
    open_loop,
    pad_to_longest,
    poisson_arrivals,
    replay_queue,
)

SERVICE_S = 0.002
FEEDS = [{"x": np.full((1, 3), i, dtype=np.float32)} for i in range(5)]


def fixed_cost_server(seen: list[int]):
    """Costs SERVICE_S per call whatever the batch size (a server with spare width), records sizes."""

    def serve(feed):
        seen.append(len(feed["x"]))
        time.sleep(SERVICE_S)

    return serve


def test_arrivals_are_poisson_at_the_rate_and_start_at_zero():
    t = poisson_arrivals(200.0, 4000, seed=3)
    assert t[0] == 0 and np.all(np.diff(t) >= 0)
    assert np.mean(np.diff(t)) == pytest.approx(1 / 200, rel=0.06)
    assert np.array_equal(t, poisson_arrivals(200.0, 4000, seed=3))


def test_a_light_load_sees_about_the_service_time():
    result = open_loop(fixed_cost_server([]), FEEDS, rate=40.0, count=60, warmup=5)
    p50, p95, _ = result.percentiles()
    assert len(result.latencies) == 55
    assert SERVICE_S * 1e3 <= p50 < 4 * SERVICE_S * 1e3  # never below the service time itself
    assert result.mean_batch == 1
    assert 0.02 < result.busy < 0.5  # 40/s x ~2-3 ms: the server idles most of the time


def test_past_capacity_the_queue_shows_in_the_latency():
    # 1000 requests/s against a 500/s server: the last of 200 requests waits ~0.2 s. A loop that clocked
    # from the start of service (a closed loop's view) would report ~2 ms for every request.
    result = open_loop(fixed_cost_server([]), FEEDS, rate=1000.0, count=200, warmup=0)
    assert result.percentiles()[1] > 25 * SERVICE_S * 1e3
    assert result.served_rate < 600
    assert result.busy > 0.9  # past capacity the server never idles after the first arrival


def test_batching_serves_the_same_load_with_a_short_queue():
    sizes: list[int] = []
    batched = open_loop(
        fixed_cost_server(sizes), FEEDS, rate=1000.0, count=200, max_batch=8, warmup=0, seed=1
    )
    single = open_loop(
        fixed_cost_server([]), FEEDS, rate=1000.0, count=200, max_batch=1, warmup=0, seed=1
    )
    assert (
        sum(sizes[1:]) == 200 and max(sizes) <= 8
    )  # every request once (the first call is the warm-up)
    assert batched.mean_batch > 1.5
    assert batched.percentiles()[1] * 4 < single.percentiles()[1]


def test_a_batch_waits_for_more_requests_only_as_long_as_allowed():
    sizes: list[int] = []
    result = open_loop(
        fixed_cost_server(sizes),
        FEEDS,
        rate=200.0,
        count=80,
        max_batch=4,
        max_wait_s=0.02,
        warmup=0,
    )
    assert result.mean_batch > 1.5  # at 200/s, 20 ms of patience gathers ~4
    assert (
        result.percentiles()[1] < 20 + 3 * SERVICE_S * 1e3 + 15
    )  # wait bound + service + a busy core's slack


def test_concat_and_bad_input():
    both = concat_feeds(FEEDS[:2])
    assert both["x"].shape == (2, 3) and both["x"][1, 0] == 1
    with pytest.raises(ValueError, match="positive"):
        poisson_arrivals(0, 10)
    with pytest.raises(ValueError, match="max_batch"):
        open_loop(lambda f: None, FEEDS, rate=10, count=10, max_batch=0)
    with pytest.raises(ValueError, match="warmup"):
        open_loop(lambda f: None, FEEDS, rate=10, count=10, warmup=10)


def test_pad_to_longest_pads_each_batch_only_to_its_own_longest():
    feeds = [
        {"ids": np.array([[5, 6]]), "mask": np.ones((1, 2), int)},
        {"ids": np.array([[7, 8, 9, 4]]), "mask": np.ones((1, 4), int)},
    ]
    batch = pad_to_longest(feeds, pad={"ids": 3, "mask": 0})
    assert batch["ids"].tolist() == [[5, 6, 3, 3], [7, 8, 9, 4]]
    assert batch["mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert pad_to_longest(feeds[:1]) is feeds[0]  # a batch of one is not padded at all
    sizes: list[int] = []

    def serve(feed):
        sizes.append(feed["ids"].shape[1])

    open_loop(serve, feeds, rate=500.0, count=6, max_batch=2, warmup=0, collate=pad_to_longest)
    assert set(sizes) <= {2, 4}  # every batch as long as its longest request, never longer


def test_closed_loop_interleaves_blocks_and_times_each_request():
    calls: list[tuple[str, int]] = []
    synced: list[int] = []

    def server(name, seconds):
        def serve(i):
            calls.append((name, i))
            time.sleep(seconds)

        return serve

    lat, served = closed_loop(
        {"a": server("a", 0.001), "b": server("b", 0.003)},
        available=7,
        count=20,
        rounds=4,
        warmup=2,
        sync=lambda: synced.append(1),
    )
    assert calls[:4] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]  # the warm-up, not timed
    timed = calls[4:]
    assert [n for n, _ in timed[:5]] == ["a"] * 5 and [n for n, _ in timed[10:15]] == ["b"] * 5
    assert [i for n, i in timed if n == "a"] == [i for n, i in timed if n == "b"] == list(served)
    assert list(served) == [i % 7 for i in range(20)]
    assert len(lat["a"]) == len(lat["b"]) == 20 and len(synced) == 1 + 2 * 40
    assert np.median(lat["a"]) >= 0.001 and np.median(lat["b"]) > np.median(lat["a"])


def test_replay_queue_is_lindleys_recursion():
    rng = np.random.default_rng(2)
    service = rng.exponential(0.002, size=500)
    arrivals = poisson_arrivals(400.0, 500, seed=4)
    finish, expected = 0.0, []
    for a, s in zip(arrivals, service, strict=True):
        finish = max(a, finish) + s
        expected.append(finish - a)
    assert np.allclose(replay_queue(service, arrivals), expected)
    # idle server: latency is the service time; all at once: each waits for every one before it
    assert np.allclose(replay_queue(np.full(3, 0.1), np.array([0.0, 1.0, 2.0])), 0.1)
    assert np.allclose(replay_queue(np.full(3, 0.1), np.zeros(3)), [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="one service time"):
        replay_queue(np.ones(2), np.ones(3))
