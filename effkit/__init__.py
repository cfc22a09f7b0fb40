"""effkit.

Supported torch: ``MIN_TORCH`` and newer (pyproject.toml declares the same floor; CI runs the
exercise tests on exactly that version with ``make test-oldest-torch``). Below it, importing effkit
fails with a message that says why, instead of a confusing error deep inside a lesson: transformers
5 turns PyTorch off below 2.6 (the BERT workload and lessons then lose their models).
Features of newer torch are detected where they are used (e.g. ``respect_saved_tensors_hooks`` of
torch >= 2.12 in :mod:`effkit.act_checkpoint`).
"""

MIN_TORCH = (2, 6)


def _check_torch() -> None:
    # from the installed metadata: no torch import here (workers import effkit and start fast)
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("torch")
    except PackageNotFoundError:  # a torch built from source or vendored: nothing to compare
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
