"""Lesson 2 - feed the accelerator: a faster input pipeline, graded on its measured speedup.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
