"""The GPU gradings at the GPU spec's sizes, on the CPU: every boundary crossed once before a GPU sees it.

A grading at GPU size fails on things no tiny CPU profile exercises: weights of hundreds of MB
crossing a pipe (lesson 3's reference earned 9/14 on an H200 because 440 MB never arrived), memory
limits, time limits. This runs the timed protocol with the ``gpu`` spec's model and batch shapes
(lesson 3: a 12 x 768 BERT, from scratch: the hub is offline here; lesson 2: ResNet-18 at batch 128
and the 10,000-image held-out set), but only a few steps, so each boundary - worker start, warm-up,
timed chunks, commits, the parent's checks and replay, evaluation, report - is crossed once on the CPU.

    python benchmarks/gpu_rehearsal.py            # or: make gpu-rehearsal (lessons 2 and 3)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import assignments  # noqa: E402
from grader.frontends.notebook import read_notebook, solution_ids, solution_sources  # noqa: E402
from grader.sandbox import supervisor  # noqa: E402
from grader.timed import protocol  # noqa: E402


def reference_cells(assignment_id: str) -> list[tuple[str, str]]:
    nb = read_notebook(ROOT / "solutions" / assignment_id / f"{assignment_id}.ipynb")
    return [(c.grade_id, c.source) for c in solution_sources(nb, solution_ids(nb))]


def lesson3_spec() -> protocol.GradingSpec:
    """The gpu spec's model and batch size, one repeat of 8 sentences (2 steps) in 2 timed chunks."""
    gpu = assignments.get("lesson3").specs["gpu"]
    hooks = dict(gpu.hooks, batch_size=4, model="scratch")  # 4 rows of 128 tokens: ~2 s a step here
    return dataclasses.replace(
        gpu,
        name="rehearse-gpu",
        n_train=8,
        n_eval=16,
        n_warmup=4,
        repeats=1,
        chunks_per_epoch=2,
        hooks=hooks,
        cpu_cores=1,
    )


def lesson2_spec() -> protocol.GradingSpec:
    """The gpu spec's ResNet-18, batch (128) and held-out set (10,000 images, evaluated in the parent);
    one repeat of 2 batches in 2 timed chunks."""
    gpu = assignments.get("lesson2").specs["gpu"]
    return dataclasses.replace(
        gpu,
        name="rehearse-gpu",
        n_train=256,
        n_warmup=128,
        epochs=1,
        repeats=1,
        chunks_per_epoch=2,
        cpu_cores=1,
    )


def rehearse_lesson3(progress=print, memfd: bool = True) -> dict:
    """One lesson-3 measurement at GPU model size; returns what crossed and how long each phase and
    timed chunk took. ``memfd=False`` sends the commits through the pipe (the way before the memfd)."""
    return rehearse("lesson3", lesson3_spec(), progress, memfd)


def rehearse_lesson2(progress=print, memfd: bool = True) -> dict:
    return rehearse("lesson2", lesson2_spec(), progress, memfd)


def rehearse(
    assignment_id: str, spec: protocol.GradingSpec, progress=print, memfd: bool = True
) -> dict:
    sizes: list[int] = []
    from_memfd: list[int] = []
    blob, read_memfd, uses_memfd = (
        supervisor.Worker.blob,
        supervisor.read_sealed_memfd,
        supervisor.Worker.uses_memfd,
    )

    def counted(self, n, timeout_s, what):
        out = blob(self, n, timeout_s, what)
        sizes.append(len(out))
        return out

    def counted_memfd(pid, fd_no, n):
        out = read_memfd(pid, fd_no, n)
        sizes.append(len(out))
        from_memfd.append(len(out))
        return out

    supervisor.Worker.blob, supervisor.read_sealed_memfd = counted, counted_memfd
    if not memfd:
        supervisor.Worker.uses_memfd = lambda self: False
    try:
        t0 = time.perf_counter()
        m = protocol.measure(
            assignments.get(assignment_id),
            reference_cells(assignment_id),
            spec,
            "cpu",
            progress=progress,
        )
    finally:
        supervisor.Worker.blob, supervisor.read_sealed_memfd = blob, read_memfd
        supervisor.Worker.uses_memfd = uses_memfd
    return {
        "seconds": time.perf_counter() - t0,
        "error": str(m.error) if m.error else None,
        "problems": m.problems,
        "blob_bytes": sizes,
        "memfd_commits": len(from_memfd),
        "phases_s": m.phases_s,
        "chunks": m.chunks,
        "runs": [(t.role, t.seconds, t.accuracy) for t in m.runs],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pipe", action="store_true", help="commits through the pipe, as before the sealed memfd"
    )
    p.add_argument("--only", choices=["lesson2", "lesson3"], help="one lesson (default: both)")
    args = p.parse_args()
    ok = True
    for lesson, run in (("lesson2", rehearse_lesson2), ("lesson3", rehearse_lesson3)):
        if args.only not in (None, lesson):
            continue
        out = run(memfd=not args.pipe)
        mb = [f"{n / 1e6:.0f} MB" for n in out["blob_bytes"]]
        chunks = ", ".join(f"{role} {c + 1}: {s:.1f} s" for role, _, c, s in out["chunks"])
        print(
            f"{lesson} at the gpu spec's sizes: {out['seconds']:.0f} s; blobs received: {', '.join(mb) or 'none'}; "
            f"timed chunks (training + commit, on the clock): {chunks}; error: {out['error']}; "
            f"problems: {out['problems']}",
            flush=True,
        )
        ok &= (
            out["error"] is None
            and not out["problems"]
            and all(acc is not None for _, _, acc in out["runs"])
        )
    print("rehearsal " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
