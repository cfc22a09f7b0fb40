"""Lesson 10's exercise, graded out of the kernel: the learner's ``diagnose`` sees only plain profiles the
grader measured itself, of steps in which the grader planted bottlenecks; part (b): the learner's
``fast_step`` held to the original slow step's result and timed against it.

The reference's full marks through the sandbox and the stub's 0 are the instructor cycle's
(tests/test_instructor_cycle.py). Here every submission is graded in this process on its cell data: the probe
the worker would run, then the parent's check on what it returns. One grading's cases (SEED) are profiled once
for the whole module, so the submissions are judged on the same profiles.
"""

import functools
import inspect
import itertools
import json
import random
import re
from pathlib import Path

import nbformat
import pytest
from exercise_cells import POINTS as EXERCISE_POINTS  # noqa: E402  (tests/ is on sys.path)
from exercise_cells import InProcess, grade, grade_here, reference_cells  # noqa: E402
from lesson10_steps import PER_SAMPLE_LOOP_KEPT  # noqa: E402

from grader import assignments
from grader.assignments.lesson10 import checks
from grader.assignments.lesson10 import probes as lesson10_probes
from grader.scoring.checks import CellVerdict, CheckFailed, Context

LESSON = "lesson10"
ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "lesson10" / "lesson10.ipynb"
POINTS = EXERCISE_POINTS[LESSON]
A = assignments.get("lesson10")
SEED = 1


# the measurement itself, not the `profiled` fixture's cache of it
_PROFILE_CASE = checks.profile_case


@functools.cache
def _case_profile_fp32(plants, decoys, seed) -> str:
    return json.dumps(_PROFILE_CASE(plants, decoys, seed))


def case_profile_fp32(plants, decoys, seed) -> dict:
    """A case's profile in fp32 (call inside other_host.in_fp32), measured once per module run."""
    return json.loads(_case_profile_fp32(tuple(plants), tuple(decoys), seed))


@pytest.fixture(scope="module")
def profiled():
    """The grader's profiles of SEED's cases, measured once (profile_case is the costly part)."""
    cached = functools.lru_cache(maxsize=None)(checks.profile_case)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checks, "profile_case", lambda *case: dict(cached(*case)))
        yield


def _grade(
    cell: str, source: str, only: list[str], name: str = "reference"
) -> dict[str, CellVerdict]:
    """``only``'s checks on the reference cells with ``cell`` swapped for ``source`` (submission ``name``,
    whose mistake must change the cell), all drawing from one ``random.Random(SEED)`` in order."""
    assert name == "reference" or source != dict(reference_cells(LESSON))[cell], (
        f"{name}: the mistake did not change the cell"
    )
    return grade_here(
        LESSON, reference_cells(LESSON, **{cell: source}), only, seed=SEED, strict=False
    )


def test_every_label_is_drawn_and_the_case_name_never_reaches_the_learner(monkeypatch):
    cases = checks.draw_cases(random.Random(SEED))
    labels = [label for label, *_ in cases]
    assert len(cases) == checks.CASES and set(labels) == set(checks.LABELS)
    # every bottleneck once: a rule left out misses its case in every grading
    assert all(labels.count(x) == 1 for x in checks.LABELS[:-1]) and labels.count("none") == 3
    assert (
        checks.draw_cases(random.Random(SEED + 1)) != cases
    )  # the order and seeds are the grading's secret
    monkeypatch.setattr(checks, "profile_named", lambda name, seed: {"name": name, "step_ms": 1.0})
    assert checks.profile_case(("data", "sync"), ("padding",), 3) == {"step_ms": 1.0}


# "data": a data-wait line of a few percent, where the doctor's is 25% (the data decoy waits about 10% here)
FLAGS = {
    "overhead": "overhead",
    "optimizer": "optimizer",
    "padding": "padding",
    "sync": "sync",
    "data": "data",
}


def _reads_flags(order, data_first, plants, decoys):
    """What a judge reading only the tell-tale fields says (batch 1, foreach off, any padding, any sync),
    in ``order``, with the data share read first or last: the label it would give the case."""
    if data_first and "data" in plants:
        return "data"
    present = set(plants) | set(decoys)
    return next((flag for flag in order if flag in present), "data" if "data" in plants else "none")


def _one_flag(flag, first, label, plants, decoys):
    """A sound judge but for one rule, read as its flag (``flag`` present: its label), before the other rules
    (``first``) or only where none of them fires (the case is "none"): the label it gives the case."""
    present = flag in set(plants) | set(decoys)
    if present and (first or label == "none"):
        return flag
    return label


