"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson4",
    worker_modules=("probes", "accum_task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=81,
    stub_grading_s=92,
    points={"test_full_windows": 4, "test_last_window": 2, "test_recipe": 4, "test_quiz": 2},
    # the accumulation itself: the source-text check saw only the name GradAccumulator
    withheld=(
        "effkit.accumulate.GradAccumulator.backward",
        "effkit.accumulate.GradAccumulator.step",
    ),
)
