"""Weights across the grader's pipes: how long a blob of bert-base size takes from worker to parent.

A child process writes ``{"event": "weights", "nbytes": N}`` and N bytes on a pipe, as a timed
worker does (``grader/sandbox/worker.py``: ``Channel.send_bytes``); the parent receives them through the
parent's real readers: ``supervisor.Worker`` (timed workers) and ``channel.Endpoint`` (probe
workers). Prints seconds and MB/s per size and reader, and checks the bytes.

    python benchmarks/channel_bench.py --sizes 55 110 440 --timeout 600
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.sandbox import (
    channel,
    supervisor,  # noqa: E402
)

# The writer: a pattern it can hash while sending, so the parent can check every byte arrived.
WRITER = r"""
import hashlib, json, os, sys
fd, n, framing = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
block = (bytes(range(256)) * 4096)[: 1 << 20]
digest = hashlib.sha256()
if framing == "worker":
    out = os.fdopen(fd, "w", buffering=1)
    out.write(json.dumps({"event": "weights", "nbytes": n}) + "\n"); out.flush()
    raw = out.buffer
else:
    raw = os.fdopen(fd, "wb", buffering=0)
    raw.write(json.dumps({"event": "weights", "_blobs": [n]}).encode() + b"\n")
left = n
while left:
    piece = block[: min(left, len(block))]
    view = memoryview(piece)
    while view:
        view = view[raw.write(view):]
    digest.update(piece)
    left -= len(piece)
raw.flush()
print(digest.hexdigest(), flush=True)
"""


def send(nbytes: int, framing: str, timeout_s: float) -> tuple[float, bool]:
    """Seconds from the announcement's arrival to the last byte, and whether the bytes match."""
    r, w = os.pipe()
    getattr(channel, "widen", lambda fd: None)(
        r
    )  # absent before the linear reader (for before/after runs)
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(w), str(nbytes), framing],
        pass_fds=(w,),
        stdout=subprocess.PIPE,
        text=True,
    )
    os.close(w)
    try:
        if framing == "worker":
            worker = supervisor.Worker(
                "learner", None, r, -1, Path(os.devnull)
            )  # no sandbox: a bare pipe
            event, _ = worker.event(timeout_s, "announcing the weights")
            t0 = time.perf_counter()
            blob = worker.blob(event["nbytes"], timeout_s, "sending the weights")
        else:
            t0 = time.perf_counter()
            _, (blob,) = channel.Endpoint(r, -1).receive(timeout_s)
        seconds = time.perf_counter() - t0
        ok = hashlib.sha256(blob).hexdigest() == child.communicate(timeout=60)[0].strip()
        return seconds, ok
    finally:
        child.kill()
        os.close(r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[55, 110, 440], help="MB (10^6 bytes)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument(
        "--readers", nargs="+", default=["worker", "endpoint"], choices=["worker", "endpoint"]
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    print(
        f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    for reader in args.readers:
        for mb in args.sizes:
            try:
                seconds, ok = send(mb * 10**6, reader, args.timeout)
            except (supervisor.WorkerFailed, channel.ChannelError) as err:
                seconds, ok = None, f"failed: {err}"
            rate = f"{mb / seconds:8.0f} MB/s" if seconds else ""
            shown = f"{seconds:8.2f} s" if seconds is not None else "       -"
            print(f"{reader:9s} {mb:5d} MB {shown} {rate}  bytes ok: {ok}", flush=True)
            rows.append({"reader": reader, "mb": mb, "seconds": seconds, "ok": ok})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
