"""Ray for the farm's driver: a private, token-authenticated Ray on this machine, or a cluster's.

Split from ``grader.frontends.farm`` (the driver's loop): how Ray is started and who may talk to it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SLOT = "effkit_timed_slot"  # a custom resource: one unit per timed grading slot on a node


RAY_TMP = Path(f"/tmp/effkit-ray-{os.getuid()}")  # short: Ray's unix sockets live under it


def _private_token() -> None:
    """A fresh token in a 0700 folder, not Ray's default ~/.ray/auth_token (0644): a cohort host
    gives learners the traverse bit on /root (grader/frontends/cohort_host.py), and a file at a
    known path under it is then readable."""
    RAY_TMP.mkdir(mode=0o700, exist_ok=True)
    os.chmod(RAY_TMP, 0o700)
    # One token per driver: two farms on one host (a grading service's calls beside an
    # instructor's run) each keep their own Ray; a shared file would be overwritten under one
    token = RAY_TMP / f"auth_token.{os.getpid()}"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, secrets.token_hex(32).encode())
    os.close(fd)
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)


def start_ray(address: str | None, slots: int):
    """Join ``address``, or start a private Ray: token auth with a token of our own, its sockets
    and token in a 0700 folder, no dashboard. Token auth needs Ray >= 2.52. Not loopback only:
    Ray 2.60 binds its gRPC ports on every interface whatever ``_node_ip_address`` says."""
    # Ray reads these when it is first imported (its C++ config): set before ``import ray``
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a course host phones nobody
    # The raylet waits this long for its agent, a Python process that imports for ~30 s on a
    # busy 2-core host (the default, 30 s, aborted startup there)
    os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")
    if not address:
        _private_token()
    import ray  # optional heavy dependency: only the farm needs it

    if address:  # the cluster's token: RAY_AUTH_TOKEN(_PATH), set by whoever started it
        ray.init(address=address, log_to_driver=False)
        return ray
    ray.init(
        num_cpus=slots,
        resources={SLOT: slots},
        include_dashboard=False,
        _temp_dir=str(RAY_TMP),
        log_to_driver=False,
    )
    return ray
