"""Layer 7: the command line (`python -m grader ...`), instructor tools and the demo."""
