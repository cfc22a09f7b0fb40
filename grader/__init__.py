"""effkit course autograder (see grader/README.md)."""
