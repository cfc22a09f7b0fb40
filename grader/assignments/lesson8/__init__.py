"""Lesson 8 - LoRA: a LoRA layer and its injection checked against peft, a recipe the grader trains itself.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
