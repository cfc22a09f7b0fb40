"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson8",
    worker_modules=("probes", "lora_task"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 8.0/10.0, the untouched stub 0/10.0
    reference_grading_s=312,
    stub_grading_s=48,
    points={"test_layer": 3, "test_inject": 2, "test_recipe": 3, "test_quiz": 2},
    clocked=False,  # graded on counts (bytes, epochs, memory), not on a clock
)
