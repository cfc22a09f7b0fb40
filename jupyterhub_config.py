"""JupyterHub for an effkit cohort: one instructor, N learners, nbgrader's exchange, formgrader as a service.

Started by ``python -m grader cohort up`` (``make cohort``), which writes the plan this file reads
(``course/hub/cohort.json``: accounts, ports, paths) and prepares the machine. What a real deployment
changes is marked **DEPLOY** below: the authenticator, TLS and the public address, the exchange path,
and where learner servers run (GPU nodes).
"""

import json
import logging
import os
import resource
import sys
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821 - provided by traitlets when JupyterHub loads this file

REPO = Path(__file__).resolve().parent
STATE = Path(os.environ.get("EFFKIT_COHORT_STATE") or REPO / "course" / "hub" / "cohort.json")
plan = json.loads(STATE.read_text())
hub_dir = Path(plan["state_dir"])
sys.path.insert(0, str(REPO))  # the hub imports grader.frontends.cohort_limits from this repository
from grader.frontends import cohort_limits  # noqa: E402

# DEPLOY: listen on the public address behind TLS (c.JupyterHub.ssl_cert / ssl_key, or a reverse
# proxy that terminates TLS). Here: loopback only.
c.JupyterHub.bind_url = plan["url"]
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{plan['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{plan['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [plan["proxy_command"]]
c.ConfigurableHTTPProxy.pid_file = str(hub_dir / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{hub_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(hub_dir / "cookie_secret")
c.JupyterHub.pid_file = str(hub_dir / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # `cohort down` stops the learners' servers too

# Accounts are local Unix users made by `cohort up` (useradd): each learner's files are theirs alone,
# so learner B cannot read A's notebooks or feedback, and nbgrader's exchange knows who submitted.
# PAM checks their passwords. DEPLOY: an OAuth authenticator (GitHub, your university's SSO) with
# the same usernames; LocalAuthenticator.create_system_users=True makes the Unix users on first login.
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no login session (utmp, limits) for a notebook server
c.Authenticator.allowed_users = set(plan["learners"]) | {plan["instructor"]}


# Every learner runs JupyterLab from the course's own environment, as their own user.
# DEPLOY: for GPU nodes use a batch or container spawner (batchspawner, kubespawner) with the
# same command and its own memory/CPU limits; learner servers never need the GPU for grading.
LIMITS = cohort_limits.Limits(
    memory_mb=int(plan.get("memory_mb", cohort_limits.Limits.memory_mb)),
    cpus=float(plan.get("cpus", cohort_limits.Limits.cpus)),
    tmp_mb=int(plan.get("tmp_mb", cohort_limits.Limits.tmp_mb)),
    tasks=int(plan.get("max_tasks", cohort_limits.Limits.tasks)),
)
_said_missing: set[str] = set()


class LimitedSpawner(LocalProcessSpawner):
    """JupyterHub's local spawner with limits per learner (grader/frontends/cohort_limits.py): the
    learner's own cgroup (memory, CPU, tasks), a private /tmp, /var/tmp and /dev/shm, and a cap on
    the tasks their Unix account may run (RLIMIT_NPROC), so one learner's memory, disk or fork bomb
    stops at their own limit. What the host cannot limit is logged once."""

    def make_preexec_fn(self, name):  # called in the hub, as root; preexec runs in the child
        become_user = LocalProcessSpawner.make_preexec_fn(self, name)
        groups, missing = cohort_limits.prepare(name, LIMITS)
        for phrase in set(missing) - _said_missing:
            _said_missing.add(phrase)
            logging.getLogger("JupyterHub").warning("[effkit] not limited per learner: %s", phrase)

        def preexec():
            resource.setrlimit(resource.RLIMIT_NPROC, (LIMITS.tasks, LIMITS.tasks))  # per Unix user
            cohort_limits.enter(groups, LIMITS.tmp_mb, keep=[REPO, Path(plan["venv_bin"]).parent])
            become_user()

        return preexec


c.JupyterHub.spawner_class = LimitedSpawner
c.Spawner.cmd = [str(Path(plan["venv_bin"]) / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180  # a 2-core machine starts JupyterLab in ~15 s, slower under load
c.Spawner.http_timeout = 180
c.Spawner.environment = {
    "PATH": f"{plan['venv_bin']}:/usr/local/bin:/usr/bin:/bin",
    # nbgrader's course id and exchange, and formgrader switched off (see grader/frontends/cohort_host.py)
    "JUPYTER_CONFIG_PATH": plan["learner_config"],
    "OMP_WAIT_POLICY": "PASSIVE",
}

# The instructor grades through formgrader, a hub service on the course repository run as the
# unprivileged grader account (nbgrader's "one class, multiple graders" layout): a terminal opened
# there is not root. The group name must start with "formgrade-" and the service be named after the
# course. Its Autograde asks the root grading service below (grader/frontends/grading_service.py)
# over a Unix socket only the grader account may use; each grading comes back signed (Ed25519).
course = plan["course_id"]
c.JupyterHub.load_groups = {f"formgrade-{course}": {"users": [plan["instructor"]]}}
c.JupyterHub.load_roles = [
    {
        "name": f"formgrade-{course}",
        "groups": [f"formgrade-{course}"],
        "scopes": [
            f"access:services!service={course}",
            "list:services",
            f"read:services!service={course}",
        ],
    },
    {"name": "server", "scopes": ["inherit"]},  # nbgrader's course list asks the hub for services
]
if not plan.get("grader"):  # a plan from before the grader account: formgrader would run as root
    sys.exit("[effkit] the cohort's plan names no grader account: run `python -m grader cohort up`")
PATH = f"{plan['venv_bin']}:/usr/local/bin:/usr/bin:/bin"  # alembic, for the gradebook
c.JupyterHub.services = [
    {
        "name": course,
        "url": f"http://127.0.0.1:{plan['service_port']}",
        "command": [str(Path(plan["venv_bin"]) / "jupyterhub-singleuser")],
        "user": plan["grader"],
        "cwd": str(REPO),
        "environment": {
            "JUPYTERHUB_DEFAULT_URL": "/formgrader",
            "PATH": PATH,
            "PYTHONPATH": str(
                REPO
            ),  # this repository's grader, whatever the venv's editable install
            "EFFKIT_EXCHANGE": plan["exchange"],  # read by nbgrader_config.py
            "EFFKIT_COURSE_DIR": plan["course_dir"],
            "EFFKIT_GRADING_SOCKET": plan["grading_socket"],
            "OMP_WAIT_POLICY": "PASSIVE",
        },
        "oauth_no_confirm": True,
    },
    {  # root's: grades (the sandbox needs root) and signs; no URL, nothing reaches it but the socket
        "name": f"{course}-grading",
        "command": [sys.executable, "-m", "grader.frontends.grading_service"],
        "cwd": str(REPO),
        "environment": {
            "PATH": PATH,
            "PYTHONPATH": str(REPO),
            "EFFKIT_COURSE_DIR": plan["course_dir"],
            "EFFKIT_COHORT_STATE": str(STATE),
            "OMP_WAIT_POLICY": "PASSIVE",
        },
    },
]
