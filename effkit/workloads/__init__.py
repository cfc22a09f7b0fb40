"""The course's two workloads, each with a naive and an optimized recipe.

``effkit.workloads.cifar`` (CIFAR-10 image classification) and ``effkit.workloads.bert`` (BERT
fine-tuning on SST-2) share the small protocol in :mod:`effkit.workloads.common`: a ``Trainer``
that trains a given number of optimizer steps and evaluates, so benchmarks, lessons and the grader
time every recipe the same way. They need the ``course`` extra (torchvision, transformers).
"""

import importlib

WORKLOADS = ("cifar", "bert")
PROFILES = ("smoke", "cpu", "gpu")


def get(name: str):
    """The workload module ``name``, imported on first use (each needs the ``course`` extra), with a
    clear error for unknown names."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {WORKLOADS}")
    return importlib.import_module(f"{__name__}.{name}")
