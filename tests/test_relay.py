"""The grader's relay (grader/sandbox/relay.py): the parent performs the ranks' collectives and records them.

Each test plays the ranks' requests from threads, as ``ProbeSession.call`` serves each rank's
worker from a thread of its own; lesson 11's exercise tests run it under real DDP."""

import base64
import threading
import time

import torch

from grader.sandbox.channel import tensor_from, tensor_msg
from grader.sandbox.relay import Relay


def _request(op: str, *tensors, **extra) -> tuple[dict, list[bytes]]:
    metas, blobs = zip(*(tensor_msg(t) for t in tensors), strict=True) if tensors else ((), ())
    return {"event": "dev", "kind": "collective", "op": op, "tensors": list(metas), **extra}, list(
        blobs
    )


def _ask_together(relay: Relay, requests: list) -> list[dict]:
    """Every rank's request at once, one thread per rank; each rank's reply."""
    replies: list = [None] * len(requests)

    def ask(rank: int) -> None:
        replies[rank] = relay.serve_for(rank)(*requests[rank])

    threads = [threading.Thread(target=ask, args=(r,)) for r in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return replies


def _tensors(reply: dict) -> list[torch.Tensor]:
    return [
        tensor_from(m, base64.b64decode(raw))
        for m, raw in zip(reply["meta"], reply["out"], strict=True)
    ]


def test_a_collective_is_performed_once_every_rank_asked_and_each_contribution_is_recorded():
    relay = Relay(2)
    a, b = (
        torch.tensor([1.0, 2.0], dtype=torch.float64),
        torch.tensor([3.0, 4.0], dtype=torch.float64),
    )
    replies = _ask_together(
        relay, [_request("allreduce", a, reduce="sum"), _request("allreduce", b, reduce="sum")]
    )
    assert [_tensors(r)[0].tolist() for r in replies] == [[4.0, 6.0], [4.0, 6.0]]
    replies = _ask_together(
        relay, [_request("broadcast", a, root=1), _request("broadcast", b, root=1)]
    )
    assert [_tensors(r)[0].tolist() for r in replies] == [[3.0, 4.0], [3.0, 4.0]]
    replies = _ask_together(relay, [_request("allgather", a), _request("allgather", b)])
    assert [t.tolist() for t in _tensors(replies[1])] == [[1.0, 2.0], [3.0, 4.0]]
    assert [c["op"] for c in relay.log] == ["allreduce", "broadcast", "allgather"]
    assert relay.log[0]["tensors"][1][0].tolist() == [3.0, 4.0] and relay.log[0]["numels"] == [2]


def test_ranks_that_call_different_collectives_get_an_error_not_an_answer():
    relay = Relay(2)
    x = torch.zeros(3)
    replies = _ask_together(
        relay, [_request("allreduce", x, reduce="sum"), _request("broadcast", x, root=0)]
    )
    assert all(
        "rank 0 called allreduce (sum) of [float32[3]] while rank 1 called broadcast" in r["error"]
        for r in replies
    ), replies
    replies = _ask_together(
        relay, [_request("allreduce", x, reduce="sum"), _request("allreduce", torch.zeros(4))]
    )
    assert all("error" in r for r in replies), replies


def test_a_forged_request_fails_its_rank_and_releases_the_peer_without_crashing_the_parent():
    for forged in (
        {"event": "dev", "kind": "collective", "op": "allreduce", "tensors": ["not a dict"]},
        {
            "event": "dev",
            "kind": "collective",
            "op": "allreduce",
            "tensors": [{"dtype": "object", "shape": [1]}],
        },
        {"event": "dev", "kind": "collective", "op": "exec", "tensors": []},
        {"event": "dev", "kind": "collective", "op": "allreduce", "reduce": ["sum"], "tensors": []},
        {"event": "dev", "kind": "collective", "op": "broadcast", "root": 7, "tensors": []},
    ):
        relay = Relay(2, wait_s=30)
        t0 = time.monotonic()
        replies = _ask_together(
            relay,
            [
                (forged, [b"\0" * 8] * len(forged["tensors"])),
                _request("allreduce", torch.zeros(2), reduce="sum"),
            ],
        )
        assert "error" in replies[0] and "error" in replies[1], (forged, replies)
        assert time.monotonic() - t0 < 5 and relay.failure.startswith("rank 0:"), relay.failure


def test_a_rank_whose_peer_never_joins_or_stops_gets_an_error_in_bounded_time():
    relay = Relay(2, wait_s=0.5)
    t0 = time.monotonic()
    reply = relay.serve_for(0)(*_request("allreduce", torch.zeros(2), reduce="sum"))
    assert (
        "rank 1 did not join within 0 s" in reply["error"]
        or "rank 1 did not join within 1 s" in reply["error"]
    )
    assert time.monotonic() - t0 < 3
    relay = Relay(2, wait_s=30)
    threading.Timer(0.3, relay.finish, args=(1,)).start()
    t0 = time.monotonic()
    reply = relay.serve_for(0)(*_request("barrier"))
    assert "rank 1 stopped" in reply["error"] and time.monotonic() - t0 < 5, reply


def test_a_rank_cannot_send_more_than_the_relay_accepts(monkeypatch):
    import grader.sandbox.relay as relay_module

    monkeypatch.setattr(relay_module, "MAX_BYTES", 1000)
    relay = Relay(2, wait_s=5)
    big = torch.zeros(200, dtype=torch.float64)  # 1,600 bytes
    replies = _ask_together(
        relay, [_request("allreduce", big, reduce="sum"), _request("allreduce", big, reduce="sum")]
    )
    assert all("error" in r for r in replies) and "MB sent" in relay.failure, replies
