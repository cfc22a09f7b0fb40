"""The grader account's side of the grading service: one request, one answer, standard library only.

Its own module so that asking costs no imports of the grader (formgrader's Autograde asks once per
submission); the service itself is ``grading_service``.
"""

from __future__ import annotations

import json
import socket

GRADING_LIMIT_S = 1800  # the service stops a grading at this; the caller waits a minute longer


def request(path: str, aid: str, student: str, timeout_s: float = GRADING_LIMIT_S + 60) -> dict:
    """The grader account's side: ask for one grading, return the service's answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(path)
        try:
            conn.sendall(json.dumps({"assignment": aid, "student": student}).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before reading the request: the reason is still there to read
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    try:
        return json.loads(data)
    except ValueError:
        return {"refused": "the grading service closed the connection without an answer"}
