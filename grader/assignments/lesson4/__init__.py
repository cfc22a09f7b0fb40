"""Lesson 4 - bigger batches: gradient accumulation, graded by gradient equality.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
