"""What the grader, the sandbox and the tests know of this lesson, declared once (grader.kit.manifest)."""

from grader.kit.manifest import Manifest

MANIFEST = Manifest(
    id="lesson2",
    worker_modules=("probes", "probe_data", "runtime"),
    # `python -m grader check`, 2-core AMD EPYC (AVX2), 2026-12-05, machine shared (load 5-12):
    # the reference 12.0/12.0, the untouched stub 0/12.0
    reference_grading_s=113,
    stub_grading_s=119,
    points={"test_contract": 3, "test_augmentation": 2, "test_speed": 5, "test_quiz": 2},
    # the reference pipeline under any seed or parameters, however reached (issue 52): the batch
    # judge compares against one seed's batches only; normalize is the recipe's own, shared
    withheld=(
        "effkit.workloads.cifar.pipelines.DevicePipeline.__init__",
        "effkit.workloads.cifar.pipelines.DevicePipeline.__iter__",
        "effkit.workloads.cifar.pipelines.DevicePipeline.augment",
    ),
    tools=("effkit.workloads.cifar.pipelines.normalize",),
    # the points a full 'In your own words' answer makes -> phrases that count as saying it
    # (effkit.lesson.check_answer; shown only after the learner wrote an answer)
    key_points={
        "per-image Python (PIL crops and flips) becomes one indexing op on a whole batch": (
            "per image",
            "pil",
            "python",
            "one indexing",
            "whole batch",
        ),
        "no worker processes compete with the model for the cores or start up every epoch": (
            "worker",
            "core",
            "start up",
            "startup",
            "process",
        ),
        "the same augmentation (random crops, flips, each image once an epoch): the same training": (
            "same augmentation",
            "same crops",
            "same random",
            "once per epoch",
            "same distribution",
        ),
    },
)
