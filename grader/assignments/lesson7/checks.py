"""Lesson 7 - length bucketing, graded out of the kernel: the sampler's batches judged here, then timed here.

Only index lists cross; this process validates them, computes every share and trains, times and
evaluates its own encoder with no learner code running. ``effkit.length_buckets.bucket_batches``
is the lesson's reference answer.
"""

from __future__ import annotations

import numpy as np

from grader.assignments.lesson7 import speed_task as st
from grader.assignments.lesson7 import verify as v
from grader.kit.assignment import Assignment
from grader.kit.checks import CheckFailed, Context, expect, quiz_check, stub_reason

CALL_SECONDS = 30
# The interval's low end over random batches with dynamic padding (each padded to its own longest
# row) must clear 1: what bucketing adds over dynamic padding alone, the lesson's point. Until
# 2026-12-05 the baseline was pad-to-max, which unbucketed dynamic padding beats too, so this cell
# added nothing to test_padding. Against dynamic padding at load ~20: the reference 1.59-1.89x
# (low ends 1.32-1.61), unbucketed dynamic padding 0.91-0.98x (high ends 1.40-1.55, low ends
# 0.69-0.86): grader/assignments/lesson7/README.md, benchmarks/results/lesson7-speed-vs-dynpad-epyc-2c.txt.
SPEED_FLOOR = 1.0
ACC_MARGIN = 0.03  # held-out accuracy below the random baseline's allowed
SETUP_SOURCE = """\
import numpy as np"""


def _requests(ctx: Context) -> tuple[list[np.ndarray], list[dict]]:
    """Per distribution: a batch-size run and a budget run, each for (seed a, epoch 0), (a, 1), (b, 0)
    and (a, 0) again."""
    dists = v.secret_lengths(ctx.rng.randrange(1 << 32))
    seeds = (ctx.rng.randrange(1 << 20), ctx.rng.randrange(1 << 20))
    requests = []
    for d, lengths in enumerate(dists):
        for mode in (
            {"batch_size": ctx.rng.choice((16, 32, 64))},
            {"max_tokens": ctx.rng.choice((512, 1024, 2048))},
        ):
            # (a, 0) twice: the same seed and epoch must give the same batches (no global RNG)
            for again, seed, epoch in (
                (0, seeds[0], 0),
                (0, seeds[0], 1),
                (0, seeds[1], 0),
                (1, seeds[0], 0),
            ):
                requests.append(
                    {
                        "again": bool(again),
                        "dist": d,
                        "lengths": [int(x) for x in lengths],
                        "batch_size": mode.get("batch_size"),
                        "max_tokens": mode.get("max_tokens"),
                        "seed": seed,
                        "epoch": epoch,
                    }
                )
    return dists, requests


def _answers(ctx: Context, requests: list[dict]) -> list[list[list[int]]]:
    r = ctx.session.call("batches", CALL_SECONDS, requests=requests)
    if not r.ok:
        raise CheckFailed(stub_reason(r.failure) or f"bucket_batches(...) {r.failure}")
    answers = r.data.get("answers")
    expect(
        isinstance(answers, list) and len(answers) == len(requests),
        "the worker's answer was malformed",
    )
    out = []
    for req, raw in zip(requests, answers, strict=True):
        if isinstance(raw, str):
            raise CheckFailed(
                f"bucket_batches({_shown(req)}) returned {raw[:80]}: return a list of lists of indices"
            )
        try:
            out.append(v.parse_batches(raw, len(req["lengths"])))
        except ValueError as err:
            raise CheckFailed(f"bucket_batches({_shown(req)}): {err}") from err
    return out


def _shown(req: dict) -> str:
    mode = (
        f"batch_size={req['batch_size']}"
        if req.get("batch_size")
        else f"max_tokens={req['max_tokens']}"
    )
    return f"{len(req['lengths'])} lengths, {mode}, seed={req['seed']}, epoch={req['epoch']}"


def _graded(ctx: Context):
    dists, requests = _requests(ctx)
    return dists, requests, _answers(ctx, requests)


def check_coverage(ctx: Context) -> None:
    _, requests, answers = _graded(ctx)
    for req, batches in zip(requests, answers, strict=True):
        problem = v.coverage_problem(batches, len(req["lengths"]))
        expect(problem is None, f"bucket_batches({_shown(req)}): {problem}")
    ctx.ok(
        f"{len(requests)} epochs on 3 length distributions drawn for this grading: every index exactly once"
    )


def check_budget(ctx: Context) -> None:
    dists, requests, answers = _graded(ctx)
    for req, batches in zip(requests, answers, strict=True):
        lengths = dists[req["dist"]]
        problem = v.size_problem(lengths, batches, req["batch_size"], req["max_tokens"])
        if problem is None and req["max_tokens"]:
            problem = v.budget_problem(lengths, batches, req["max_tokens"])
        expect(problem is None, f"bucket_batches({_shown(req)}): {problem}")
    ctx.ok(
        "every batch within its batch size or token budget (rows x longest rounded up to 8), batches filled"
    )


