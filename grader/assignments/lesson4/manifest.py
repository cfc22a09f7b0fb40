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
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("real_tokens",),
    timed_tests=("test_lesson4_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "the full batch gives every real token the same weight": (
            "every token",
            "each token",
            "equal weight",
            "same weight",
            "mean over all",
        ),
        "per-micro-batch means over-weight tokens of small micro-batches (right at equal counts)": (
            "small micro",
            "fewer tokens",
            "over weight",
            "overweight",
            "same number",
        ),
        "each micro-batch's summed loss is divided by the whole window's token count": (
            "whole window",
            "window's",
            "n_window",
            "total token",
            "tokens in the window",
        ),
    },
)
