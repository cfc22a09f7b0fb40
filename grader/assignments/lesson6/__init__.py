"""Lesson 6 - never lose a run: a crash-safe training loop, graded by fault injection.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
