"""Lesson 9 - knowledge distillation: the loss checked against the grader's reference, a recipe the grader trains itself.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