def test_every_drawn_grading_fails_a_judge_that_reads_a_flag_in_place_of_a_rule():
    """Every case is needed and a miss is looked at again on the same plants and decoys, so one case a flag
    misnames fails the grading. Each decoy sits on a "none" case, so one flag read in place of its rule, even
    after every other rule, misnames a case in every grading; the cheap decoys also sit on a case of another
    label. Each case's label is its first plant, no decoy is the label, each pair's second plant the cheap one."""
    orders = list(itertools.permutations(checks.DECOYS))
    for seed in range(300):
        cases = checks.draw_cases(random.Random(seed))
        on_none = {d for label, _, _, decoys in cases if label == "none" for d in decoys}
        assert on_none == set(checks.DECOYS), (seed, cases)
        elsewhere = {d for label, _, _, decoys in cases if label != "none" for d in decoys}
        assert elsewhere == set(checks.CHEAP_DECOYS), (seed, cases)
        for label, _, plants, decoys in cases:
            assert label == (plants[0] if plants else "none") and label not in decoys
            assert plants[1:] in ((), (checks.PARTNER,))
        for flag, first in itertools.product(FLAGS, (True, False)):
            said = [_one_flag(flag, first, label, p, d) for label, _, p, d in cases]
            assert said != [label for label, *_ in cases], (seed, flag, first, cases)
        for order in orders:
            for data_first in (False, True):
                said = [_reads_flags(order, data_first, p, d) for _, _, p, d in cases]
                right = sum(s == label for s, (label, *_) in zip(said, cases, strict=True))
                assert right < checks.CASES - 1, (seed, order, data_first, cases)


_REF = dict(reference_cells(LESSON))["diagnose"]
_ALWAYS_DATA = 'def diagnose(profile):\n    return "data"\n'
# a learner who only knows lessons 1, 2 and 7: data wait, syncs and padding, else "none"
_THREE_RULES = """
def diagnose(profile):
    step = profile["step_ms"]
    if profile["ranges_ms"]["data"] / step > 0.25:
        return "data"
    if profile["syncs_per_step"] > 1:
        return "sync"
    if (profile["padding_share"] or 0) > 0.3:
        return "padding"
    return "none"
"""
# "the biggest range is the bottleneck": milliseconds instead of the evidence each bottleneck leaves
_BIGGEST_RANGE = """
def diagnose(profile):
    ranges = profile["ranges_ms"]
    biggest = max(ranges, key=ranges.get)
    return {"data": "data", "optimizer": "optimizer"}.get(biggest, "none")
"""
# the review's shortcut: each plant's tell-tale field, no time read (8 of 8 before the decoys and pairs)
_READS_FLAGS = """
def diagnose(profile):
    if profile["batch_size"] == 1:
        return "overhead"
    if not profile["optimizer"]["foreach"]:
        return "optimizer"
    if (profile["padding_share"] or 0) > 0:
        return "padding"
    if profile["syncs_per_step"] > 0:
        return "sync"
    return "data" if profile["ranges_ms"]["data"] / profile["step_ms"] > 0.25 else "none"
"""
_LIST = 'def diagnose(profile):\n    return ["data"]\n'
_READS_NAME = 'def diagnose(profile):\n    return profile["name"].split(":")[1]\n'
_HUGE = 'def diagnose(profile):\n    return "data" * 10_000_000\n'


def _ref_with(old: str, new: str) -> str:
    assert _REF.count(old) == 1, old
    return _REF.replace(old, new)


# the reference with one rule left out: each bottleneck is drawn once, so its case is missed on both looks
LEFT_OUT = {
    "data": 'found["data"] = data',
    "sync": 'found["sync"] = profile.get("sync_ms", 0.0) / step',
    "overhead": 'found["overhead"] = 1.0 - matmul - data',
    "padding": 'found["padding"] = padding * (ranges.get("forward", 0.0) + ranges.get("backward", 0.0)) / step',
    "optimizer": 'found["optimizer"] = opt_share / 2',
}
# the reference with one rule read as its flag (ranked as the reference ranks): a "none" case carries it
FLAG_FOR_RULE = {
    "overhead": (
        'if calls < profile["overhead_calls"] and profile.get("ops_per_step", 0) >= 50 and data < 0.25:',
        'if profile["batch_size"] == 1:',
    ),
    "optimizer": (
        "if looped and opt_ops >= 4 * tensors and opt_share >= 0.12:",
        'if not opt.get("foreach"):',
    ),
    "padding": ("if padding >= 0.3:", "if padding > 0:"),
    "sync": (
        'if profile.get("syncs_per_step", 0) >= 1.5:',
        'if profile.get("syncs_per_step", 0) > 0:',
    ),
}
# effkit's doctor pasted into the cell, renamed and re-signed, behind a one-line diagnose: the worker withholds
# effkit.doctor.diagnose, and the grader finds the copy in the cell's source by content
_DOCTOR = (ROOT / "effkit" / "doctor.py").read_text()
_PASTED = re.sub(
    r"\bprofile\b",
    "measured",
    _DOCTOR[: _DOCTOR.index('\nif __name__ == "__main__":')].replace(
        "def diagnose(profile: dict)", "def bottlenecks(profile)"
    ),
) + ("\n\ndef diagnose(profile):\n    return bottlenecks(profile)[0].label\n")

