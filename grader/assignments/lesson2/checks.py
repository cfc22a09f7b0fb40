"""Lesson 2 - feed the accelerator: the notebook's checks and its grading settings.

Every entry point replays stderr on stdout, because nbgrader scores a test cell with any stderr
as zero. ``SETUP_SOURCE`` must stay identical to the notebook's locked ``setup`` cell (tested).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.assignments.lesson2.manifest import MANIFEST
from grader.assignments.lesson2.pipeline_checks import (
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
from grader.kit.assignment import Assignment
from grader.kit.batch_judge import REFERENCE_REUSED  # shared with the timed judge
from grader.kit.checks import (
    ChannelError,
    GradingSpec,
    copies_in,
    makes_code_from_data,
    quiet,
    quiz_check,
    stub_reason,
    tensor_from,
)
from grader.kit.in_notebook import grade_saved_notebook

REPO = Path(__file__).resolve().parents[3]

SETUP_SOURCE = """\
import math

import numpy as np
import torch

from effkit.workloads import cifar
from effkit.workloads.cifar import CIFAR_MEAN, CIFAR_STD"""

# The grader's own measurement settings (how they were chosen: benchmarks/results/grader-notes.md).
SPECS = {  # name, workload profile, n_train, n_eval, n_warmup, epochs, repeats; then options
    "smoke": GradingSpec("smoke", "smoke", 2000, 3000, 300, 2, 2, cpu_cores=1),
    # Plumbing only (the gate is not calibrated for it): tests of messages and cell wiring.
    "tiny": GradingSpec("tiny", "smoke", 300, 500, 200, 1, 1),
    "gpu": GradingSpec("gpu", "gpu", 20000, 10000, 5000, 2, 3, min_timeout_s=60.0, data="hard"),
}


def _ok(text: str, lines: list[str] | None = None) -> None:
    (lines.append if lines is not None else print)(f"  ok  {text}")


# A runner produces the evidence: runner(n, data_seed, batch_size, seed, epochs) -> (len(), epochs of
# (x, y) batches, the dataset's pixels and labels afterwards). `local` runs a class in this process
# (unit tests, the timed worker's gate); `remote` gets plain tensors from the sandboxed worker. The
# judging below is the same for both and always runs in the caller's process.
def local(pipeline_cls):
    def run(n, data_seed, bs, seed, epochs, device="cpu"):
        ds = probe_dataset(n, seed=data_seed)
        pipe = build(pipeline_cls, ds, bs, device, seed=seed)
        with time_limit(CHECK_SECONDS, "len()"):
            length = len(pipe)
        batches = [one_epoch(pipe, n, f"epoch {e + 1}") for e in range(epochs)]
        return length, batches, (np.asarray(ds.data), list(ds.targets))

    return run


def remote(ctx):
    def run(n, data_seed, bs, seed, epochs, device="cpu"):
        call = f"FastPipeline(dataset, batch_size={bs}, device={device!r}, seed={seed})"
        r = ctx.session.call(
            "epochs",
            CHECK_SECONDS + 10,
            n=n,
            data_seed=data_seed,
            batch_size=bs,
            seed=seed,
            epochs=epochs,
            device=device,
        )
        if not r.ok:
            raise AssertionError(
                stub_reason(r.failure) or f"{call}, len() or iterating it {r.failure}"
            )
        data = r.data
        expect(not data.get("bad"), str(data.get("bad")))
        blobs, out = iter(r.blobs), []
        try:
            for epoch in data["epochs"]:
                batches = []
                for b in epoch:
                    for part in ("x", "y"):
                        expect(
                            str(b[part].get("device", "")).split(":")[0] == device,
                            f"expected x and y on {device}, got {b[part].get('device')}",
                        )
                    batches.append(
                        (tensor_from(b["x"], next(blobs)), tensor_from(b["y"], next(blobs)))
                    )
                out.append(batches)
            shape = data["after"]["shape"]
            pixels = np.frombuffer(next(blobs), dtype=np.uint8).reshape(shape)
        except (ChannelError, KeyError, StopIteration, TypeError, ValueError) as err:
            raise AssertionError(
                f"the grader could not read what your pipeline produced ({err})"
            ) from err
        length = data.get("len")
        expect(isinstance(length, int), f"expected len() to return an int, got {length!r}")
        return length, out, (pixels, data["after"]["targets"])

    return run


def contract(run, lines=None, data_seed=1, seed=0) -> None:
    """Types, shapes, device, len(), normalisation, each image once, labels, exact crops."""
    n, bs = 96, 32
    ds = probe_dataset(n, seed=data_seed)
    length, (batches,), _ = run(n, data_seed, bs, seed, 1)
    want = expected_len(n, bs)
    expect(
        length == want,
        f"expected len() = {want} batches per epoch ({n} images, batch {bs}), got {length}",
    )
    check_batches(batches, n, bs, "cpu")
    _ok(
        "batches: float32 x of B x 3 x 32 x 32 and int64 y, on the requested device, len() right",
        lines,
    )
    epoch_record(batches, ds)
    _ok(
        "normalised with CIFAR_MEAN/CIFAR_STD, every image once, labels aligned, exact crops/flips",
        lines,
    )


def augmentation(run, lines=None, data_seed=2, seed=0) -> None:
    """Shuffled order, varied crop offsets, both flips, and a new order every epoch."""
    n, bs = 96, 32
    ds = probe_dataset(n, seed=data_seed)
    _, (e1, e2), _ = run(n, data_seed, bs, seed, 2)
    first, second = epoch_record(e1, ds), epoch_record(e2, ds)
    expect(
        first["order"] != sorted(first["order"]), "expected a shuffled order, got the dataset order"
    )
    expect(
        first["order"] != second["order"],
        "expected a new order every epoch (every iter() reshuffles)",
    )
    _ok("shuffled, and reshuffled every epoch", lines)
    offsets = set(first["offsets"] + second["offsets"])
    expect(
        len(offsets) >= 10,
        f"expected random crop offsets; only {len(offsets)} distinct in 2 epochs",
    )
    flips = first["flips"] + second["flips"]
    rate = sum(flips) / len(flips)
    expect(0.25 < rate < 0.75, f"expected about half the images flipped, got {rate:.0%}")
    _ok(f"random crops ({len(offsets)} distinct offsets) and flips ({rate:.0%} mirrored)", lines)


def hidden(run, lines=None, data_seed=3, seed=5) -> None:
    """A partial last batch, several epochs' statistics, other seeds, dataset left untouched."""
    n, bs = 70, 32  # 32 + 32 + 6: the last batch is partial
    ds = probe_dataset(n, seed=data_seed)
    length, epochs, (pixels, targets) = run(n, data_seed, bs, seed, 3)
    expect(
        length == expected_len(n, bs),
        f"expected len() = 3 for 70 images in batches of 32, got {length}",
    )
    records = []
    for batches in epochs:
        check_batches(batches, n, bs, "cpu")
        records.append(epoch_record(batches, ds))
    dy = {o[0] for r in records for o in r["offsets"]}
    dx = {o[1] for r in records for o in r["offsets"]}
    expect(
        len(dy) >= 7 and len(dx) >= 7,
        f"expected crop offsets over the whole 0..8 range, got rows "
        f"{sorted(dy)} and columns {sorted(dx)}",
    )
    _, (other,), _ = run(n, data_seed, bs, seed + 1, 1)
    expect(
        epoch_record(other, ds)["order"] != records[0]["order"],
        "expected another seed to give another order",
    )
    expect(
        np.array_equal(pixels, ds.data) and list(targets) == list(ds.targets),
        "your pipeline modified the dataset it was given (copy before changing data)",
    )
    _ok("partial last batch, crop range over 3 epochs, seeds, dataset untouched", lines)


