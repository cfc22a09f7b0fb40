"""Layer 0: where the course lives, the instructor's overrides, what a cell's code becomes. Imports nothing of the grader."""
