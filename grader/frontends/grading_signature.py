"""Ed25519 signatures on a cohort's gradings: root's grading service signs, anyone may verify.

The course's HMAC key (``grader.common.evidence``) proves only that the writer held the key, and
whoever can check such a signature can also make one. Formgrader runs as an unprivileged grader
account and must check every score without being able to forge one: the private key stays in the
hub's root-only state folder, the public key lies beside the gradebook, readable by the grader.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.common.evidence import EvidenceError, canonical

# cryptography comes with the cohort extra (JupyterHub needs it too); imported where a key is used,
# so `python -m grader` keeps working on an install without it

ALGORITHM = "Ed25519"
PRIVATE_FILE = "grading-signer.key"  # in the hub's state folder (root, 0700)
PUBLIC_FILE = "grading-signer.pub"  # in the course folder, readable by the grader account
SIGNED_DIR = "signed"  # course/signed/<assignment>/<student>.json: the service's, root-owned


def load_signer(state_dir: Path, course_dir: Path):
    """The private key, made on first use; its public half is (re)written into ``course_dir``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(state_dir) / PRIVATE_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        raw = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
    key = Ed25519PrivateKey.from_private_bytes(path.read_bytes())
    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    out = Path(course_dir) / PUBLIC_FILE
    tmp = out.with_name(f".{PUBLIC_FILE}.{os.getpid()}")
    tmp.write_bytes(public.hex().encode())
    tmp.chmod(0o644)
    os.replace(tmp, out)
    return key


def load_verifier(course_dir: Path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    path = Path(course_dir) / PUBLIC_FILE
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(path.read_text().strip()))
    except (OSError, ValueError) as err:
        raise EvidenceError(f"no grading service key at {path}: {err}") from err


def sign(key, report: dict) -> dict:
    return {
        "algorithm": ALGORITHM,
        "signature": key.sign(canonical(report)).hex(),
        "report": report,
    }


def verify(key, signed: object) -> dict:
    """The report inside ``signed`` if the grading service's key signed exactly it."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(signed, dict) or not isinstance(signed.get("report"), dict):
        raise EvidenceError("not a signed grading")
    if signed.get("algorithm") != ALGORITHM or not isinstance(signed.get("signature"), str):
        raise EvidenceError("not signed by the grading service (no Ed25519 signature)")
    try:
        key.verify(bytes.fromhex(signed["signature"]), canonical(signed["report"]))
    except (InvalidSignature, ValueError) as err:
        raise EvidenceError(
            "signature does not match its grading (edited, or another key)"
        ) from err
    return signed["report"]
