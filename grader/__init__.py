"""effkit's autograder: correctness checks and a tamper-resistant, noise-aware speed grade.

**What it does.** Grades a learner's notebook through real nbgrader 0.9: correctness checks run in
the notebook's test cells; the performance cell is filled in by the grader from fresh processes it
controls (its own clock, data and evaluation), with an accuracy gate and hardware-aware targets.

**When to use it.** ``python -m grader check NOTEBOOK`` (learners), ``python -m grader autograde
ASSIGNMENT`` (instructors); see grader/README.md for the protocol and its statistics.

**Expected gain.** Speed grades that a learner cannot fake and that noise does not flip.

**Pitfalls.** Gate calibrations and targets are per device class: re-calibrate on new hardware.
"""