# the doctor kept as text and exec'd at load (a review: 8/8 unseen, only function definitions were read), and the
# same text base64-encoded, which no text match can read: the cell makes code from data at run time
_DOCTOR_TEXT = _DOCTOR[: _DOCTOR.index('\nif __name__ == "__main__":')]
_IN_A_STRING = (
    f"_SRC = {_DOCTOR_TEXT!r}\n_ns = {{}}\nexec(_SRC, _ns)\n\n\n"
    "def diagnose(profile):\n    return _ns['diagnose'](profile)[0].label\n"
)
_ENCODED = (
    "import base64\n\n"
    f"_SRC = {__import__('base64').b64encode(_DOCTOR_TEXT.encode()).decode()!r}\n_ns = {{}}\n"
    "exec(base64.b64decode(_SRC), _ns)\n\n\n"
    "def diagnose(profile):\n    return _ns['diagnose'](profile)[0].label\n"
)

# a review's two routes past the text match: the doctor written to the worker's /tmp and run by runpy (base64 is not
# Python the match can read), and every case of the grading read from a caller's frame
_RUNPY = (
    "import base64\nimport runpy\n\n"
    f"_SRC = {__import__('base64').b64encode(_DOCTOR_TEXT.encode()).decode()!r}\n"
    "open('/tmp/d.py', 'wb').write(base64.b64decode(_SRC))\n\n\n"
    "def diagnose(profile):\n    return runpy.run_path('/tmp/d.py')['diagnose'](profile)[0].label\n"
)
_FRAME_PEEK = _REF + (
    "\n\nimport sys\n\n_first = diagnose\n\n\n"
    "def diagnose(profile):\n    _all = sys._getframe(1).f_locals.get('profiles')\n    return _first(profile)\n"
)

# the batch-1 flag in the overhead rule's place, and "none" for everything on a second look (the worker keeps
# state between calls): were a case counted right on either look, the decoy's case would be named on the second
_SECOND_LOOK_NONE = (
    _ref_with(*FLAG_FOR_RULE["overhead"]).replace(
        "def diagnose(profile):", "def _first_look(profile):"
    )
    + """
_calls = []


def diagnose(profile):
    _calls.append(1)
    return _first_look(profile) if len(_calls) <= 16 else "none"
"""
)

# the overhead rule as a line in µs beside the batch-1 flag: it named every case on every host measured (the
# overhead plant's work calls take 5-10 µs, the batch-1 decoy's 60 µs and up), and the grader hands each case over
# as a host 5-10x slower and as one 5-10x faster would measure it (checks.as_on_a_host): no line holds for both
_MICROSECONDS = _ref_with(
    FLAG_FOR_RULE["overhead"][0], 'if profile["batch_size"] == 1 and per_call_us < 50:'
)

# a review's proxy for the optimizer rule: the optimizer decoy had rows of 256 tokens and the plant 32, so the work's
# matmul calls (199-3,310 floors against 20.8-38.4) told them apart without the optimizer's time. The plant now has
# the decoy's rows, batch and tensors (its loop costly through a big embedding table): only the optimizer's share of
# the step tells them apart, and this names the plant "none" on both looks
_OPTIMIZER_AS_ROW_LENGTH = """
def diagnose(p):
    calls = p["matmul_us_work"] / p["matmul_us_floor"]
    if p["ranges_ms"]["data"] / p["step_ms"] >= .25: return "data"
    if p["batch_size"] == 1 and calls < p["overhead_calls"]: return "overhead"
    if p["syncs_per_step"] >= 1.5: return "sync"
    if (p["padding_share"] or 0) >= .3: return "padding"
    if p["optimizer"]["foreach"] is False and calls < 100: return "optimizer"
    return "none"
"""

