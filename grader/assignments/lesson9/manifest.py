"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson9",
    worker_modules=("probes",),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 10.0/10.0, the untouched stub 0/10.0
    reference_grading_s=72,
    stub_grading_s=21,
    points={"test_loss_value": 3, "test_loss_gradient": 2, "test_recipe": 3, "test_quiz": 2},
    withheld=("effkit.distill.kd_loss",),
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=('batchmean", log_target',),
    timed_tests=("test_lesson9_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "softened probabilities say how wrong each other class is: more than a one-hot label says": (
            "dark knowledge",
            "other class",
            "how wrong",
            "similar",
            "relative",
        ),
        "the teacher is frozen and the sentences are not augmented, so its logits never change": (
            "frozen",
            "not augmented",
            "no augmentation",
            "never change",
            "same input",
        ),
        "caching removes a teacher forward pass from every training step": (
            "forward",
            "teacher pass",
            "run the teacher",
            "running the teacher",
            "inference",
        ),
    },
)
