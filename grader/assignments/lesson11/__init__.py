"""Lesson 11 - data parallelism: the learner's training function run on 2 gloo ranks, judged by the parent.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
