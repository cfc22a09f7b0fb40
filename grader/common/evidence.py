"""Signed grading reports: the course key, HMAC-SHA256 over canonical JSON, and the archive.

Anyone who can write into the course folder could forge a ``grader.json``; a report signed
with ``course/grader.key`` (mode 0600, the grader's user only) was written by a process that
held the key. The archive (``course/gradings/<assignment>/<student>/``) outlives
``nbgrader autograde --force``, which rewrites ``autograded/``. JSON only, never pickle.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from pathlib import Path

KEY_FILE = "grader.key"
KEY_BYTES = 32
ARCHIVE_DIR = "gradings"
ALGORITHM = "HMAC-SHA256"


class EvidenceError(ValueError):
    """A signed report that must not be believed (unsigned, tampered, misfiled)."""


def load_key(course_dir: Path, create: bool = True) -> bytes | None:
    """The course key, created on first use; None when absent and ``create`` is False."""
    path = Path(course_dir) / KEY_FILE
    if not path.exists():
        if not create:
            return None
        _create_key(path)
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise EvidenceError(f"{path} holds {len(key)} bytes, not {KEY_BYTES}: not a course key")
    return key


def _create_key(path: Path) -> None:
    # Written whole under a private name, then linked into place: a second grader starting at
    # the same moment either wins the link or reads the winner's complete key, never half of one.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another grader made it first: use theirs
    finally:
        tmp.unlink()


def canonical(report: dict) -> bytes:
    """The bytes a signature covers: one spelling per report, whatever its key order."""
    return json.dumps(report, sort_keys=True, separators=(",", ":")).encode()


def sign(key: bytes, report: dict) -> str:
    return hmac.new(key, canonical(report), hashlib.sha256).hexdigest()


def verify(key: bytes, signed: object) -> dict:
    """The report inside ``signed`` ({"report", "signature"}) if its signature is the key's."""
    if not isinstance(signed, dict) or not isinstance(signed.get("report"), dict):
        raise EvidenceError("not a signed report")
    signature = signed.get("signature")
    if not isinstance(signature, str) or signed.get("algorithm") != ALGORITHM:
        raise EvidenceError("unsigned")
    if not hmac.compare_digest(sign(key, signed["report"]), signature):
        raise EvidenceError("signature does not match its report (tampered, or another key)")
    return signed["report"]


def safe_name(text: str) -> str:
    """``text`` as one file-name component (timestamps carry ':' and '+')."""
    return re.sub(r"[^0-9A-Za-z_.-]", "-", text).lstrip(".") or "-"


def archive(course_dir: Path, report: dict, key: bytes | None = None) -> Path:
    """Sign ``report`` and write it to the archive; returns its path.

    The file name is the report's timestamp plus the start of its signature: distinct gradings
    never collide, and the same grading archived twice lands on the same file."""
    student, assignment = str(report.get("student") or ""), str(report.get("assignment") or "")
    if not student.strip(". ") or not assignment.strip(". "):
        raise EvidenceError(f"cannot archive a report of {student!r} for {assignment!r}")
    key = key or load_key(course_dir)
    signature = sign(key, report)
    folder = Path(course_dir) / ARCHIVE_DIR / safe_name(assignment) / safe_name(student)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{safe_name(str(report.get('timestamp', '')))}-{signature[:16]}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    signed = {"algorithm": ALGORITHM, "signature": signature, "report": report}
    tmp.write_text(json.dumps(signed, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path