def check_contract(pipeline_cls) -> None:
    with quiet():
        contract(local(pipeline_cls))


def check_augmentation(pipeline_cls) -> None:
    with quiet():
        augmentation(local(pipeline_cls))


def check_hidden(pipeline_cls) -> None:
    import torch

    with quiet():
        hidden(local(pipeline_cls))
        if torch.cuda.is_available():
            ds = probe_dataset(70, seed=3)
            gpu = build(pipeline_cls, ds, 32, "cuda", seed=0)
            check_batches(one_epoch(gpu, 70, "an epoch on cuda"), 70, 32, "cuda")


# -- out of the kernel (grader.scoring.checks): the same judging on plain tensors from the sandboxed worker --
BASELINE_REUSED = (
    "your FastPipeline's batches are bit-identical to effkit's TorchvisionPipeline, the naive baseline this "
    "exercise replaces, for the same data and seed: write a pipeline of your own that augments a batch at a time"
)


def not_the_baseline(run):
    """``run``, refusing batches bit-identical to the parent's own run of the naive ``TorchvisionPipeline`` for the
    same data and seed: the baseline handed in under any name (a subclass, a wrapper, ``getattr`` on a built name, a
    fresh copy of its module) is no pipeline of the learner's. Its DataLoader seeds its workers from ``seed``, so
    the same call draws the same crops and flips here; any pipeline of one's own draws others."""
    from effkit.workloads.cifar.pipelines import TorchvisionPipeline

    def judged(n, data_seed, bs, seed, epochs, device="cpu"):
        out = run(n, data_seed, bs, seed, epochs, device)
        _, naive, _ = local(TorchvisionPipeline)(n, data_seed, bs, seed, epochs)
        expect(not same_batches(out[1], naive), BASELINE_REUSED)
        return out

    return judged


# The answer's work is its batch augmentation (`__iter__`, `augment`, what they call and their twins). Its
# constructor is not compared: a learner's natural six-line `__init__` (the device, the labels, the seeded
# generator the exercise prescribes) shared 4 statements with it and read as a copy, costing an honest
# learner 10 of 12 points (a third review, 2026-12-07). A paste of the class still brings its twins along.
TWIN_SEEDS = [name for name in MANIFEST.withheld if not name.endswith(".__init__")]


