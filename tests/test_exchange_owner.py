"""Collect refuses a submission filed under another learner's name (grader/frontends/exchange.py)."""

import os
import pwd
import sys

import pytest
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from grader.frontends.exchange import OwnedCollect

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as two accounts")


def _submit(inbound, student: str, as_user: str, stamp: str) -> None:
    folder = inbound / f"{student}+lesson2+{stamp} UTC+abc123"
    folder.mkdir(parents=True)
    (folder / "lesson2.ipynb").write_text(f"submitted by {as_user}")
    (folder / "timestamp.txt").write_text(f"{stamp} UTC")
    uid = pwd.getpwnam(as_user).pw_uid
    for p in (folder, *folder.iterdir()):
        os.chown(p, uid, uid)


@ROOT_ONLY
def test_a_submission_in_another_learners_name_is_refused_and_theirs_collected(
    tmp_path, caplog, monkeypatch
):
    """As learner 2, `nbgrader submit lesson2 --student=learner1` landed in the exchange and nbgrader's
    collect took it over learner 1's 12/12 with a warning. Here "daemon" forges a later submission as
    "nobody": collect keeps nobody's own earlier one, refuses the forgery and says so."""
    # the gradebook is created by running `alembic`, which lives beside this Python
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    exchange = tmp_path / "exchange"
    inbound = exchange / "effkit" / "inbound"
    _submit(inbound, "nobody", "nobody", "2026-12-01 10:00:00.000000")
    _submit(inbound, "nobody", "daemon", "2026-12-01 11:00:00.000000")  # later, forged
    _submit(inbound, "daemon", "daemon", "2026-12-01 10:30:00.000000")
    config = Config()
    config.CourseDirectory.root = str(tmp_path / "course")
    config.CourseDirectory.course_id = "effkit"
    config.CourseDirectory.assignment_id = "lesson2"
    config.CourseDirectory.db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    config.Exchange.root = str(exchange)
    coursedir = CourseDirectory(config=config)
    collect = OwnedCollect(coursedir=coursedir, authenticator=None, config=config)
    collect.start()
    submitted = tmp_path / "course" / "submitted"
    assert (submitted / "nobody" / "lesson2" / "lesson2.ipynb").read_text() == "submitted by nobody"
    assert (submitted / "daemon" / "lesson2" / "lesson2.ipynb").read_text() == "submitted by daemon"
    assert collect.refused == ["nobody+lesson2+2026-12-01 11:00:00.000000 UTC+abc123"]
    assert any(
        "REFUSED" in r.getMessage() and "owned by daemon" in r.getMessage() for r in caplog.records
    )


def test_the_course_configures_the_owner_checked_collect():
    """formgrader's Collect and `nbgrader collect` both build the collect from the course config."""
    from nbgrader.exchange import ExchangeFactory
    from traitlets.config.loader import PyFileConfigLoader

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = PyFileConfigLoader("nbgrader_config.py", path=here).load_config()
    factory = ExchangeFactory(config=config)
    assert factory.collect is OwnedCollect


@ROOT_ONLY
def test_a_submission_the_instructor_placed_by_hand_is_collected(tmp_path, monkeypatch):
    """Files the collecting account owns were put there by the instructor (no learner can make one):
    collected, as nbgrader does, so a course run from one account keeps working."""
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    inbound = tmp_path / "exchange" / "effkit" / "inbound"
    _submit(inbound, "carl", pwd.getpwuid(os.geteuid()).pw_name, "2026-12-01 10:00:00.000000")
    config = Config()
    config.CourseDirectory.root = str(tmp_path / "course")
    config.CourseDirectory.course_id = "effkit"
    config.CourseDirectory.assignment_id = "lesson2"
    config.CourseDirectory.db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    config.Exchange.root = str(tmp_path / "exchange")
    collect = OwnedCollect(
        coursedir=CourseDirectory(config=config), authenticator=None, config=config
    )
    collect.start()
    assert collect.refused == []
    assert (tmp_path / "course" / "submitted" / "carl" / "lesson2" / "lesson2.ipynb").exists()
