"""effkit's autograder: correctness checks and a tamper-resistant, noise-aware speed grade.

Grades notebooks through nbgrader; the performance cell is filled in from fresh processes the
grader controls, so speed grades cannot be faked and noise does not flip them (grader/README.md).
Gate calibrations and targets are per device class: re-calibrate on new hardware.
"""
