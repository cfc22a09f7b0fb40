"""The cohort's grader account: formgrader runs as it, never as root (nbgrader's multi-grader setup).

An instructor or a TA opens formgrader's JupyterLab and may start a terminal there: it must not be
root. ``cohort up`` makes an unprivileged, password-locked account (reached only through the hub,
by the ``formgrade-<course>`` group) and hands it what nbgrader writes: the gradebook, submitted/,
autograded/, feedback/ and the exchange's course folder. The course folder itself stays root's,
group-writable by the grader with the sticky bit, so the grader may add files (sqlite's journal)
but never rename or replace root's: the hub's state, the course key, the signed gradings, the
grading service's socket and the public key. Gradings go through ``grading_service`` (root).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

from grader.common import evidence
from grader.frontends import cohort_acl, grading_signature

# What nbgrader writes from formgrader: the grader account's
NBGRADER_WRITES = ("submitted", "autograded", "feedback", "released_solutions")
NBGRADER_FILES = ("gradebook.db", "grades.csv")
# Root's, made before the folder is handed over (the grader could otherwise make them first)
ROOT_FOLDERS = ("signed", "gradings", "farm", "leaderboard", "grading")


def make_account(name: str) -> pwd.struct_passwd:
    """A locked account with a private home (formgrader's runtime files); no password, no login."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name],
            check=True,
            capture_output=True,
        )
    # locked (no password) and not expired: `cohort down` expires the cohort's accounts
    subprocess.run(["usermod", "--lock", "--expiredate", "", name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    os.chmod(entry.pw_dir, 0o700)
    return entry


def _remember(path: Path, handed: dict[str, list[int]]) -> None:
    st = os.lstat(path)
    handed.setdefault(str(path), [st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)])


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(folder, name), uid, gid)


def hand_over(
    course_dir: Path, state_dir: Path, exchange_course: Path, grader: pwd.struct_passwd
) -> dict[str, list[int]]:
    """Give the grader what nbgrader writes; returns {path: [uid, gid, mode] before} for
    ``take_back``. Idempotent: a second ``up`` keeps the first one's record."""
    handed: dict[str, list[int]] = {}
    evidence.load_key(course_dir)  # root's HMAC key for the leaderboard, made now
    grading_signature.load_signer(state_dir, course_dir)  # and the grading service's keys
    for name in ROOT_FOLDERS:
        path = course_dir / name
        if path.is_symlink() or (path.exists() and os.lstat(path).st_uid != 0):
            raise PermissionError(f"{path} is not root's: remove it before `cohort up`")
        path.mkdir(mode=0o755, exist_ok=True)
    (course_dir / "grading").chmod(0o750)
    os.chown(course_dir / "grading", 0, grader.pw_gid)  # the socket's folder: the grader's group
    _remember(course_dir, handed)
    os.chown(course_dir, 0, grader.pw_gid)
    course_dir.chmod(0o1770)  # sticky: the grader adds files, never renames root's
    for name in NBGRADER_WRITES:
        (course_dir / name).mkdir(exist_ok=True)
    for name in NBGRADER_WRITES + NBGRADER_FILES:
        path = course_dir / name
        if path.exists() and not path.is_symlink():
            _remember(path, handed)
            _chown_tree(path, grader.pw_uid, grader.pw_gid)
    # nbgrader's exchange: the course folder, its outbound and feedback, and inbound (the folder
    # only: each learner's submission stays theirs, which collect and the service check)
    for path in (exchange_course, exchange_course / "inbound"):
        if path.is_dir():
            _remember(path, handed)
            os.lchown(path, grader.pw_uid, grader.pw_gid)
    for name in ("outbound", "feedback"):
        path = exchange_course / name
        if path.is_dir():
            _remember(path, handed)
            _chown_tree(path, grader.pw_uid, grader.pw_gid)
    return handed


def open_sources(solutions: Path, uid: int) -> dict[str, int]:
    """Let the grader read the source assignments (closed to learners, 0700): formgrader lists only
    assignments whose source folder it can see, and autograde copies their other files. An ACL
    entry per folder (r-x) and file (r--), which ``down`` removes; returns {path: mode before}."""
    opened: dict[str, int] = {}
    paths = [solutions, *solutions.rglob("*")] if solutions.is_dir() else []
    for path in paths:
        if path.is_symlink():
            continue
        perm = cohort_acl.LIST | (cohort_acl.TRAVERSE if path.is_dir() else 0)
        opened[str(path)] = stat.S_IMODE(path.stat().st_mode)
        cohort_acl.open_to(str(path), [uid], perm)
    return opened


def reclaim_exchange(exchange_course: Path) -> None:
    """The exchange's course folder back to root while ``up`` releases as root (nbgrader refuses to
    release into a course folder another account owns); ``hand_over`` gives it back."""
    for path in (exchange_course, exchange_course / "inbound"):
        if path.is_dir() and not path.is_symlink():
            os.lchown(path, 0, 0)
    for name in ("outbound", "feedback"):
        path = exchange_course / name
        if path.is_dir() and not path.is_symlink():
            _chown_tree(path, 0, 0)


def take_back(handed: dict[str, list[int]]) -> None:
    """Every path handed over back to its owner and mode from before the first ``up``."""
    for path, (uid, gid, mode) in handed.items():
        p = Path(path)
        if not p.exists() or p.is_symlink():
            continue
        _chown_tree(p, uid, gid)
        p.chmod(mode)
