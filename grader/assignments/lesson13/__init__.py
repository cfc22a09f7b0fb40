"""Lesson 13 - quantized inference under a latency SLO: an ONNX file the grader validates, serves and times itself.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
