"""Lesson 12 - hyperparameter search on a budget: the learner's policy chooses, the grader trains and charges.

Its ``ASSIGNMENT`` lives in ``checks`` (parent side), so a worker importing ``probes`` loads none of it.
"""
