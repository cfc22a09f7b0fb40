"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson12",
    worker_modules=("probes",),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 9.0/9.0, the untouched stub 0/9.0
    reference_grading_s=132,
    stub_grading_s=44,
    points={"test_search": 4, "test_pruning": 3, "test_quiz": 2},
    clocked=False,  # graded on counts (bytes, epochs, memory), not on a clock
)
