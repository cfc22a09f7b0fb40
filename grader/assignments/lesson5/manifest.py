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
)
