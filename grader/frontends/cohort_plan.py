"""The cohort's plan: what `cohort up` decided, written to ``course/hub/cohort.json`` and read by
``jupyterhub_config.py``, `cohort down` and the leaderboard's publisher.

Its own module so that readers of the plan (the leaderboard) need not import the cohort's commands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.common import course

COURSE_ID = "effkit"  # must match nbgrader_config.py's CourseDirectory.course_id


@dataclass
class Plan:
    """Everything ``jupyterhub_config.py`` needs, written to ``course/hub/cohort.json``."""

    instructor: str
    learners: list[str]
    url: str
    hub_port: int
    proxy_api_port: int
    service_port: int
    state_dir: str
    exchange: str
    learner_config: str
    venv_bin: str
    proxy_command: str
    course_id: str = COURSE_ID
    course_dir: str = ""
    max_tasks: int = 2048  # processes + threads per learner account (RLIMIT_NPROC, pids cgroup)
    memory_mb: int = 3072  # per learner: cohort_limits.Limits
    cpus: float = 1.0
    tmp_mb: int = 512
    home_mb: int = 4096  # each account's home: an image of its own (cohort_disk), 0: unbounded
    exchange_mb: int = 4096
    disks: dict[str, str] = field(default_factory=dict)  # folder -> its mounted image
    changed_modes: dict[str, int] = field(default_factory=dict)
    traverse: dict[str, int] = field(default_factory=dict)  # folder -> mode, opened by ACL
    leaderboard: str = ""  # the published page's folder, read-only to learners (~/leaderboard)
    grader: str = ""  # the unprivileged account formgrader runs as (nbgrader's multi-grader setup)
    grading_socket: str = ""  # the root grading service's Unix socket (grading_service)
    handed: dict[str, list[int]] = field(default_factory=dict)  # path -> [uid, gid] before up


def state_dir() -> Path:
    return course.course_dir() / "hub"


def plan_file() -> Path:
    return state_dir() / "cohort.json"


def load_plan() -> Plan | None:
    try:
        saved = json.loads(plan_file().read_text())
    except FileNotFoundError:
        return None
    known = Plan.__dataclass_fields__  # a plan written by another version: keep what is known
    return Plan(**{k: v for k, v in saved.items() if k in known})
