"""nbgrader's collect, refusing a submission filed under another learner's name.

nbgrader 0.9's exchange names each submission ``<student>+<assignment>+<time>`` and its collect only warns
when the files belong to another account ("cheating attempt?"), then collects them: learner 2 could
overwrite learner 1's graded work with `nbgrader submit --student=learner1`. `OwnedCollect` drops every
record whose folder another account owns (neither the learner named nor the collecting instructor), before
choosing each learner's latest, and says so.
Configured in nbgrader_config.py (``c.ExchangeFactory.collect``), so formgrader's Collect uses it too.
"""

from __future__ import annotations

import glob
import os
import pwd

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect, groupby


def owner(path: str) -> str:
    try:
        return pwd.getpwuid(os.stat(path).st_uid).pw_name
    except KeyError:
        return f"uid {os.stat(path).st_uid}"


class OwnedCollect(ExchangeCollect):
    """Collect only submissions owned by the account they are filed under; the rest are refused, loudly."""

    refused: list[str]

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, f"{student}+{self.coursedir.assignment_id}+*")
        records, self.refused = [], []
        collector = pwd.getpwuid(os.geteuid()).pw_name
        for path in glob.glob(pattern):
            rec = self._path_to_record(path)
            # filed under another account's name: never collected (files the collecting account owns
            # are the instructor's, placed by hand: no learner can make one)
            if owner(path) not in (rec["username"], collector):
                self.refused.append(rec["filename"])
                self.log.error(
                    "REFUSED %s: filed as %s's submission but owned by %s; %s's earlier "
                    "submissions (if any) are collected instead",
                    rec["filename"],
                    rec["username"],
                    owner(path),
                    rec["username"],
                )
                continue
            records.append(rec)
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        self.src_records = []
        for recs in groupby(records, lambda item: item["username"]).values():
            recs = self._sort_by_timestamp(recs)
            if self.duedate is not None and self.before_duedate:
                recs = [r for r in recs if r["timestamp"] <= self.duedate] or recs
            self.src_records.append(recs[0])
