"""Lesson 10 - profiling: the grader plants bottlenecks and profiles them, the learner only diagnoses plain data.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
