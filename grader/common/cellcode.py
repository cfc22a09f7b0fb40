"""What a notebook cell's code becomes in a worker: plain Python, and which cell holds the quiz.

Workers are plain Python, not IPython kernels: magics and shell escapes are dropped (and reported)
keeping line numbers, so tracebacks still point at the learner's line.
"""

from __future__ import annotations

QUIZ_CELL = (
    "quiz"  # grade id of the solution cell holding QUIZ_ANSWERS (never sent to a timed worker)
)


def to_python(source: str) -> tuple[str, list[str]]:
    """Plain Python for a notebook cell: magics/shell lines become comments. Returns the code and
    a note per dropped line (same line numbers, so tracebacks still point at the right line)."""
    out, dropped = [], []
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):  # a cell magic: keep the body, drop the magic
        dropped.append(f"line 1: {lines[0].strip()}")
        lines[0] = "# " + lines[0]
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")) and not stripped.startswith("%%"):
            dropped.append(f"line {i + 1}: {stripped}")
            line = line[: len(line) - len(stripped)] + "pass  # " + stripped
        out.append(line)
    return "\n".join(out) + "\n", dropped