def own_plain_cells(ctx) -> None:
    """The cells are read as text before anything of theirs is judged: a twin of the withheld answer (effkit's
    ``DevicePipeline``, renamed, re-seeded or trimmed: ``copies_in``, parsed, never run) or code made from data at
    run time (``exec`` of an encoded copy, ``importlib`` loading effkit's file afresh: ``makes_code_from_data``) earns
    no pipeline points, correctness or speed. A copy re-seeded draws other batches than the reference's, so the
    parent's bit-identical judges alone would pass it (a review, 2026-12-07: the reference zlib-encoded, re-seeded
    and exec'd scored 12/12)."""
    copied = [
        f"{name} in cell {gid!r} is a copy of {answer}"
        for gid, source in ctx.session.cells
        for name, answer in copies_in(source, TWIN_SEEDS, REPO)
    ]
    expect(
        not copied,
        "; ".join(copied[:3]) + ": effkit's DevicePipeline is the reference answer, renamed, "
        "re-seeded or trimmed as well: write your own pipeline to earn the pipeline's points",
    )
    made = [
        f"cell {gid!r} ({', '.join(names)})"
        for gid, source in ctx.session.cells
        if (names := makes_code_from_data(source))
    ]
    expect(
        not made,
        "; ".join(made[:3])
        + " makes code from data at run time: the grader reads your cells as text to tell "
        "your pipeline from the course's, so write it as plain Python",
    )


def cell_contract(ctx) -> None:
    own_plain_cells(ctx)
    contract(
        not_the_baseline(remote(ctx)),
        ctx.lines,
        data_seed=ctx.rng.randrange(1 << 20),
        seed=ctx.rng.randrange(1 << 20),
    )


def cell_augmentation(ctx) -> None:
    own_plain_cells(ctx)
    augmentation(
        not_the_baseline(remote(ctx)),
        ctx.lines,
        data_seed=ctx.rng.randrange(1 << 20),
        seed=ctx.rng.randrange(1 << 20),
    )
    hidden(
        not_the_baseline(remote(ctx)),
        ctx.lines,
        data_seed=ctx.rng.randrange(1 << 20),
        seed=ctx.rng.randrange(1 << 20),
    )


def same_batches(mine, ref) -> bool:
    import torch

    return len(mine) == len(ref) and all(
        len(a) == len(b)
        and all(
            torch.equal(xa, xb) and torch.equal(ya, yb)
            for (xa, ya), (xb, yb) in zip(a, b, strict=True)
        )
        for a, b in zip(mine, ref, strict=True)
    )


def cell_not_the_reference(ctx) -> None:
    """Speed gate only (no notebook cell, no points of its own): two epochs bit-identical to
    effkit's ``DevicePipeline`` for the same data and seed are the reference answer, however the
    solution reached it (``getattr(module, "Device" + "Pipeline")``, a subclass, a verbatim copy);
    the source-text check (``reference_names``) sees only the name. An independent pipeline
    draws its randomness differently: one differing pixel is enough. A copy re-seeded, renamed or
    trimmed draws other batches, so the cells are also read as text first (:func:`own_plain_cells`)."""
    from effkit.workloads.cifar.pipelines import DevicePipeline

    own_plain_cells(ctx)
    n, bs = 96, 32
    data_seed, seed = ctx.rng.randrange(1 << 20), ctx.rng.randrange(1 << 20)
    _, mine, _ = remote(ctx)(n, data_seed, bs, seed, 2)
    _, ref, _ = local(DevicePipeline)(n, data_seed, bs, seed, 2)
    expect(not same_batches(mine, ref), REFERENCE_REUSED)
    _ok("your batches are your own (not DevicePipeline's for the same seed)", ctx.lines)


CELL_CHECKS = {
    "test_contract": cell_contract,
    "test_augmentation": cell_augmentation,
    "test_quiz": quiz_check("lesson2", ("q1", "q2", "q3", "q4")),
    "not_the_reference": cell_not_the_reference,
}


def grade_performance(notebook: str = "lesson2.ipynb") -> float | None:
    """The performance check: see :func:`grader.scoring.perf.grade_saved_notebook`."""
    return grade_saved_notebook(notebook)


# Targets from measured gradings (figures: benchmarks/results/grader-code-notes.md): the reference
# clears the target, the unchanged naive pipeline stays under the floor. The GPU rows are one H200's
# until an instructor measures theirs (`grader calibrate`, `grader stress`, then overrides).
GPU_MEASURED = {"target": 1.3, "floor": 1.1}
TARGETS = {
    "cpu": {"target": 1.35, "floor": 1.15},
    **{cls: dict(GPU_MEASURED) for cls in ("h100", "a100", "l4", "t4", "gpu")},
}


ASSIGNMENT = Assignment(
    "lesson2",
    "FastPipeline",
    SETUP_SOURCE,
    CELL_CHECKS,
    performance_cell="test_speed",
    runtime_module="grader.assignments.lesson2.runtime",
    specs=SPECS,
    targets=TARGETS,
    names=("FastPipeline",),
    speed_gate=("test_contract", "not_the_reference"),
    reference_names=("DevicePipeline",),
)
