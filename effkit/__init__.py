"""effkit: the library behind the efficient-training course.

Importing it fails with a clear message below ``MIN_TORCH`` (pyproject.toml declares the same floor):
transformers 5 turns PyTorch off below 2.6, which would otherwise break the BERT workload deep inside a lesson.
"""

import importlib.metadata

MIN_TORCH = (2, 6)


def _check_torch() -> None:
    # from the installed metadata: no torch import here (workers import effkit and start fast)
    try:
        found = importlib.metadata.version("torch")
    except (
        importlib.metadata.PackageNotFoundError
    ):  # a torch built from source or vendored: nothing to compare
        return
    parts = found.split("+")[0].split(".")
    numbers = tuple(int(p) for p in parts[:2] if p.isdigit())
    if len(numbers) == 2 and numbers < MIN_TORCH:
        raise ImportError(
            f"effkit needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}, found torch {found}: transformers 5 "
            "disables PyTorch below 2.6 (no BERT models for the workloads and lessons). Upgrade with "
            f"pip install 'torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}'"
        )


_check_torch()
