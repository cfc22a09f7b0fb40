"""Layer 6: front ends: notebooks in and out, `grader check`, the nbgrader preprocessors, autograde, exercise sources."""
