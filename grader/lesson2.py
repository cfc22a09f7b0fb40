"""Lesson 2 - feed the accelerator: the notebook's checks and its grading settings.

**What it does.** Defines the lesson-2 `Assignment` (the learner writes ``FastPipeline``, a faster
input pipeline for the naive CIFAR recipe) and the functions its locked test cells call:
``check_contract`` and ``check_augmentation`` (visible), ``check_hidden`` (hidden tests) and
``grade_performance`` (the timed comparison, run by the grader outside the kernel). Every entry
point captures stderr and warnings and replays them on stdout, because nbgrader scores a test cell
with *any* stderr output as zero.

**When to use it.** In ``solutions/lesson2/lesson2.ipynb`` (and the generated exercise).

**Expected gain.** Learners see exactly which pixel, label or batch is wrong, in milliseconds.

**Pitfalls.** ``SETUP_SOURCE`` must stay identical to the notebook's locked ``setup`` cell (tested):
the measured process runs it before the solution cells.
"""

from __future__ import annotations

from grader.assignments import Assignment
from grader.pipeline_checks import (
    CHECK_SECONDS,
    build,
    check_batches,
    epoch_record,
    expect,
    expected_len,
    one_epoch,
    probe_dataset,
    time_limit,
)
from grader.protocol import GradingSpec
from grader.quiet import quiet

SETUP_SOURCE = """\
import math

import numpy as np
import torch

from effkit.workloads import cifar
from effkit.workloads.cifar import CIFAR_MEAN, CIFAR_STD"""

# The grader's own measurement settings (see grader/README.md for how they were chosen).
SPECS = {
    "smoke": GradingSpec(name="smoke", profile="smoke", n_train=2000, n_eval=3000, n_warmup=300,
                         epochs=2, repeats=2, cpu_cores=1),  # fmt: skip
    # Plumbing only (the gate is not calibrated for it): tests of messages and cell wiring.
    "tiny": GradingSpec(name="tiny", profile="smoke", n_train=300, n_eval=500, n_warmup=200,
                        epochs=1, repeats=1),  # fmt: skip
    "gpu": GradingSpec(name="gpu", profile="gpu", n_train=20000, n_eval=10000, n_warmup=5000,
                       epochs=2, repeats=3, min_timeout_s=60.0),  # fmt: skip
}

ASSIGNMENT = Assignment(
    id="lesson2",
    notebook="lesson2",
    object_name="FastPipeline",
    performance_cell="test_speed",
    setup_cell="setup",
    setup_source=SETUP_SOURCE,
    runtime_module="grader.cifar_grading",
    specs=SPECS,
    timeout_s=120,
)


def _ok(text: str) -> None:
    print(f"  ok  {text}")


def check_contract(pipeline_cls) -> None:
    """Types, shapes, device, len(), normalisation, each image once, labels, exact crops."""
    with quiet():
        n, bs = 96, 32
        ds = probe_dataset(n, seed=1)
        pipe = build(pipeline_cls, ds, bs, "cpu", seed=0)
        with time_limit(CHECK_SECONDS, "len()"):
            length = len(pipe)
        want = expected_len(n, bs)
        expect(length == want, f"expected len() = {want} batches per epoch ({n} images, batch {bs}), got {length}")
        batches = one_epoch(pipe, n)
        check_batches(batches, n, bs, "cpu")
        _ok("batches: float32 x of B x 3 x 32 x 32 and int64 y, on the requested device, len() right")
        epoch_record(batches, ds)
        _ok("normalised with CIFAR_MEAN/CIFAR_STD, every image once, labels aligned, exact crops/flips")


def check_augmentation(pipeline_cls) -> None:
    """Shuffled order, varied crop offsets, both flips, and a new order every epoch."""
    with quiet():
        n, bs = 96, 32
        ds = probe_dataset(n, seed=2)
        pipe = build(pipeline_cls, ds, bs, "cpu", seed=0)
        first = epoch_record(one_epoch(pipe, n, "epoch 1"), ds)
        second = epoch_record(one_epoch(pipe, n, "epoch 2"), ds)
        expect(first["order"] != sorted(first["order"]), "expected a shuffled order, got the dataset order")
        expect(first["order"] != second["order"], "expected a new order every epoch (every iter() reshuffles)")
        _ok("shuffled, and reshuffled every epoch")
        offsets = set(first["offsets"] + second["offsets"])
        expect(len(offsets) >= 10, f"expected random crop offsets; only {len(offsets)} distinct in 2 epochs")
        flips = first["flips"] + second["flips"]
        rate = sum(flips) / len(flips)
        expect(0.25 < rate < 0.75, f"expected about half the images flipped, got {rate:.0%}")
        _ok(f"random crops ({len(offsets)} distinct offsets) and flips ({rate:.0%} mirrored)")


def check_hidden(pipeline_cls) -> None:
    """A partial last batch, several epochs' statistics, other seeds, dataset left untouched."""
    import numpy as np
    import torch

    with quiet():
        n, bs = 70, 32  # 32 + 32 + 6: the last batch is partial
        ds = probe_dataset(n, seed=3)
        pristine = np.array(ds.data, copy=True), list(ds.targets)
        pipe = build(pipeline_cls, ds, bs, "cpu", seed=5)
        length = len(pipe)
        expect(length == expected_len(n, bs), f"expected len() = 3 for 70 images in batches of 32, got {length}")
        records = []
        for e in range(3):
            batches = one_epoch(pipe, n, f"epoch {e + 1} of 70 images")
            check_batches(batches, n, bs, "cpu")
            records.append(epoch_record(batches, ds))
        dy = {o[0] for r in records for o in r["offsets"]}
        dx = {o[1] for r in records for o in r["offsets"]}
        expect(len(dy) >= 7 and len(dx) >= 7, f"expected crop offsets over the whole 0..8 range, got rows "
                                               f"{sorted(dy)} and columns {sorted(dx)}")  # fmt: skip
        other = build(pipeline_cls, ds, bs, "cpu", seed=6)
        expect(epoch_record(one_epoch(other, n), ds)["order"] != records[0]["order"],
               "expected another seed to give another order")  # fmt: skip
        expect(np.array_equal(ds.data, pristine[0]) and ds.targets == pristine[1],
               "your pipeline modified the dataset it was given (copy before changing data)")  # fmt: skip
        if torch.cuda.is_available():
            gpu = build(pipeline_cls, ds, bs, "cuda", seed=0)
            check_batches(one_epoch(gpu, n, "an epoch on cuda"), n, bs, "cuda")


def grade_performance(notebook: str = "lesson2.ipynb") -> float | None:
    """The performance check: see :func:`grader.perf.grade_saved_notebook`."""
    from grader.perf import grade_saved_notebook

    return grade_saved_notebook(notebook)
