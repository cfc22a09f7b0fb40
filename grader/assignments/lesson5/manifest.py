"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson5",
    device="cpu",  # its checks' workers see no GPU (checks.py: cpu_only)
    worker_modules=("probes", "ckpt_checks"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 10.0/10.0, the untouched stub 0/10.0
    reference_grading_s=103,
    stub_grading_s=41,
    points={
        "test_gradients": 3,
        "test_budget": 2,
        "test_speed": 2,
        "test_least_recompute": 1,
        "test_quiz": 2,
    },
    # the planner (the source-text check saw only its name); the byte counter is the lesson's tool,
    # and the worker applies and runs every plan with apply_plan and run_blocks (plan_checks), so
    # those stay: a checkpointed_forward built on them is still refused by name only
    withheld=("effkit.checkpoint_plan.plan_for_budget",),
    tools=(
        "effkit.act_checkpoint.saved_activation_bytes",
        "effkit.checkpoint_plan.apply_plan",
        "effkit.checkpoint_plan.run_blocks",
    ),
    # text of the reference answers the released notebook must not hold (tests/test_exercises.py)
    released_without=("MUST_SAVE",),
    timed_tests=("test_lesson5_exercise.py",),  # its tests time something: the timed lane
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "a checkpointed block keeps only its input; its intermediates are freed after forward": (
            "only its input",
            "only the input",
            "input",
            "free",
            "discard",
        ),
        "backward re-runs the block's forward to rebuild them: extra compute": (
            "re run",
            "rerun",
            "again",
            "extra forward",
            "second forward",
        ),
        "the matmuls hold most of the FLOPs; pointwise ops are cheap to redo but take as many bytes": (
            "flop",
            "cheap",
            "pointwise",
            "elementwise",
            "expensive",
        ),
    },
)
