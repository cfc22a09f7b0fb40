"""Lesson 14's probes, in the learner's probe worker: only the quiz is read here (the recipe is
read by the parent from the cell's text, and timed by the protocol)."""

from __future__ import annotations

from grader.kit.worker import probe_quiz  # noqa: F401  (the worker finds probes by name)
