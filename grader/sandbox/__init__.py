"""Layer 1: the processes that run learner code, the walls around them, and the pipes out of them.

Workers import modules of this package directly; keep this file empty so that they pull in nothing else.
"""