def check_padding(ctx: Context) -> None:
    dists, requests, answers = _graded(ctx)
    for req, batches in zip(requests, answers, strict=True):
        lengths = dists[req["dist"]]
        problem = v.padding_problem(lengths, batches, req["batch_size"], req["max_tokens"])
        expect(problem is None, f"bucket_batches({_shown(req)}): {problem}")
        if req["epoch"] == 0 and req["seed"] == requests[0]["seed"] and not req["again"]:
            ctx.ok(
                f"{_shown(req)}: padding {v.padding_share(lengths, batches):.1%}, a full sort's "
                f"{v.optimum_share(lengths, req['batch_size'], req['max_tokens']):.1%}"
            )


def check_randomness(ctx: Context) -> None:
    dists, requests, answers = _graded(ctx)
    groups: dict[tuple, dict] = {}
    repeats: dict[tuple, list[list[int]]] = {}
    for req, batches in zip(requests, answers, strict=True):
        mode = (req["dist"], req["batch_size"], req["max_tokens"])
        if req["again"]:
            repeats[mode] = batches
        else:
            groups.setdefault(mode, {})[(req["seed"], req["epoch"])] = batches
    # the same batches every epoch first: the more basic mistake
    for mode, epochs in groups.items():
        problem = v.randomness_problem(epochs)
        expect(problem is None, problem or "")
        key = next(k for k in epochs if k[1] == 0 and k[0] == requests[0]["seed"])
        problem = v.determinism_problem(epochs[key], repeats[mode], key)
        expect(problem is None, problem or "")
    for req, batches in zip(requests, answers, strict=True):
        problem = v.order_problem(dists[req["dist"]], batches)
        expect(problem is None, f"bucket_batches({_shown(req)}): {problem}")
    ctx.ok(
        "batch membership changes across epochs and seeds (at most "
        f"{v.MAX_REPEATED_BATCHES:.0%} of batches recur), the same (seed, epoch) gives the same "
        "batches, and their order does not follow length"
    )


def check_speed(ctx: Context) -> None:
    seed = ctx.rng.randrange(1 << 20)
    lengths = st.task_data(seed)["lengths"]
    learner_seed = ctx.rng.randrange(1 << 20)
    requests = [
        {
            "lengths": [int(x) for x in lengths],
            "batch_size": st.BATCH,
            "max_tokens": None,
            "seed": learner_seed,
            "epoch": e,
        }
        for e in range(st.MAX_PAIRS + 1)
    ]
    epochs = _answers(ctx, requests)
    for req, batches in zip(requests, epochs, strict=True):
        problem = v.coverage_problem(batches, len(lengths)) or v.size_problem(
            lengths, batches, st.BATCH, None
        )
        expect(
            problem is None,
            f"not timed: bucket_batches({_shown(req)}) on the grader's training set: {problem}",
        )
    r = st.train_ab(seed, epochs)
    ab = r["ab"]
    shown = (
        f"{ab.ratio:.2f}x the samples per second of random batches with dynamic padding (interval "
        f"{ab.ci_low:.2f}-{ab.ci_high:.2f}x covering the median {ab.coverage:.0%} of the time, {ab.pairs} "
        f"interleaved epochs each, one thread; {r['tokens_mine'] / r['tokens_random']:.0%} of its computed tokens)"
    )
    expect(
        ab.ci_low > SPEED_FLOOR,
        f"the grader's encoder trained with your batches ran at {shown}: not measurably "
        "faster than dynamic padding alone. Group rows of similar length so each batch pads little",
    )
    ctx.ok(f"training speed: {shown}")
    drop = r["acc_random"] - r["acc_mine"]
    expect(
        drop <= ACC_MARGIN,
        f"held-out accuracy {r['acc_mine']:.1%} with your batches against {r['acc_random']:.1%} "
        f"with random ones after {r['epochs']} epochs: more than {ACC_MARGIN:.0%} lost. Batches "
        "that always hold the same rows, in the same order, train worse: keep them random",
    )
    ctx.ok(
        f"held-out accuracy {r['acc_mine']:.1%} (random batches: {r['acc_random']:.1%}, same samples, same epochs)"
    )


CELL_CHECKS = {
    "test_coverage": check_coverage,
    "test_budget": check_budget,
    "test_padding": check_padding,
    "test_randomness": check_randomness,
    "test_speed": check_speed,
    "test_quiz": quiz_check("lesson7", ("q1", "q2", "q3", "q4")),
}
NAMES = ("bucket_batches",)


ASSIGNMENT = Assignment("lesson7", "bucket_batches", SETUP_SOURCE, CELL_CHECKS)
