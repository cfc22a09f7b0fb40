"""The key points each lesson's "In your own words" answer is self-checked against.

**What it does.** ``KEY_POINTS[n]`` maps each point a full answer to lesson ``n``'s question makes
to the phrases that count as mentioning it (lowercase; a phrase matches the start of a word, see
`effkit.lesson.written_answer`). A lesson calls ``lesson.check_answer(ANSWER, lesson_number=n)``.

**Why here and not in the notebook.** Printed under the question, the points gave the answer away
before the learner wrote a word; here they show up only in the check's output, after writing.
The question they answer is the "### In your own words" cell of ``notebooks/<slug>.py``: edit
the two together.
"""

from __future__ import annotations

KEY_POINTS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {  # notebooks/01_measure_first.py
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
        "the A/B removes the pipeline entirely: it sees all of its cost, worker start-up included": (
            "without the pipeline",
            "no pipeline",
            "whole cost",
            "start up",
            "startup",
        ),
    },
    2: {  # notebooks/02_feed_the_accelerator.py
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
    3: {  # notebooks/03_mixed_precision.py
        "16 bits pay only where the hardware has fast 16-bit units (tensor cores, AMX)": (
            "tensor core",
            "amx",
            "16 bit unit",
            "bf16 unit",
            "native",
        ),
        "a large matmul is compute-bound: its arithmetic dominates, so faster arithmetic shows": (
            "compute bound",
            "arithmetic",
            "flop",
            "dominat",
            "math",
        ),
        "a small op is overhead-bound: launches, casts and memory traffic cost as much as its math": (
            "launch",
            "cast",
            "memory traffic",
            "python",
            "fixed cost",
        ),
    },
    4: {  # notebooks/04_bigger_batches.py
        "the full batch gives every real token the same weight": (
            "every token",
            "each token",
            "equal",
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
            "total",
            "n_window",
            "sum",
        ),
    },
    5: {  # notebooks/05_activation_checkpointing.py
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
    6: {  # notebooks/06_never_lose_a_run.py
        "without the sampler's position the resumed run replays or skips batches": (
            "replay",
            "skip",
            "same batches",
            "data order",
            "repeat",
        ),
        "without the RNG state the random draws (dropout, augmentation) differ": (
            "random",
            "dropout",
            "generator",
            "noise",
            "draw",
        ),
        "an atomic write renames a finished temporary file: a kill leaves the old file or the new": (
            "rename",
            "replace",
            "temporary",
            "old or the new",
            "half",
        ),
    },
    7: {  # notebooks/07_dynamic_padding.py
        "rows of similar length share a batch, so its width stays close to every row's length": (
            "similar length",
            "same length",
            "longest row",
            "sort",
            "group",
        ),
        "padded positions are still computed (projections, feed-forward, attention), then thrown away": (
            "still",
            "thrown away",
            "wasted",
            "flop",
            "matmul",
        ),
        "grouped batches are less random (not i.i.d.), changing the gradient noise; shuffling helps": (
            "i.i.d",
            "iid",
            "gradient noise",
            "shuffl",
            "correlat",
        ),
    },
    8: {  # notebooks/08_peft_lora.py
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
    9: {  # notebooks/09_distillation.py
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
    10: {  # notebooks/10_profiling.py
        "the step is a sum of parts: without the largest, the others are a bigger share of less time": (
            "sum",
            "shorter",
            "bigger share",
            "larger share",
            "remaining",
        ),
        "the next bottleneck was there all along, ranked lower or below its rule's threshold": (
            "all along",
            "already",
            "threshold",
            "hidden",
            "second",
        ),
        "a profiled share is not what its fix saves: the profiler inflates small operators, and a fix can save more or less": (
            "profiler",
            "inflat",
            "estimate",
            "not a bound",
            "more than",
        ),
    },
    11: {  # notebooks/11_ddp_zero.py
        "plain DDP keeps the whole model, its gradients and the optimizer state on every rank": (
            "every rank",
            "replicat",
            "redundan",
            "full copy",
            "duplicat",
        ),
        "ZeRO shards optimizer state (stage 1), gradients (2) and parameters (3, FSDP) over the ranks": (
            "shard",
            "1/n",
            "partition",
            "split",
            "divide",
        ),
        "stages 1-2 cost about an all-reduce; FSDP also all-gathers parameters in forward and backward": (
            "gather",
            "allgather",
            "reduce scatter",
            "1.5",
            "more communication",
        ),
    },
    12: {  # notebooks/12_hpo_on_a_budget.py
        "pruning stops weak trials after a few epochs, and the seconds saved pay for more trials": (
            "weak",
            "bad",
            "poor",
            "saved",
            "more trials",
        ),
        "an early score can mispredict the final one, so a slow starter may be pruned": (
            "slow",
            "late",
            "mispredict",
            "early score",
            "wrong",
        ),
        "one run per trial: differences smaller than the seed-to-seed spread name no winner": (
            "spread",
            "overlap",
            "variance",
            "interval",
            "chance",
        ),
        "the batch size is fixed for throughput, not tuned on validation; the learning rate is a nuisance": (
            "throughput",
            "nuisance",
            "not tuned",
            "speed",
            "re-tun",
        ),
    },
    13: {  # notebooks/13_quantized_inference.py
        "int8 weights are 4x fewer bytes to read per request, and integer multiply-adds are cheaper": (
            "bytes",
            "bandwidth",
            "4x",
            "smaller weights",
            "integer",
        ),
        "rounding error in every layer may change predictions, so accuracy must be measured": (
            "rounding",
            "accuracy",
            "error",
            "precision",
            "prediction",
        ),
        "under open-loop load requests wait in a queue that grows steeply as the rate nears capacity": (
            "queue",
            "wait",
            "capacity",
            "utilis",
            "utiliz",
        ),
    },
}
