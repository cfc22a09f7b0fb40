"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson1",
    worker_modules=("probes", "task"),
    # `python -m grader check`, 2-core Intel Xeon with AMX, 2026-12-06, quiet (load 0.8), after the
    # steps became 120-240 ms for every trainer: the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=47,
    stub_grading_s=8,
    points={"test_throughput": 4, "test_data_wait": 2, "test_bottleneck": 4, "test_quiz": 2},
    timed_tests=("test_lesson1_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "a data-wait timer counts only the time the loop is blocked in `next()`": (
            "only the time",
            "only counts",
            "only measures",
            "block",
            "inside next",
        ),
        "the DataLoader's workers run in parallel on the same CPU cores and take them from the model": (
            "same core",
            "same cpu",
            "in parallel",
            "steal",
            "compet",
        ),
        "the A/B removes the pipeline entirely: it sees all of its cost in every step (the worker "
        "start-up, once per epoch, is timed apart)": (
            "without the pipeline",
            "no pipeline",
            "whole cost",
            "all of its cost",
            "every step",
        ),
    },
)
