"""Lesson 10 - profiling: name the bottleneck from plain profile data; (b) fix a slow step. Out of the kernel.

The parent plants a bottleneck per case, profiles each step itself and sends only the plain
profile to the worker's ``diagnose``, twice: as a host 5-10x slower and one 5-10x faster would measure it
(a line in µs belongs to one machine); part (b) is in :mod:`step_checks`. No learner code runs here.
Every case must be named: profiles are timing and move run to run, so when one or two cases are missed
(``SECOND_LOOKS``) all 8 steps are profiled again on fresh data, in a new order, and that second look must be
named whole. A rule left out, or a flag read in a rule's place, misses its case on both looks; a diagnose that
answers otherwise on a second look gains nothing, since it cannot tell which cases it missed.

Every field that gives a plant away also appears where it costs little (a *decoy*: one ``loss.item()``, 5%
padding (at most an eighth of a row), a data wait of about a tenth of the step (documents 16x shorter than the data
plant's), ``foreach=False`` where the optimizer is ~2-5% of the step (the optimizer
plant's own rows and batch, a small embedding table where the plant's is big), batch 1 of rows long enough that no
call is tiny), each on a "none" case and the cheap ones on a case of any label too, and the data or the overhead plant
may come with a second plant, the NaN-check syncs, that costs several times less: a judge that reads flags
instead of shares and call times names the decoy or the pair's cheap plant. The label is always the plant that
costs the most of the step; the gaps are calibrated (README: ``calibration/lesson10_calibrate.py``). A cell
holding a copy of effkit's doctor (the withheld answer, found by content) earns nothing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from effkit.doctor_plants import DECOYS, LONG_ROWS, profile_named
from grader.assignments.lesson10 import step_checks
from grader.assignments.lesson10.manifest import MANIFEST
from grader.kit.assignment import Assignment
from grader.kit.checks import (
    CheckFailed,
    Context,
    copies_in,
    expect,
    quiz_check,
    runs_code_from_data,
    stub_reason,
)

LABELS = ("data", "sync", "overhead", "padding", "optimizer", "none")
CASES = 8  # every bottleneck once, "none" three times (each decoy on one of them)
NONES = CASES - len(LABELS) + 1
SECOND_LOOKS = 2  # misses after which all is looked at again; more are no profile's bad luck
REPO = Path(__file__).resolve().parents[3]
CALL_SECONDS = 30
SETUP_SOURCE = "import math"
# every case reaches diagnose twice, as a host 5-10x slower and as one 5-10x faster would measure the same step (every
# time in it scaled, log-uniform factors drawn per copy), and is named right only when both copies are. Shares of the
# step, counts and calls in multiples of the host's own floor do not move; a line in µs or ms cannot hold for both: a
# rule `batch_size == 1 and matmul_us_work < 50` named every case on every host measured, the overhead plant's work
# calls 2.1-3.5 floors (9.2-10.4 in bf16 on AVX512-BF16) and the batch-1 decoy's 20.9-31 (26-30): at most 15x apart,
# while the two copies are 25x or more apart, so the plant's slow copy sits above the decoy's fast one in µs whatever
# the line. Two copies, not one at a random speed: one per case in 1/8-8 let that rule pass about 4 gradings in 5
HOST_SPEED = (5.0, 10.0)
WIDEST_CALL_RATIO = (
    15.0  # the batch-1 decoy's work calls over the overhead plant's, the most measured (README)
)
TIME_FIELD = re.compile(r"_(ms|us)(_|$)")  # step_ms, ranges_ms, sync_ms, matmul_us_floor, ...


# a pair: one of PAIRED with the PARTNER plant. Timed unprofiled under load 6.5-10.5 (README, --costs), removing
# the data plant saved 28-46% of the pair's step and removing the syncs -12% to +23%, at least 2x less in every
# round; batch 1 cost 82-92% of each sample's time. Not the optimizer loop (-5% to +13%, about what the NaN checks
# cost) nor padding (its cost is the padded positions' compute, which no removal times): their lead would be a toss
PARTNER = "sync"
PAIRED = ("data", "overhead")
# the cheap decoys also go on one case of any label they fit, so that a flag read before the real rules misses
# there too; the long-row ones cost a profile up to 8x a clean step's and go on their "none" case only
CHEAP_DECOYS = tuple(d for d in DECOYS if d not in LONG_ROWS)


def _fits(decoy: str, plants: tuple[str, ...], decoys: list[str]) -> bool:
    """A decoy never sits on its own plant, and long rows neither beside batch 1 (the overhead plant, which they
    would cure), the data plant (which tokenises rows of the usual length), the optimizer plant (on the optimizer
    decoy's rows already) nor the other long-row decoy; the data decoy, which tokenises rows of the usual length
    too, on none of those rows."""
    long_rows = decoy in LONG_ROWS and (
        {"overhead", "data", "optimizer"} & set(plants) or set(decoys) & set(LONG_ROWS)
    )
    other_rows = decoy == "data" and (
        {"overhead", "optimizer"} & set(plants) or set(decoys) & set(LONG_ROWS)
    )
    return decoy not in plants and decoy not in decoys and not long_rows and not other_rows


def draw_cases(rng) -> list[tuple[str, int, tuple[str, ...], tuple[str, ...]]]:
    """(label, data seed, plants, decoys) per case, shuffled: every bottleneck once and three "none" cases, one
    per long-row decoy (``foreach=False``, batch 1) and one with the cheap decoys (one ``loss.item()``, a little
    padding): a judge that reads any one flag in place of its rule, before or after the others, names one "none"
    case wrongly in every grading. The cheap decoys also sit on one more case each, of any label they fit. One
    of ``PAIRED``'s plants, drawn, comes with the cheap ``PARTNER`` plant beside it. The label is the first plant
    ("none": nothing planted)."""
    labels = [*LABELS[:-1], *["none"] * NONES]
    paired = rng.choice(PAIRED)
    plants = [() if x == "none" else (x, PARTNER) if x == paired else (x,) for x in labels]
    decoys: list[list[str]] = [[] for _ in labels]
    nones = [i for i, x in enumerate(labels) if x == "none"]
    for i, group in zip(
        nones, [*([d] for d in sorted(LONG_ROWS)), list(CHEAP_DECOYS)], strict=True
    ):
        decoys[i].extend(group)
    for decoy in CHEAP_DECOYS:
        fits = [i for i in range(CASES) if i not in nones and _fits(decoy, plants[i], decoys[i])]
        decoys[rng.choice(fits)].append(decoy)
    cases = [(labels[i], rng.randrange(1 << 30), plants[i], tuple(decoys[i])) for i in range(CASES)]
    rng.shuffle(cases)
    return cases


def case_name(plants: tuple[str, ...], decoys: tuple[str, ...] = ()) -> str:
    return "plant:" + ("+".join(plants) or "clean") + "".join("~" + d for d in decoys)


def profile_case(plants: tuple[str, ...], decoys: tuple[str, ...], seed: int) -> dict:
    """The parent's own profile of a planted step, as plain data (sent through :func:`as_on_a_host`)."""
    profile = profile_named(case_name(plants, decoys), seed=seed)
    profile.pop("name", None)  # the case name would say what was planted
    return profile


def host_speed(rng) -> float:
    """How many times slower a copy's host is: log-uniform in HOST_SPEED (its inverse: a faster host)."""
    return math.exp(rng.uniform(*(math.log(x) for x in HOST_SPEED)))


def draw_copies(rng) -> list[tuple[int, float]]:
    """(case index, time factor) per profile sent: each case once as a slower, once as a faster host; shuffled."""
    copies = [(i, f) for i in range(CASES) for f in (host_speed(rng), 1 / host_speed(rng))]
    rng.shuffle(copies)
    return copies


def as_on_a_host(profile: dict, factor: float) -> dict:
    """``profile`` with every time multiplied by ``factor`` (fields named ``*_ms``/``*_us*``, each range,
    each top operator's ms): the same step on a host ``factor`` times slower. Nothing else moves."""
    out = {}
    for key, value in profile.items():
        timed = TIME_FIELD.search(key) is not None
        if key == "top_ops":
            value = [[name, ms * factor, calls] for name, ms, calls in value]
        elif timed and isinstance(value, dict):
            value = {k: v * factor for k, v in value.items()}
        elif timed and isinstance(value, int | float) and not isinstance(value, bool):
            value = value * factor
        out[key] = value
    return out


def grade_labels(truth: list[str], answers) -> tuple[int, dict[int, str]]:
    """How many answers equal the truth, and a line per wrong one by its index (answers are untrusted)."""
    if not isinstance(answers, list) or len(answers) != len(truth):
        raise CheckFailed(
            f"the grader expected {len(truth)} labels back and got "
            f"{len(answers) if isinstance(answers, list) else type(answers).__name__}"
        )
    right, wrong = 0, {}
    for i, (want, got) in enumerate(zip(truth, answers, strict=True)):
        shown = str(got)[:40] if isinstance(got, str) else type(got).__name__
        if isinstance(got, str) and got == want:
            right += 1
        elif not isinstance(got, str) or got not in LABELS:
            wrong[i] = f"{shown!r} is not one of {', '.join(LABELS)}"
        else:
            wrong[i] = f"you said {got!r}, the costliest plant was {want!r}"
    return right, wrong


def copied_answers(cells: list[tuple[str, str]]) -> list[str]:
    """A line per function of the learner's cells that copies effkit's withheld doctor (in a string too), and per
    cell that makes code from data at run time, which the copy check cannot read, or reads its callers' frames,
    where the whole batch of cases is (read, never run)."""
    copies = [
        f"{name} in cell {gid!r} is a copy of {answer}"
        for gid, source in cells
        for name, answer in copies_in(source, list(MANIFEST.withheld), REPO)
    ]
    return copies + [
        f"cell {gid!r} makes code from data at run time or reads the frames that called it ({', '.join(names)}): "
        "the grader reads your cells as text and hands diagnose one profile at a time, so write them as plain Python"
        for gid, source in cells
        if (names := runs_code_from_data(source))
    ]


def _ask(ctx: Context, profiles: list[dict]) -> list:
    r = ctx.session.call("diagnose", CALL_SECONDS, profiles=profiles)
    stub = [e for e in ctx.session.load_errors if e.get("cell") == "diagnose"]
    expect(r.ok, stub_reason(stub[0]["message"] if stub else r.failure) or f"diagnose {r.failure}")
    return r.data.get("labels")


def _look(ctx: Context, cases: list, copies: list[tuple[int, float]]) -> tuple[int, str]:
    """One look at ``cases``: each profiled here once, sent as ``copies`` (a slower and a faster host's) in one
    call; how many cases had both copies named right, and a line per miss. Each case is answered in a forked
    child of the worker (probes._isolated), so no state carries from one case, or look, to another."""
    measured = [profile_case(p, d, s) for _, s, p, d in cases]
    truth = [cases[i][0] for i, _ in copies]
    _, wrong = grade_labels(truth, _ask(ctx, [as_on_a_host(measured[i], f) for i, f in copies]))
    lines = []
    for k, line in sorted(wrong.items(), key=lambda kv: copies[kv[0]]):
        i, f = copies[k]
        host = f"{f:.1f}x slower" if f > 1 else f"{1 / f:.1f}x faster"
        lines.append(f"case {i + 1} as a host {host}: {line}")
    return CASES - len({copies[k][0] for k in wrong}), "; ".join(lines[:8])


def check_diagnose(ctx: Context) -> None:
    cases = draw_cases(ctx.rng)
    # the second look, drawn whether needed or not: the same steps on fresh data seeds, in a new order, so that
    # the cases missed on the first look cannot be told from the others (a miss answered otherwise gains nothing)
    again = [(label, ctx.rng.randrange(1 << 30), p, d) for label, _, p, d in cases]
    ctx.rng.shuffle(again)
    copies, copies_again = draw_copies(ctx.rng), draw_copies(ctx.rng)
    copied = copied_answers(ctx.session.cells)  # the learner's sources, as data
    expect(
        not copied, "; ".join(copied) + ": write your own diagnose, the grader withholds effkit's"
    )
    right, missed = _look(ctx, cases, copies)
    summary = f"{right} of {CASES} planted bottlenecks named, every one needed"
    if right == CASES:
        ctx.ok(summary)
        return
    # a sound rule may meet one or two unlucky profiles; more misses than that are the rules
    expect(
        CASES - right <= SECOND_LOOKS,
        f"{summary} (a second look after {SECOND_LOOKS} at most). {missed}",
    )
    second, missed_again = _look(ctx, again, copies_again)
    expect(
        second == CASES,
        f"{summary}; on a second look at all {CASES} steps on fresh data, in a new order, {second} of "
        f"{CASES}. First look: {missed}. Second look: {missed_again}",
    )
    ctx.ok(
        f"{CASES} of {CASES} planted bottlenecks named on a second look at all {CASES} on fresh data "
        f"(the first named {right}: {missed})"
    )


CELL_CHECKS = {
    "test_diagnose": check_diagnose,
    "test_fast_step_equal": step_checks.check_equal,
    "test_fast_step_speed": step_checks.check_speed,
    "test_quiz": quiz_check("lesson10", ("q1", "q2", "q3", "q4", "q5")),
}
NAMES = ("diagnose", "fast_step")

ASSIGNMENT = Assignment("lesson10", "diagnose", SETUP_SOURCE, CELL_CHECKS, names=NAMES)
