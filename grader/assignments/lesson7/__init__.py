"""Lesson 7 - length bucketing: a batch sampler judged on secret length distributions, then timed by the grader.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
