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
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("kaiming_uniform_",),
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "frozen weights need no gradients and no AdamW moments: only the adapters (and head) do": (
            "frozen",
            "no gradient",
            "optimizer state",
            "adam",
            "moment",
        ),
        "a step still runs the whole model forward and backpropagates through every layer": (
            "whole model",
            "every layer",
            "activation gradient",
            "still runs",
            "forward",
        ),
        "merging folds B·A into W: an ordinary weight matrix, no extra matmuls": (
            "fold",
            "into w",
            "no extra",
            "ordinary weight",
            "single matrix",
        ),
    },
)
