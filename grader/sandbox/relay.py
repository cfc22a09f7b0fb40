"""The ranks' only channel: a process group whose every collective the grader itself performs.

The parent sees the content of every exchange, so it can check each rank's contribution rather
than a byte count. Everything a rank sends is a claim; requests are capped (``MAX_CALLS``, ``MAX_BYTES``).
"""

from __future__ import annotations

import base64
import threading

from grader.sandbox.channel import ChannelError, tensor_from, tensor_msg

OPS = ("allreduce", "broadcast", "allgather", "barrier")
REDUCE = ("sum", "avg", "max", "min")
MAX_CALLS = 2000  # DDP makes ~5 collectives then one per sync: 16 syncs are ~21 calls
MAX_BYTES = 256 << 20  # all a rank may send through the relay in one run
MAX_TENSORS = 64


# -- the rank's side (runs in the learner's worker) ----------------------------------------------


def install(rank: int, world: int, ask) -> None:
    """Bring up the default process group as a ``RelayGroup``; ``ask(msg, blobs) -> reply`` is the
    worker's request to its parent. No store is needed: no rank ever connects to another."""
    import torch.distributed as dist

    group = _group_class()
    dist.Backend.register_backend(
        "grader", lambda store, r, w, timeout: group(r, w, ask), devices=["cpu"]
    )
    dist.init_process_group("grader", store=dist.HashStore(), rank=rank, world_size=world)


def _group_class():
    import torch
    import torch.distributed as dist
    from torch.futures import Future

    class Done(dist._Work):
        """A collective already finished (the parent answered before ``ask`` returned)."""

        def __init__(self, result):
            super().__init__()
            self.fut = Future()
            self.fut.set_result(result)

        def wait(self, timeout=None):
            return True

        def is_completed(self):
            return True

        def is_success(self):
            return True

        def get_future(self):
            return self.fut

    class RelayGroup(dist.ProcessGroup):
        """A process group whose collectives are requests to the grader (see the module's docstring)."""

        def __init__(self, rank: int, world: int, ask):
            super().__init__(rank, world)
            self._ask = ask

        def getBackendName(self):  # noqa: N802 (torch's name)
            return "grader"

        def _call(self, op: str, tensors, **extra) -> list:
            metas, blobs = (
                zip(*(tensor_msg(t) for t in tensors), strict=True) if tensors else ((), ())
            )
            reply = self._ask(
                {"event": "dev", "kind": "collective", "op": op, "tensors": list(metas), **extra},
                list(blobs),
            )
            if not isinstance(reply, dict) or reply.get("error") or "out" not in reply:
                raise RuntimeError(
                    f"the grader's process group: {(reply or {}).get('error', 'no answer')}"
                )
            out = []
            for t, raw in zip(reply["meta"], reply["out"], strict=True):
                out.append(tensor_from(t, base64.b64decode(raw)))
            return out

        def allreduce(self, tensors, opts=None):
            name = _reduce_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
            for t, r in zip(tensors, self._call("allreduce", tensors, reduce=name), strict=True):
                t.copy_(r)
            return Done(tensors)

        def broadcast(self, tensors, opts=None):
            root = int(opts.rootRank) if opts is not None else 0
            for t, r in zip(tensors, self._call("broadcast", tensors, root=root), strict=True):
                t.copy_(r)
            return Done(tensors)

        def allgather(self, output_lists, inputs, opts=None):
            got = self._call("allgather", inputs)
            for i, outs in enumerate(output_lists):
                for r, t in enumerate(outs):
                    t.copy_(got[r * len(inputs) + i])
            return Done(output_lists)

        def barrier(self, opts=None):
            self._call("barrier", [])
            return Done([torch.empty(0)])

    def _reduce_name(op) -> str:
        for name in REDUCE:
            if op == getattr(dist.ReduceOp, name.upper()):
                return name
        raise RuntimeError(
            f"the grader's process group reduces by {', '.join(REDUCE)} only, not {op}"
        )

    return RelayGroup


def __getattr__(name: str):
    if name == "RelayGroup":  # built on first use: torch.distributed is imported only by the ranks
        return _group_class()
    raise AttributeError(name)


# -- the parent's side ---------------------------------------------------------------------------


