"""Lesson 5 - activation checkpointing: gradients, a plan's bytes and its time, graded out of the kernel.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
