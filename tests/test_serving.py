"""effkit.serving: an open loop shows the queue a closed loop cannot, and batching pays under load."""

import time

import numpy as np
import pytest

from effkit.serving import concat_feeds, open_loop, poisson_arrivals

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