class Relay:
    """The parent's end of every rank's collectives: ``serve_for(rank)`` answers that rank's
    requests (a ``ProbeSession.call`` serve callback); ``finish(rank)`` once its call returned."""

    WAIT_S = 40.0

    def __init__(self, world: int, wait_s: float | None = None):
        self.world, self.wait_s = world, self.WAIT_S if wait_s is None else wait_s
        self.cond = threading.Condition()
        self.calls = [0] * world
        self.sent = [0] * world
        self.done = [False] * world
        self.pending: dict[int, dict[int, tuple]] = {}
        self.answers: dict[int, tuple[list, str]] = {}
        self.log: list[
            dict
        ] = []  # one entry per collective, in order: op, reduce, shapes, each rank's tensors
        self.failure = ""

    def serve_for(self, rank: int):
        return lambda msg, blobs=(): self._serve(rank, msg, blobs)

    def finish(self, rank: int) -> None:
        with self.cond:
            self.done[rank] = True
            self.cond.notify_all()

    def _serve(self, rank: int, msg: dict, blobs) -> dict:
        try:
            request = self._parse(rank, msg, blobs)
        except (
            ChannelError,
            TypeError,
            ValueError,
        ) as err:  # a forged request fails its rank, never the grader
            with self.cond:
                self.failure = self.failure or f"rank {rank}: {err}"
                self.cond.notify_all()
            return {"error": str(err)}
        with self.cond:
            k = self.calls[rank]
            self.calls[rank] += 1
            self.pending.setdefault(k, {})[rank] = request
            if len(self.pending[k]) == self.world:
                self.answers[k] = self._answer(k, self.pending.pop(k))
                self.cond.notify_all()
            ready = self.cond.wait_for(lambda: k in self.answers or self._gone(k), self.wait_s)
            if k not in self.answers:
                missing = [r for r in range(self.world) if r not in self.pending.get(k, {})]
                why = "stopped" if ready else f"did not join within {self.wait_s:.0f} s"
                return {
                    "error": f"collective {k} ({request[0]}): rank {missing[0] if missing else '?'} {why}"
                }
            out, error = self.answers[k]
        if error:
            return {"error": error}
        return {
            "meta": [m for m, _ in out],
            "out": [base64.b64encode(raw).decode() for _, raw in out],
        }

    def _gone(self, k: int) -> bool:
        """A peer that has not sent its k-th request and never will (its call ended), or a failure."""
        waiting = self.pending.get(k, {})
        return bool(self.failure) or any(
            self.done[r] for r in range(self.world) if r not in waiting
        )

    def _parse(self, rank: int, msg: dict, blobs) -> tuple:
        op, metas = msg.get("op"), msg.get("tensors")
        if msg.get("kind") != "collective" or op not in OPS:
            raise ChannelError(f"not a collective the grader relays: {str(msg)[:80]}", "protocol")
        if (
            not isinstance(metas, list)
            or len(metas) != len(blobs)
            or len(metas) > MAX_TENSORS
            or not all(isinstance(m, dict) for m in metas)
        ):
            raise ChannelError("a collective's tensors do not match their descriptions", "protocol")
        self.sent[rank] += sum(len(b) for b in blobs)
        if self.sent[rank] > MAX_BYTES or self.calls[rank] >= MAX_CALLS:
            raise ChannelError(
                f"more than {MAX_CALLS} collectives or {MAX_BYTES >> 20} MB sent", "too_big"
            )
        tensors = [tensor_from(m, bytes(b)) for m, b in zip(metas, blobs, strict=True)]
        reduce, root = msg.get("reduce", "sum"), msg.get("root", 0)
        if op == "allreduce" and reduce not in REDUCE:
            raise ChannelError(f"reduce {str(reduce)[:20]!r} is not one of {REDUCE}", "protocol")
        if op == "broadcast" and not (type(root) is int and 0 <= root < self.world):
            raise ChannelError(f"broadcast from rank {str(root)[:20]}, not a rank", "protocol")
        return (
            op,
            reduce if op == "allreduce" else None,
            root if op == "broadcast" else None,
            tensors,
        )

    def _answer(self, k: int, requests: dict[int, tuple]) -> tuple[list, str]:
        """Every rank's k-th request: the answer (the same for all, or one per rank) and an error."""
        import torch

        first = requests[0]
        kinds = {
            r: (op, red, root, [(str(t.dtype), tuple(t.shape)) for t in ts])
            for r, (op, red, root, ts) in requests.items()
        }
        if any(v != kinds[0] for v in kinds.values()):
            other = next(r for r, v in kinds.items() if v != kinds[0])
            return [], (
                f"collective {k}: rank 0 called {_say(kinds[0])} while rank {other} called "
                f"{_say(kinds[other])}"
            )
        op, reduce, root, _ = first
        per_rank = [requests[r][3] for r in range(self.world)]
        self.log.append(
            {
                "op": op,
                "reduce": reduce,
                "root": root,
                "dtypes": [str(t.dtype).removeprefix("torch.") for t in first[3]],
                "numels": [t.numel() for t in first[3]],
                "tensors": per_rank,
            }
        )
        if op == "allreduce":
            out = []
            for ts in zip(*per_rank, strict=True):
                stack = torch.stack(ts)
                value = {
                    "sum": stack.sum(0),
                    "avg": stack.sum(0) / self.world,
                    "max": stack.amax(0),
                    "min": stack.amin(0),
                }[reduce]
                out.append(value.to(ts[0].dtype))
        elif op == "broadcast":
            out = per_rank[root]
        elif op == "allgather":
            out = [t for r in range(self.world) for t in per_rank[r]]
        else:
            out = []
        return [tensor_msg(t) for t in out], ""


def _say(kind: tuple) -> str:
    op, reduce, root, shapes = kind
    extra = f" ({reduce})" if reduce else f" from rank {root}" if root is not None else ""
    described = ", ".join(d.removeprefix("torch.") + str(list(s)) for d, s in shapes)
    return f"{op}{extra} of [{described}]"