SUBMISSIONS = {
    "reference": (_REF, True, "8 of 8 planted bottlenecks named"),
    "a_line_in_microseconds": (
        _MICROSECONDS,
        False,
        ("as a host", "the costliest plant was", "Second look: case"),
    ),
    "always_data": (_ALWAYS_DATA, False, "you said 'data', the costliest plant was"),
    # a review's shortcut: the data rule at 5% named every data plant while no step waited a little for its data
    "a_data_line_at_five_percent": (
        _REF.replace("if data >= 0.25:", "if data >= 0.05:"),
        False,
        "you said 'data', the costliest plant was",
    ),
    "reads_optimizer_as_row_length": (
        _OPTIMIZER_AS_ROW_LENGTH,
        False,
        (
            "you said 'none', the costliest plant was 'optimizer'",
            ("Second look:", "you said 'none', the costliest plant was 'optimizer'"),
        ),
    ),
    "three_rules": (_THREE_RULES, False, "the costliest plant was 'overhead'"),
    "biggest_range": (_BIGGEST_RANGE, False, "you said 'none', the costliest plant was 'sync'"),
    "reads_flags": (_READS_FLAGS, False, "the costliest plant was 'none'"),
    "a_list": (_LIST, False, "'returned list' is not one of"),
    "reads_the_case_name": (_READS_NAME, False, "'raised KeyError' is not one of"),
    "huge_string": (_HUGE, False, "is not one of"),
    # it counts its calls to answer 'none' from the 17th on: each case in a forked child of its own
    # (probes._isolated), it never counts past 1, and misses as its flag rule does, on both looks
    "says_none_on_a_second_look": (
        _SECOND_LOOK_NONE,
        False,
        ("you said 'overhead', the costliest plant was 'none'", "Second look: case"),
    ),
    "pasted_doctor": (
        _PASTED,
        False,
        "bottlenecks in cell 'diagnose' is a copy of effkit.doctor.diagnose",
    ),
    "doctor_in_a_string": (
        _IN_A_STRING,
        False,
        "diagnose (in a string) in cell 'diagnose' is a copy of effkit.doctor.diagnose",
    ),
    "encoded_doctor": (
        _ENCODED,
        False,
        "cell 'diagnose' makes code from data at run time or reads the frames that called it (exec)",
    ),
    "runpy_doctor": (_RUNPY, False, ("makes code from data at run time", "runpy", "run_path")),
    "frame_peek": (
        _FRAME_PEEK,
        False,
        ("reads the frames that called it", "_getframe", "f_locals"),
    ),
    **{
        f"leaves_out_{label}": (
            _ref_with(line, "pass"),
            False,
            # the left-out label missed on both looks (a busy core may add a miss of its own on either)
            (f"the costliest plant was {label!r}", ("Second look:", f"plant was {label!r}")),
        )
        for label, line in LEFT_OUT.items()
    },
    **{
        f"reads_{label}_as_its_flag": (
            _ref_with(*swap),
            False,
            (
                f"you said {label!r}, the costliest plant was 'none'",
                ("Second look:", f"you said {label!r}, the costliest plant was 'none'"),
            ),
        )
        for label, swap in FLAG_FOR_RULE.items()
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SUBMISSIONS)
def test_submissions_score_what_they_deserve(profiled, name):
    source, passes, words = SUBMISSIONS[name]
    v = _grade("diagnose", source, ["test_diagnose"], name)["test_diagnose"]
    text = v.reason if not v.passed else " ".join(v.lines)
    # a word, or (anchor, word): the word after the anchor (e.g. on the second look)
    said = [
        w[0] in text and w[1] in text.split(w[0], 1)[1] if isinstance(w, tuple) else w in text
        for w in (words if isinstance(words, tuple) else (words,))
    ]
    assert v.passed == passes and all(said), text
    assert len(text) < 3000  # a huge answer is not echoed back


@pytest.mark.slow
@pytest.mark.parametrize(
    "overhead, kernels",
    [(2.0, 1.0), (0.5, 1.0), (1.0, 2.0), (1.0, 0.5)],
    ids=[
        "twice-the-call-overhead",
        "half-the-call-overhead",
        "kernels-2x-faster",
        "kernels-2x-slower",
    ],
)
def test_a_grading_is_named_whole_as_on_another_machine(overhead, kernels):
    """The decoys' and the plants' evidence are ratios (shares of the step, calls against the host's own empty
    call), so a grading's cases hold on hosts no test ran on: SEED's profiles, measured here, moved to a host with
    twice or half the fixed cost per matmul call or 2x faster or slower kernels (tests/other_host.py), decoys
    and the pair included, are each named right by the reference and by effkit's doctor."""
    from other_host import as_on_another_machine, in_fp32

    from effkit import doctor

    ns: dict = {}
    exec(checks.SETUP_SOURCE + "\n" + _REF, ns)  # noqa: S102  (the repository's reference)

    def named_wrong(data_seeds: list[int]) -> dict:
        with in_fp32():  # where the floor is the calls' fixed cost (tests/other_host.py)
            cases = [
                (label, case_profile_fp32(plants, decoys, seed), plants, decoys)
                for (label, _, plants, decoys), seed in zip(drawn, data_seeds, strict=True)
            ]
        wrong = {}
        for label, profile, plants, decoys in cases:
            moved = as_on_another_machine(profile, overhead, kernels)
            said = (ns["diagnose"](moved), doctor.diagnose(moved)[0].label)
            if said != (label, label):
                wrong[checks.case_name(plants, decoys)] = said
        return wrong

    drawn = checks.draw_cases(random.Random(SEED))
    wrong = named_wrong([seed for _, seed, _, _ in drawn])
    # as the grading does (checks.check_diagnose): one or two misses, a profile's bad luck on a busy machine
    # (once: clean~optimizer read "optimizer" at load 18), send every case again on fresh data, all to be named
    if 0 < len(wrong) <= checks.SECOND_LOOKS:
        fresh = random.Random(SEED + 1)
        wrong = {
            "second look": named_wrong([fresh.randrange(1 << 30) for _ in drawn]),
            "first": wrong,
        }
        wrong = wrong if wrong["second look"] else {}
    assert not wrong, wrong


def test_a_profile_reaches_diagnose_as_a_slower_and_a_faster_host_would_measure_it():
    """Every time in a profile (``*_ms``, ``*_us*``, each range, each top operator's ms) moves by the copy's
    factor and nothing else does, so shares and multiples of the floor are the same on every drawn host. Each
    case goes out twice per look, once 5-10x slower and once 5-10x faster, shuffled: the copies are 25x or more
    apart, the batch-1 decoy's work calls at most 15x the overhead plant's on every host measured, so the
    plant's slow copy sits above the decoy's fast one in µs and no line in µs names both."""
    p = {
        "steps": 5, "step_ms": 10.0, "step_ms_unprofiled": 8.0, "profiler_overhead": 1.25,
        "ranges_ms": {"data": 1.0, "forward": 3.0}, "ops_per_step": 234.0,
        "ops_per_step_by_range": {"data": 3.0}, "top_ops": [["aten::mm", 2.0, 18.0]],
        "syncs_per_step": 1.0, "sync_ms": 0.5, "matmul_ms": 4.0, "matmul_calls_per_step": 27.0,
        "matmul_us_median": 9.0, "matmul_us_work": 12.0, "matmul_us_floor": 3.0, "overhead_calls": 7.0,
        "batch_size": 1, "bf16_hardware": False, "padding_share": 0.05, "memory_peak_bytes": None,
        "optimizer": {"name": "Adam", "foreach": True, "fused": None, "param_tensors": 27},
    }  # fmt: skip
    q = checks.as_on_a_host(p, 4.0)
    moved = {"step_ms", "step_ms_unprofiled", "ranges_ms", "top_ops", "sync_ms", "matmul_ms"}
    moved |= {"matmul_us_median", "matmul_us_work", "matmul_us_floor"}
    assert {k for k in p if q[k] != p[k]} == moved
    assert q["ranges_ms"]["data"] / q["step_ms"] == p["ranges_ms"]["data"] / p["step_ms"]
    assert q["matmul_us_work"] / q["matmul_us_floor"] == 4.0
    assert q["top_ops"][0] == ["aten::mm", 8.0, 18.0]
    low, high = checks.HOST_SPEED
    for seed in range(200):
        copies = checks.draw_copies(random.Random(seed))
        assert sorted(i for i, _ in copies) == sorted(2 * list(range(checks.CASES)))
        for case in range(checks.CASES):
            slow, fast = sorted((f for i, f in copies if i == case), reverse=True)
            assert low <= slow <= high and low <= 1 / fast <= high
            assert (
                slow / fast >= 25 > checks.WIDEST_CALL_RATIO
            )  # the plant's slow copy above the decoy's fast one
    assert checks.draw_copies(random.Random(1)) != checks.draw_copies(random.Random(2))


def test_the_stub_is_named_as_a_stub():
    stub = "def diagnose(profile):\n    raise NotImplementedError()\n"
    ctx = Context(
        InProcess(A, lesson10_probes, reference_cells(LESSON, diagnose=stub)), random.Random(SEED)
    )
    ctx.session.call = lambda probe, timeout_s, **kw: InProcess.call(
        ctx.session, probe, timeout_s, profiles=[{}]
    )
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        import unittest.mock as um

        with um.patch.object(checks, "profile_case", lambda *case: {}):
            A.cell_checks["test_diagnose"](ctx)


def test_untrusted_answers_are_refused_by_shape_and_never_trusted():
    truth = ["data", "none"]
    assert checks.grade_labels(truth, ["data", "none"]) == (2, {})
    for bad in (None, "data", ["data"], ["data", "none", "sync"], {"labels": truth}):
        with pytest.raises(CheckFailed):
            checks.grade_labels(truth, bad)
    right, wrong = checks.grade_labels(truth, [1, "x" * 10_000])
    assert right == 0 and "'int'" in wrong[0] and len(wrong[1]) < 200


def test_the_probe_answers_each_case_apart_on_a_fresh_copy_and_returns_short_strings():
    """Each case in a forked child (probes._isolated): an edit of the profile does not reach the next case, and
    nothing ``diagnose`` keeps does either. A fresh review (2026-12-06) found that a memo keyed on what a step's
    two copies share (its range shares) could carry one copy's answer to the other within one process."""

    class Evil(str):
        def __getitem__(self, key):
            raise RuntimeError("no")

    seen = []

    def diagnose(profile):
        seen.append(profile["step_ms"])
        profile["step_ms"] = -1  # an edit must not reach the next case
        return Evil(repr(seen) * 20)  # what this call saw, and whatever an earlier one left

    worker = type("W", (), {"ns": {"diagnose": diagnose}})()
    profiles = [{"step_ms": 1.0}, {"step_ms": 2.0}]
    data, blobs = lesson10_probes.probe_diagnose(worker, profiles=profiles)
    assert blobs == [] and profiles == [{"step_ms": 1.0}, {"step_ms": 2.0}]
    assert data == {"labels": [("[1.0]" * 20)[:40], ("[2.0]" * 20)[:40]]}, data
    assert type(data["labels"][0]) is str and seen == []  # nothing came back to this process


def test_a_case_that_hangs_is_that_cases_answer_and_a_stub_is_a_stub(monkeypatch):
    import time

    monkeypatch.setattr(lesson10_probes, "CASE_SECONDS", 0.5)

    def diagnose(profile):
        if profile["hang"]:
            time.sleep(30)
        return "none"

    worker = type("W", (), {"ns": {"diagnose": diagnose}})()
    start = time.monotonic()
    data, _ = lesson10_probes.probe_diagnose(worker, profiles=[{"hang": True}, {"hang": False}])
    assert data == {"labels": ["took over 0.5 s", "none"]} and time.monotonic() - start < 10

    def stub(profile):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        lesson10_probes.probe_diagnose(type("W", (), {"ns": {"diagnose": stub}})(), [{}])


# -- part (b): the slow step to fix ---------------------------------------------------------------

from grader.assignments.lesson10 import slow_step as step_task  # noqa: E402
from grader.assignments.lesson10 import step_checks  # noqa: E402
from grader.sandbox.channel import tensor_msg  # noqa: E402
from grader.sandbox.probe import CallResult  # noqa: E402

STEP_CELLS = ["test_fast_step_equal", "test_fast_step_speed"]
_FAST = dict(reference_cells(LESSON))["fast_step"]
_BATCH = "model(inputs), targets"
_STUB = (
    "def fast_step(model, inputs, targets, lr, weight_decay):\n    raise NotImplementedError()\n"
)
_LOOP_KEPT = PER_SAMPLE_LOOP_KEPT  # tests/lesson10_steps.py: correct, ~1.2x
# the shortcuts that do no work (issue 50: the pasted original earned the equality cell's 2 points): the notebook's
# slow_step pasted back under the cell's name, the same with every name of its own changed and its comments gone,
# and the grader's own function imported under the cell's name
_IMPORTS = "import torch\nimport torch.nn.functional as F\n\n\n"
_PASTED = _IMPORTS + inspect.getsource(step_task.slow_step).replace(
    "def slow_step(", "def fast_step("
)
_RENAMED = (
    _IMPORTS
    + """def fast_step(net, xs, ys, rate, decay):
    ws = list(net.parameters())
    acc = [torch.zeros(w.shape, dtype=torch.float64) for w in ws]
    running = 0.0
    for k in range(len(xs)):
        row = torch.tensor(xs[k].tolist()).unsqueeze(0)
        label = torch.tensor([int(ys[k].item())])
        err = F.cross_entropy(net(row), label)
        for a, d in zip(acc, torch.autograd.grad(err, ws), strict=True):
            a += d.double()
        running += err.item()
    with torch.no_grad():
        for w, a in zip(ws, acc, strict=True):
            change = (a / len(xs)).float() + decay * w
            w -= rate * change
    return running / len(xs)
"""
)
_IMPORTED = "from grader.assignments.lesson10.slow_step import slow_step as fast_step\n"

STEP_SUBMISSIONS = {  # name: (fast_step source, {cell: passes}, words in the failing cells' reasons)
    "reference": (_FAST, {"test_fast_step_equal": True, "test_fast_step_speed": True}, ""),
    "untouched_stub": (
        _STUB,
        {"test_fast_step_equal": False, "test_fast_step_speed": False},
        "NotImplementedError",
    ),
    # fast, but an off-by-one drops the batch's last sample: a different update, so no speed points either
    "drops_a_sample": (
        _FAST.replace(_BATCH, "model(inputs[:-1]), targets[:-1]"),
        {"test_fast_step_equal": False, "test_fast_step_speed": False},
        "every sample",
    ),
    # fast, with the learning rate of the notebook's try-it cell instead of the one given
    "hard_coded_lr": (
        _FAST.replace("lr=lr,", "lr=0.1,"),
        {"test_fast_step_equal": False, "test_fast_step_speed": False},
        "the learning rate",
    ),
    "per_sample_loop_kept": (
        _LOOP_KEPT,
        {"test_fast_step_equal": True, "test_fast_step_speed": False},
        "one sample at a time",
    ),
    # the original's own result, bit for bit: no work, no points (README, threat model)
    **{
        name: (
            source,
            {"test_fast_step_equal": False, "test_fast_step_speed": False},
            "one sample at a time",
        )
        for name, source in (
            ("pasted_original", _PASTED),
            ("renamed_original", _RENAMED),
            ("imported_original", _IMPORTED),
        )
    },
}


@pytest.fixture
def baseline_in_process(monkeypatch):
    """The baseline worker (grader code only) answered in this process, as InProcess answers the learner's."""

    class Baseline(InProcess):
        def close(self):
            pass

    monkeypatch.setattr(
        step_checks, "baseline_session", lambda session: Baseline(A, lesson10_probes, [])
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", STEP_SUBMISSIONS)
def test_fast_step_submissions_score_what_they_deserve(baseline_in_process, name):
    source, want, words = STEP_SUBMISSIONS[name]
    verdicts = _grade("fast_step", source, STEP_CELLS, name)
    got = {gid: v.passed for gid, v in verdicts.items()}
    reasons = {gid: v.reason for gid, v in verdicts.items() if not v.passed}
    assert got == want, reasons
    assert all(words in reason for reason in reasons.values()), reasons
    points = sum(POINTS[gid] for gid, passed in got.items() if passed)
    print(
        f"{name}: {points} of 5 points; "
        + " | ".join(v.reason or v.lines[-1] for v in verdicts.values())
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "looks, passes, words",
    [
        # 3 of 50 reference gradings beside two other jobs: a median of 11-14x, the interval's low end 2.0-2.5x
        (
            [[2.2, 9, 11, 12, 14, 60], [10, 11, 12, 13, 14, 15]],
            True,
            "over 12 pairs of 8 steps on two looks",
        ),
        # a step under the target is never measured twice
        ([[1.2, 1.3, 1.4, 1.5, 1.6, 1.7]], False, "over 6 pairs of 8 steps, each"),
        # inconclusive twice: all 12 pairs judged together, and they start below the target
        ([[2.2, 2.5, 3.1, 3.3, 3.5, 9], [2.1, 2.4, 3.2, 3.4, 3.6, 8]], False, "on two looks"),
    ],
    ids=["noisy-then-clear", "slow", "noisy-twice"],
)
def test_a_speed_inconclusive_on_one_look_is_measured_again_and_judged_on_all_pairs(
    baseline_in_process, monkeypatch, looks, passes, words
):
    """The interval's low end under the target while the median is above it is a busy machine's verdict,
    not the step's: PAIRS more pairs on fresh tasks, then the interval of all the pairs decides."""
    from effkit.abtest import ABResult, median_ci, median_ci_coverage

    scripted = iter(looks)

    def fake_compare(a, b, *, warmup=1, min_pairs=6, max_pairs=6, **_):
        ratios = next(scripted)
        for _ in range(warmup + len(ratios)):  # the real runs: each result is still checked after
            a()
            b()
        low, high = median_ci(ratios)
        return ABResult(
            sorted(ratios)[len(ratios) // 2], low, high, 0.95, len(ratios), [1.0] * 6, [1.0] * 6,
            list(ratios), 1.0, median_ci_coverage(len(ratios)),
        )  # fmt: skip

    monkeypatch.setattr(step_checks, "compare", fake_compare)
    verdict = _grade("fast_step", _FAST, ["test_fast_step_speed"])["test_fast_step_speed"]
    text = verdict.reason if not verdict.passed else " ".join(verdict.lines)
    assert verdict.passed == passes and words in text, text
    assert ("inconclusive" in text) == (len(looks) == 2) or not passes, text
    assert next(scripted, None) is None  # every look scripted was taken, no more


def test_the_notebook_shows_the_graders_own_slow_step():
    nb = nbformat.read(SOLUTION, as_version=4)
    shown = next(
        c.source for c in nb.cells if c.cell_type == "markdown" and "def slow_step(" in c.source
    )
    assert inspect.getsource(step_task.slow_step) in shown
    # and the original is what it says: the same update as one batched step, slowly
    task = step_task.Task(seed=3, batch=16, steps=2)
    slow, _ = step_task.run(step_task.slow_step, task, 0.1, 0.01)
    ns: dict = {}
    exec(_FAST, ns)  # noqa: S102  (the repository's reference)
    fast, _ = step_task.run(ns["fast_step"], task, 0.1, 0.01)
    moved = (step_task.flat(slow) - step_task.flat(task.model())).norm()
    assert moved > 0 and (step_task.flat(fast) - step_task.flat(slow)).norm() / moved < 1e-5


def test_a_correct_step_ends_where_the_original_does_on_a_task_where_rounding_once_picked_a_gradient():
    """Task 394 of ``grader/assignments/lesson10/calibration/lesson10_drift.py``: with ReLUs in the task model, a pre-activation
    within rounding of zero took the other branch in the batched step, and after 8 steps the
    reference solution ended 5.4e-3 of the update from the original (above TOLERANCE: ~1% of
    gradings failed a correct step). GELU has no kink: the gap stays at rounding."""
    spec = {"seed": 388734002, "batch": 48, "lr": 0.1312, "weight_decay": 0.0074}
    task = step_task.Task(spec["seed"], spec["batch"], step_checks.TIMED_STEPS)
    with step_checks.one_thread():
        slow, _ = step_task.run(step_task.slow_step, task, spec["lr"], spec["weight_decay"])
        ns: dict = {}
        exec(_FAST, ns)  # noqa: S102  (the repository's reference)
        fast, _ = step_task.run(ns["fast_step"], task, spec["lr"], spec["weight_decay"])
    want = step_task.flat(slow)
    drift = float(
        (step_task.flat(fast) - want).norm() / (want - step_task.flat(task.model())).norm()
    )
    assert drift < step_checks.TOLERANCE / 100, f"{drift:.1e} of the update"


def test_untrusted_step_results_are_refused_by_shape_and_compared_with_the_parents_own_run():
    spec = {"seed": 5, "batch": 16, "lr": 0.1, "weight_decay": 0.01}
    init, want, losses = step_checks.reference(spec, 2)
    meta, raw = tensor_msg(want)
    honest = CallResult(True, {"weights": meta, "losses": list(losses)}, [raw])
    assert step_checks.mismatch(honest, init, want, losses, 2) == ""
    as_f64 = tensor_msg(want.double())
    cases = {
        "could not read the weights": CallResult(
            True, {"weights": meta, "losses": losses}, [raw[:-4]]
        ),
        "float64": CallResult(True, {"weights": as_f64[0], "losses": losses}, [as_f64[1]]),
        "not a tensor": CallResult(True, {"weights": "a list of floats", "losses": losses}, [raw]),
        "did not move": CallResult(
            True, {"weights": tensor_msg(init)[0], "losses": losses}, [tensor_msg(init)[1]]
        ),
        "not finite": CallResult(
            True, {"weights": meta, "losses": losses}, [tensor_msg(want * float("nan"))[1]]
        ),
        "returned str": CallResult(
            True, {"weights": meta, "losses": [losses[0], "returned str"]}, [raw]
        ),
        "expected 2 losses": CallResult(True, {"weights": meta, "losses": losses[:1]}, [raw]),
    }
    for words, result in cases.items():
        said = step_checks.mismatch(result, init, want, losses, 2)
        assert said and (words in said or (words == "not a tensor" and "could not read" in said)), (
            words,
            said,
        )


def test_the_probe_reads_the_model_itself_and_turns_odd_losses_into_sentences():
    def as_float64(model, inputs, targets, lr, weight_decay):
        model.double()  # the weights would no longer be the grader's float32 numbers
        return 0.0

    worker = type("W", (), {"ns": {"fast_step": as_float64}})()
    with pytest.raises(TypeError, match="float64"):
        lesson10_probes.probe_fast_step(worker, seed=1, batch=8, steps=1, lr=0.1, weight_decay=0.0)

    class Loud(float):
        pass

    import torch

    assert lesson10_probes._plain_loss(torch.tensor(2.5)) == 2.5
    assert lesson10_probes._plain_loss(Loud(1.0)) == "returned Loud"
    assert lesson10_probes._plain_loss([1.0]) == "returned list"


# A slow step that tampers: it replaces the worker's clocks (so that, were the worker believed, its
# step would look 100x faster) and, during its timed calls, raises the nice value of every other
# process of its user (the grader's baseline worker among them), which would slow the baseline on a
# busy machine. Through the real sandbox: the clock patch is flagged and changes nothing, the renice
# is seen before the next baseline call and refuses the speed points.
_TAMPERS = _LOOP_KEPT.replace(
    "def fast_step(",
    """import os
import time

_real = time.perf_counter
time.perf_counter = lambda: _real() / 100
time.monotonic = lambda: _real() / 100


def _renice_the_others():
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.setpriority(os.PRIO_PROCESS, int(pid), 19)  # every process it can reach
            except OSError:
                pass


def fast_step(""",
).replace(
    "    params = list(model.parameters())\n",
    "    _renice_the_others()\n    params = list(model.parameters())\n",
    1,
)


@pytest.mark.slow
def test_through_the_sandbox_a_step_that_patches_the_clock_and_renices_the_baseline_earns_no_speed():
    import os

    if os.geteuid() != 0:
        pytest.skip("the sandbox's separate user and freezer need root")
    verdicts, report = grade(
        LESSON, reference_cells(LESSON, fast_step=_TAMPERS), only=STEP_CELLS, seed=SEED
    )
    assert verdicts["test_fast_step_equal"].passed, verdicts["test_fast_step_equal"].reason
    speed = verdicts["test_fast_step_speed"]
    # the renice never reaches the baseline (another uid: grader.sandbox.launch.GRADER_ONLY) and the
    # patched clock is the worker's own: the half-fixed step is judged on its real speed (~1.1x)
    assert not speed.passed and "must start at" in speed.reason, speed.reason
    assert "priority or cores changed" not in speed.reason
    assert any("time.perf_counter" in flag for flag in report["flags"]), report["flags"]


@pytest.mark.slow
@pytest.mark.untimed  # the equality cell only: bits decide, no clock
def test_through_the_sandbox_the_original_pasted_back_or_imported_earns_no_equality_points():
    """The bit-for-bit rule holds only if the sandboxed worker rounds as the parent does (one thread both
    sides, the same torch): graded through the real sandbox, the pasted and the imported original still end
    on the parent's bits, while the half-fix (the tamper test above) still passes the cell."""
    import os

    if os.geteuid() != 0:
        pytest.skip("the sandbox's separate user and freezer need root")
    for name, source in (("pasted", _PASTED), ("imported", _IMPORTED)):
        verdicts, _ = grade(
            LESSON,
            reference_cells(LESSON, fast_step=source),
            only=["test_fast_step_equal"],
            seed=SEED,
        )
        equal = verdicts["test_fast_step_equal"]
        assert not equal.passed and "bit for bit" in equal.reason, (name, equal.reason)
