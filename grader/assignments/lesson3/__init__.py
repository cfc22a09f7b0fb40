"""Lesson 3 - mixed precision: a policy, a scaler and an AMP train step, graded on speed too.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
