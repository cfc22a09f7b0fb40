"""Lesson 1, what the learner's notebook and worker may know: the bottleneck labels and the tolerance.

The trusted setup cell imports these (it runs in the learner's worker too); everything else of the
checks (the parent's device record, its costs and shares) stays in :mod:`.checks`, which the worker
cannot see (:mod:`grader.sandbox.learner_view`).
"""

BOTTLENECKS = ("input pipeline", "compute")
TOLERANCE = 0.25  # learner's samples/s / grader's must lie in [1 - TOLERANCE, 1 + TOLERANCE]
