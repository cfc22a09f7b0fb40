"""Lesson 12's exercise, graded out of the kernel: a search policy that only chooses configurations and stops
trials, while the grader trains, measures and charges every epoch itself.

The reference's full marks through the sandbox and the stub's 0 are the instructor cycle's
(tests/test_instructor_cycle.py). Here every policy is graded in this process on its cell data: the probe
functions the worker would run, then the parent's checks on what they return (the sandboxed path is the
reference's). All share one task seed, so the grader's grid (the costly part) runs once per test process.
"""

import json
import random
from pathlib import Path

import pytest
from exercise_cells import InProcess, grade_in_process, reference_cells  # noqa: E402

from grader import assignments
from grader.assignments.lesson12 import hpo_task, search_checks
from grader.assignments.lesson12 import probes as lesson12_probes
from grader.scoring.checks import CellVerdict, CheckFailed, Context, ProbeSession, to_python

LESSON = "lesson12"
SEED = 1  # one grading's draws for every policy here (task, trial seeds, final seeds)


class Workers(InProcess):
    """``InProcess`` whose ``close()`` stands for the sandbox's (``search_checks._fresh_worker``): the next call
    finds the cells run again in a fresh namespace, as a new worker would. What a new process resets beyond the
    namespace (a module's global, the environment, as root its /tmp) is the sandboxed test's below."""

    def __init__(self, cells: list[tuple[str, str]]):
        super().__init__(assignments.get(LESSON), lesson12_probes, cells)
        self.starts = 1

    def close(self) -> None:
        InProcess.__init__(self, assignments.get(LESSON), lesson12_probes, self.cells)
        self.starts += 1


def _grade(
    search_source: str | None = None, only=("test_search", "test_pruning"), seed: int = SEED
) -> dict[str, CellVerdict]:
    """``only``'s checks on the reference cells (``search`` swapped), each drawing from a fresh
    ``random.Random(seed)``; a raising cell is recorded, as the worker does."""
    cells = reference_cells(LESSON, **({"search": search_source} if search_source else {}))
    session, lesson = Workers(cells), assignments.get(LESSON)
    return {gid: grade_in_process(lesson, session, [gid], random.Random(seed))[gid] for gid in only}


# -- policies: the grader runs the search, trains every trial and judges the choice ------------------

_REF = dict(reference_cells(LESSON))["search"]
_WEIGHT_DECAY_GRID = '''
class Search:
    """A grid over weight decay at SGD's default learning rate: the whole budget spent on one axis."""
    def __init__(self, space, budget, max_epochs, seed):
        self.grid = [10 ** (-6 + 5 * i / 15) for i in range(16)]
    def ask(self, trial):
        return {"lr": 1e-3, "weight_decay": self.grid[trial % len(self.grid)]}
    def report(self, trial, epoch, score):
        return False
'''
_OUTSIDE = _REF.replace(
    'FloatDistribution(dim["low"], dim["high"]', 'FloatDistribution(dim["low"], 10 * dim["high"]'
)
# the reference still choosing the batch size it was once allowed to: refused at its first ask
_OWN_BATCH = _REF.replace(
    "return dict(self.running[trial].params)",
    "return dict(self.running[trial].params, batch_size=32)",
)
_PRUNE_ALL = '''
class Search:
    """Random configurations, every trial stopped after its first epoch: all exploration, no answer."""
    def __init__(self, space, budget, max_epochs, seed):
        self.rng, self.space = random.Random(seed), space
    def ask(self, trial):
        s = self.space
        return {"lr": math.exp(self.rng.uniform(math.log(s["lr"]["low"]), math.log(s["lr"]["high"]))),
                "weight_decay": math.exp(self.rng.uniform(math.log(s["weight_decay"]["low"]),
                                                          math.log(s["weight_decay"]["high"])))}
    def report(self, trial, epoch, score):
        return True
'''
# issue 50: the lesson's printed best configuration run to completion, every other trial stopped after
# one epoch (pruning "saved" without searching). It passed both cells while every task's best LR lay in
# 0.18-0.56; the loss scale drawn per task (hpo_task.LOSS_SCALES) moves it by up to 2.4 decades, and each
# grading searches a pair of tasks 16x apart in scale (hpo_task.pair), so it misses one of every pair.
_LESSONS_BEST = (
    _PRUNE_ALL.replace(
        "    def ask(self, trial):\n",
        '    def ask(self, trial):\n        if trial == 0:\n            return {"lr": 0.355, "weight_decay": 5.6e-4}\n',
    )
    .replace("return True", "return trial != 0")
    .replace(
        "Random configurations, every trial stopped after its first epoch: all exploration, no answer.",
        "The lesson's best run to the end; random others, each stopped after one epoch, as 'pruning'.",
    )
)

# a plan fixed in advance that knows the family: the lesson's best slid along the loss scales ((0.355 / c,
# 5.6e-4 * c), c 2.1x apart over 0.3-54) run to the end, then one-epoch trials stopped unread for the
# "saving". Its finished rungs are a coarse grid the grader chooses from, so the search may pass; its stops
# read no score, and the same seed traces the same trials on both tasks of the pair
_FIXED_LADDER = '''
class Search:
    """Eight configurations fixed in advance run to the end, then one-epoch trials stopped unread."""
    def __init__(self, space, budget, max_epochs, seed):
        self.ladder = [{"lr": 0.355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 2.1**k for k in range(8))]
    def ask(self, trial):
        return self.ladder[trial] if trial < len(self.ladder) else {"lr": 0.01, "weight_decay": 1e-4}
    def report(self, trial, epoch, score):
        return trial >= len(self.ladder)
'''

# the same ladder with its filler drawn outside the seed (the review's submission, verbatim): the two tasks'
# traces part, so the trace check passes; its stops still read no score, and a stop made whatever the scores
# lands in an epoch's top quarter as often as the fillers fill it, so too few of its saved epochs come from
# trials that trailed (README: at most 79% of them over 160 tasks, against the 85% required)
_BLIND_LADDER_URANDOM = """
import random
class Search:
    def __init__(s, space, budget, max_epochs, seed):
        s.L = [{"lr": .355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 2.1**k for k in range(8))]
        s.r = random.SystemRandom()
    def ask(s, t):
        return s.L[t] if t < 8 else {"lr": 10 ** s.r.uniform(-3, .4), "weight_decay": 1e-4}
    def report(s, t, e, sc):
        return t >= 8
"""
# the same blind stops with a deterministic filler that reads the last score only to vary its traces
_BLIND_LADDER_LAST_SCORE = """
class Search:
    def __init__(self, space, budget, max_epochs, seed):
        self.ladder = [{"lr": .355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 2.1**k for k in range(8))]
        self.last = 0.5
    def ask(self, trial):
        if trial < len(self.ladder):
            return self.ladder[trial]
        return {"lr": 10 ** (-3 + 3.4 * (self.last * 1000 % 1)), "weight_decay": 1e-4}
    def report(self, trial, epoch, score):
        self.last = score
        return trial >= len(self.ladder)
"""
BLIND = "came from trials that trailed at the epoch they were stopped"
# the README's residual of the evidence rule: a denser ladder (11 rungs 1.7x apart, 0.3-60) run to the end and
# 21 fillers at the space's smallest learning rates (1e-3-2e-3, weight decay 1e-6, jittered from os.urandom),
# stopped unread. The fillers trail on every task of the family, so ~95% of its saved epochs came from trailing
# trials and it cleared MIN_EVIDENCE and MIN_SAVED on 15 of 24 pairs; its stops still read nothing, and a
# filler replayed as the best of its epoch is stopped all the same
_DENSE_LADDER_LOW_LR_FILLER = """
import random
class Search:
    def __init__(s, space, budget, max_epochs, seed):
        s.L = [{"lr": .355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 1.7**k for k in range(11))]
        s.r = random.SystemRandom()
    def ask(s, t):
        return s.L[t] if t < 11 else {"lr": 10 ** s.r.uniform(-3, -2.7), "weight_decay": 1e-6}
    def report(s, t, e, sc):
        return t >= 11
"""
REPLAYED = "your policy still stopped it there"
# The dense ladders below are there to show the replay catching what the evidence rule passes, so they are graded
# on a pair where that rule's premise holds with room: on seed 1's first task only 6 of the 11 rungs beat the
# fillers at epoch 1 (8 of 32 scores needed above), the fillers tie at chance, and whether they trail turned on
# which filler a host's rounding lifts off the tie (86-90% of the saved epochs here, 81% on a CI host: "came from
# trials that trailed"). On LADDER_SEED the rungs above every filler were 9 and 10 of the 8 needed (seeds 1-36, AMX
# Xeon, 2026-12-06), so every filler trails whatever the tie does
LADDER_SEED = 28
REPLAY_CAUGHT = (
    "dense_ladder_low_lr_filler",
    "dense_ladder_counts_its_searches",
    "dense_ladder_times_its_reports",
    "dense_ladder_reads_the_replays_course",
)
# the replay's evasion (fifth review): the same ladder, counting its instances in a class attribute, stops its
# fillers in the first two searches (the pair's) and in none after (the replays). While every search and replay
# ran in one worker it passed the replay wherever the ladder cleared the shares (README); each now starts in a
# worker of its own (search_checks._fresh_worker), where every instance is the first
_DENSE_LADDER_COUNTS_ITS_SEARCHES = """
import random
class Search:
    n = 0
    def __init__(s, space, budget, max_epochs, seed):
        Search.n += 1
        s.replay = Search.n > 2
        s.L = [{"lr": .355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 1.7**k for k in range(11))]
        s.r = random.SystemRandom()
    def ask(s, t):
        return s.L[t] if t < 11 else {"lr": 10 ** s.r.uniform(-3, -2.7), "weight_decay": 1e-6}
    def report(s, t, e, sc):
        return t >= 11 and not s.replay
"""

# the replay's evasion by the clock (sixth review): the same ladder stops its fillers only where the grader took
# time between its ask and its report (it trained an epoch), as in a search; the replays reported back to back
# until each trained its recorded trials again (search_checks.replay_stops_again)
_DENSE_LADDER_TIMES_ITS_REPORTS = """
import random
import time
class Search:
    def __init__(s, space, budget, max_epochs, seed):
        s.L = [{"lr": .355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 1.7**k for k in range(11))]
        s.r = random.SystemRandom()
        s.asked = time.perf_counter()
    def ask(s, t):
        s.asked = time.perf_counter()
        return s.L[t] if t < 11 else {"lr": 10 ** s.r.uniform(-3, -2.7), "weight_decay": 1e-6}
    def report(s, t, e, sc):
        return t >= 11 and time.perf_counter() - s.asked > 5e-4
"""

# the replay's evasion by its course (seventh review): the ladder stops each filler at epoch 1 or 2 by a coin drawn
# outside the seed; in a replay the coin can keep a filler the search stopped at epoch 1, and the grader then asked
# the next trial at once, a call no search makes after a trial kept mid-way: the ladder read that as a replay and
# stopped nothing blind. A kept trial now trains on and reports its own scores (search_checks.replay_stops_again)
_DENSE_LADDER_READS_THE_REPLAYS_COURSE = """
import random
class Search:
    def __init__(s, space, budget, max_epochs, seed):
        s.L = [{"lr": .355 / c, "weight_decay": 5.6e-4 * c} for c in (0.3 * 1.7**k for k in range(11))]
        s.r, s.m, s.last, s.replay = random.SystemRandom(), max_epochs, None, False
    def ask(s, t):
        if s.last is not None and not s.last[1] and s.last[0] < s.m:
            s.replay = True  # a trial kept mid-way, and yet the next one asked: only a replay does that
        return s.L[t - 6] if 6 <= t < 17 else {"lr": 10 ** s.r.uniform(-3, -2.7), "weight_decay": 1e-6}
    def report(s, t, e, sc):  # fillers first (0-5), so that most probed fillers have a coin tossed before them
        stop = not 6 <= t < 17 and not s.replay and (e >= 2 or s.r.random() < 0.5)
        s.last = (e, stop)
        return stop
"""

# an honest search whose asks are as fixed by its seed as the ladder's: seeded random configurations on a log
# scale, stopped by successive halving written by hand. Its stops read the scores, so its traces part
_RANDOM_HALVING = '''
class Search:
    """Random search on a log scale; at epochs 1 and 3 a trial outside the top third so far stops."""
    def __init__(self, space, budget, max_epochs, seed):
        self.rng, self.space, self.rungs = random.Random(seed), space, {1: [], 3: []}
    def ask(self, trial):
        return {name: math.exp(self.rng.uniform(math.log(dim["low"]), math.log(dim["high"])))
                for name, dim in self.space.items()}
    def report(self, trial, epoch, score):
        if epoch not in self.rungs:
            return False
        seen = self.rungs[epoch]
        seen.append(score)
        return len(seen) > 3 and score < sorted(seen, reverse=True)[len(seen) // 3]
'''

POLICIES = {
    # Optuna TPE + successive halving: within the margin of the grid, most of the budget saved
    "reference": (
        _REF,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (True, "saved by stopping"),
        },
    ),
    # seeded random search with hand-written successive halving: the same asks on both tasks, other stops
    "random_search_halving": (
        "import math\nimport random\n" + _RANDOM_HALVING,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (True, "not a plan fixed by the seed alone"),
        },
    ),
    # the same TPE never stopping a trial: a good choice, nothing saved
    "no_pruning": (
        _REF.replace("if t.should_prune():", "if False:"),
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, "never stopped a trial"),
        },
    ),
    # a grid over the axis that matters least, at a learning rate far too small
    "weight_decay_grid": (
        _WEIGHT_DECAY_GRID,
        {
            "test_search": (False, "the learning rate is the axis that matters"),
            "test_pruning": (False, "only when the search still finds"),
        },
    ),
    # learning rates sampled from a range ten times too wide: refused at the first one outside
    "outside_the_space": (
        _OUTSIDE,
        {
            "test_search": (False, "outside the search space"),
            "test_pruning": (False, "outside the search space"),
        },
    ),
    # a batch size chosen by the search, which the lesson holds fixed at 128: refused with the reason
    "asks_for_a_batch_size": (
        _OWN_BATCH,
        {
            "test_search": (False, "held fixed at 128 in this round, as in the lesson"),
            "test_pruning": (False, "held fixed at 128 in this round, as in the lesson"),
        },
    ),
    # the lesson's best configuration copied, a fake search around it pruned at once: the task moved
    "copies_the_lessons_best": (
        "import math\nimport random\n" + _LESSONS_BEST,
        {
            "test_search": (False, "only one trial ran to the end"),
            "test_pruning": (False, "only when the search still finds"),
        },
    ),
    # a ladder fixed in advance finished, blind one-epoch trials as "pruning": a grid's search, no pruning
    "fixed_ladder_stops_blind": (
        _FIXED_LADDER,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, "its stops did not depend on what it observed"),
        },
    ),
    # the ladder with blind stops and a filler drawn from os.urandom: the traces part, the stops read nothing
    "blind_ladder_urandom": (
        _BLIND_LADDER_URANDOM,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, BLIND),
        },
    ),
    # the ladder with blind stops and a filler that follows the last score trivially
    "blind_ladder_last_score": (
        _BLIND_LADDER_LAST_SCORE,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, BLIND),
        },
    ),
    # the evidence rule's residual: fillers known to trail on every task, stopped unread; the replay catches it
    "dense_ladder_low_lr_filler": (
        _DENSE_LADDER_LOW_LR_FILLER,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, REPLAYED),
        },
    ),
    # the same ladder telling the replays from the searches by counting its instances: each starts afresh
    "dense_ladder_counts_its_searches": (
        _DENSE_LADDER_COUNTS_ITS_SEARCHES,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, REPLAYED),
        },
    ),
    # the same ladder telling the replays from the searches by the gaps between its calls: each replay trains
    "dense_ladder_times_its_reports": (
        _DENSE_LADDER_TIMES_ITS_REPORTS,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, REPLAYED),
        },
    ),
    # the same ladder telling a replay by a call only a replay made: a kept trial now trains on
    "dense_ladder_reads_the_replays_course": (
        _DENSE_LADDER_READS_THE_REPLAYS_COURSE,
        {
            "test_search": (True, "below the grid's best"),
            "test_pruning": (False, REPLAYED),
        },
    ),
    # every trial stopped after its first epoch: nothing complete, nothing to choose
    "stops_everything": (
        "import math\nimport random\n" + _PRUNE_ALL,
        {
            "test_search": (False, "no trial ran to the end"),
            "test_pruning": (False, "no trial ran to the end"),
        },
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", POLICIES)
def test_policies_are_scored_on_the_graders_own_search(name):
    source, expected = POLICIES[name]
    assert name == "reference" or source != _REF, f"{name}: the mistake did not change the cell"
    verdicts = _grade(source, seed=LADDER_SEED if name in REPLAY_CAUGHT else SEED)
    for gid, (passes, words) in expected.items():
        v = verdicts[gid]
        text = v.reason if not v.passed else " ".join(v.lines)
        assert v.passed == passes and words in text, (gid, text)


def test_validation_refuses_bools_nan_unknown_keys_and_another_batch_size():
    good = {"lr": 0.05, "weight_decay": 1e-4}
    assert hpo_task.validate(good) == good
    # naming the held batch size is harmless: dropped, every trial trains at it anyway
    assert hpo_task.validate({**good, "batch_size": 128}) == good
    assert hpo_task.validate({**good, "batch_size": 128.0}) == good
    for bad in (
        {**good, "batch_size": 64},
        {**good, "batch_size": 128.5},
        {**good, "batch_size": True},
        {**good, "lr": float("nan")},
        {**good, "lr": True},
        {**good, "lr": 0.0},
        {**good, "weight_decay": 1.0},
        {**good, "momentum": 0.9},
        {"lr": 0.05},
        {"not_json": "Tensor"},
        [0.05, 1e-4],
    ):
        with pytest.raises(CheckFailed):
            hpo_task.validate(bad)
    with pytest.raises(CheckFailed, match="held fixed at 128 in this round"):
        hpo_task.validate({**good, "batch_size": 512})


def test_every_trial_trains_at_the_held_batch_size():
    trial = hpo_task.Trial(987, {"lr": 0.1, "weight_decay": 1e-4}, seed=1)
    assert trial.config["batch_size"] == hpo_task.FIXED["batch_size"] == 128
    assert "batch_size" not in hpo_task.SPACE  # what the learner's Search is given to choose from
    assert all(set(config) == set(hpo_task.SPACE) for config in hpo_task.grid_configs())


def test_only_json_crosses_and_a_stop_is_one_bool():
    class Worker:
        ns = {
            "Search": type(
                "Search",
                (),
                {
                    "__init__": lambda self, **kw: None,
                    "ask": lambda self, trial: {"lr": object()},
                    "report": lambda self, trial, epoch, score: "yes",
                },
            )
        }

    w = Worker()
    lesson12_probes.probe_start(w, space=hpo_task.SPACE, budget=1, max_epochs=9, seed=0)
    assert lesson12_probes.probe_ask(w, trial=0)[0] == {"config": {"not_json": "lr = object"}}
    with pytest.raises(CheckFailed, match="lr = object: convert numpy numbers"):
        hpo_task.validate({"not_json": "lr = object"})
    assert lesson12_probes.probe_report(w, trial=0, epoch=1, score=0.5)[0] == {"stop": True}


def test_a_budget_cut_is_not_counted_as_pruning():
    run = search_checks.SearchRun(task_seed=0, spent=12)
    run.trials = [
        {"config": {}, "scores": [0.5] * 9, "status": "complete"},
        {"config": {}, "scores": [0.5] * 3, "status": "cut by the budget"},
    ]
    assert run.unpruned_cost == 12 and run.saved == 0.0
    run.trials.append({"config": {}, "scores": [0.5], "status": "stopped"})
    run.spent = 13
    assert run.unpruned_cost == 21 and run.saved == pytest.approx(1 - 13 / 21)


def _run(*trials: tuple[list[float], str]) -> search_checks.SearchRun:
    run = search_checks.SearchRun(task_seed=0)
    run.trials = [
        {"config": {"lr": 0.05, "weight_decay": 1e-4}, "scores": list(sc), "status": st, "seed": i}
        for i, (sc, st) in enumerate(trials)
    ]
    run.spent = sum(len(t["scores"]) for t in run.trials)
    return run


def test_a_stop_is_evidence_only_when_the_trial_trailed_at_its_epoch():
    done = [0.6] * 8 + [0.8]
    # four trials at epoch 1: the two stopped ones have at least a quarter of the scores above them
    run = _run(
        (done, "complete"), ([0.7] + done[1:], "complete"), ([0.3], "stopped"), ([0.5], "stopped")
    )
    assert run.evidence() == (16, 16)
    # a stop of the epoch's best trial is no evidence, whatever else it saved
    run = _run((done, "complete"), ([0.3], "stopped"), ([0.9], "stopped"), ([0.5], "stopped"))
    assert run.evidence() == (16, 24)
    # a stop at epoch 3 is judged among the scores reported at epoch 3 and saves 6 epochs
    run = _run((done, "complete"), ([0.9, 0.9, 0.5], "stopped"), ([0.1], "stopped"))
    assert run.evidence() == (6 + 8, 6 + 8)
    # ties are not above one another: trials all at chance (diverged) did not trail each other
    chance = 1.0 / hpo_task.CLASSES
    run = _run(*[([chance], "stopped")] * 5, (done, "complete"))
    assert run.evidence() == (0, 40)
    # nothing stopped, nothing saved
    assert _run((done, "complete")).evidence() == (0, 0)


# two stopping rules on the same asks: one reads the score (stops a trial whose first epoch is under the best
# first epoch so far), the other stops every trial after the first two unread; both stop trials 2 and 3 on the
# record below, where those trailed
_READS = """
class Search:
    def __init__(self, space, budget, max_epochs, seed):
        self.best = {}
    def ask(self, trial):
        return {"lr": 0.1, "weight_decay": 1e-4}
    def report(self, trial, epoch, score):
        self.best[epoch] = max(self.best.get(epoch, score), score)
        return epoch == 1 and score < self.best[epoch]
"""
_UNREAD = """
class Search:
    def __init__(self, space, budget, max_epochs, seed):
        pass
    def ask(self, trial):
        return {"lr": 0.1, "weight_decay": 1e-4}
    def report(self, trial, epoch, score):
        return trial >= 2
"""


def test_a_stop_replayed_as_the_best_of_its_epoch_follows_the_score_or_not():
    done = [0.6] * 8 + [0.8]
    run = _run(
        (done, "complete"), ([0.7] + done[1:], "complete"), ([0.3], "stopped"), ([0.5], "stopped")
    )
    run.policy_seed = 7
    assert search_checks.best_at(run)[1] == 0.7
    for source, blind in ((_READS, False), (_UNREAD, True)):
        session = Workers([("search", source)])
        ctx = Context(session, random.Random(0))
        assert [search_checks.replay_stops_again(ctx, run, n) for n in (2, 3)] == [blind, blind]
        assert session.starts == 3  # each replay on a fresh worker
    # the draw: stopped trials only, without replacement, at most PROBES of them
    assert search_checks.probed_stops(run, random.Random(0)) == [2, 3]
    many = _run((done, "complete"), *[([0.3], "stopped")] * 5)
    drawn = search_checks.probed_stops(many, random.Random(0))
    assert len(drawn) == search_checks.PROBES == len(set(drawn)) and 0 not in drawn


# what a policy could carry from one search to the next to tell a replay from a search: a class attribute, a
# module's global, the environment, files in its home, /tmp and /dev/shm; ask() returns what it found
_COUNTS_EVERYWHERE = """
import os
import sys
class Search:
    n = 0
    def __init__(self, space, budget, max_epochs, seed):
        Search.n += 1
        sys.effkit_searches = getattr(sys, "effkit_searches", 0) + 1
        os.environ["EFFKIT_SEARCHES"] = str(int(os.environ.get("EFFKIT_SEARCHES", "0")) + 1)
        self.seen = {"class": Search.n, "module": sys.effkit_searches, "env": int(os.environ["EFFKIT_SEARCHES"])}
        for where in (os.path.expanduser("~"), "/tmp", "/dev/shm"):
            path = os.path.join(where, "effkit-searches-TOKEN")
            try:
                with open(path) as f:
                    k = int(f.read())
            except OSError:
                k = 0
            try:
                with open(path, "w") as f:
                    f.write(str(k + 1))
                self.seen[where] = k + 1
            except OSError:
                pass
    def ask(self, trial):
        return self.seen
    def report(self, trial, epoch, score):
        return False
"""


def test_each_search_and_replay_starts_in_a_worker_that_remembers_nothing(tmp_path):
    """Through the sandbox: ``search_checks._fresh_worker`` before each ``Search`` gives it a new worker, where a
    class attribute, a module's global and the environment read as never touched; as root also every file it
    wrote (its /tmp, /dev/shm and home are tmpfs of its own). Not as root the host's /tmp is shared, which the
    session says in ``unavailable``: files are then asserted only where it does not."""
    token = tmp_path.name
    lesson = assignments.get(LESSON)
    cells = [("search", to_python(_COUNTS_EVERYWHERE.replace("TOKEN", token))[0])]
    session = ProbeSession(lesson.probes, lesson.trusted_cells(), cells, list(lesson.names))
    ctx = Context(session, random.Random(0))
    seen = []
    try:
        for _ in range(3):
            search_checks._fresh_worker(ctx)
            space = dict(hpo_task.SPACE)
            start = session.call("start", 20, space=space, budget=120, max_epochs=9, seed=1)
            assert start.ok, start.failure
            seen.append(session.call("ask", 20, trial=0).data["config"])
    finally:
        session.close()
        for where in ("/tmp", "/dev/shm"):
            (Path(where) / f"effkit-searches-{token}").unlink(missing_ok=True)
    private = not any("private /tmp" in note for note in session.unavailable)
    for found in seen:
        assert (found["class"], found["module"], found["env"]) == (1, 1, 1), seen
        if private:
            assert set(found) >= {"/tmp", "/dev/shm"} and set(found.values()) == {1}, seen


def test_a_trial_trains_even_when_started_under_no_grad():
    import torch

    with torch.no_grad():
        trial = hpo_task.Trial(987, {"lr": 0.1, "weight_decay": 1e-4}, seed=1)
        scores = [trial.step() for _ in range(2)]
    assert scores[-1] > 1.0 / hpo_task.CLASSES + 0.1, scores


def test_a_slow_policy_fails_on_the_parents_clock(monkeypatch):
    monkeypatch.setattr(search_checks, "POLICY_SECONDS", 0.3)
    slow = _REF.replace(
        "def ask(self, trial):",
        "def ask(self, trial):\n        import time\n        time.sleep(0.2)",
    )
    verdict = _grade(slow, only=("test_search",))["test_search"]
    assert not verdict.passed and "your policy took" in verdict.reason, verdict.reason


# issue 50, second review: grading seed 2 draws the scale 0.91, where the lesson's best lies within MARGIN
# of the grid's best (README), so with one task per grading the shortcut earned both cells there (-1.0 pp,
# 88% "saved"); its pair's second task (scale 14.6) has its best learning rate 16x away.
LANDS_ON_THE_LESSONS_BEST = 2
SAME_FINISHED = "ran the same configurations to the end on both tasks"


@pytest.mark.slow
def test_the_lessons_best_earns_nothing_on_the_draw_where_it_is_best():
    verdicts = _grade(
        "import math\nimport random\n" + _LESSONS_BEST, seed=LANDS_ON_THE_LESSONS_BEST
    )
    search, pruning = verdicts["test_search"], verdicts["test_pruning"]
    assert (search.passed, pruning.passed) == (False, False), (search.lines, pruning.lines)
    # it passes the first task (scale 0.915) and misses the second, 16x away
    assert "task 2 of 2 (loss scale 14.6): only one trial ran to the end" in search.reason, (
        search.reason
    )
    assert SAME_FINISHED in search.reason and "-1.0 pp below the grid's best" in search.reason, (
        search.reason
    )
    assert "task 1 of 2 (loss scale 0.915): only one trial" not in search.reason, search.reason


@pytest.mark.slow
def test_no_configuration_fixed_in_advance_passes_both_tasks():
    """The best a fixed configuration can be: the grid's best of the grading's first task, as if known
    beforehand. It is best on that task and 16x off on the other."""
    first, _ = hpo_task.pair(random.Random(SEED).randrange(1 << 20))
    best, _, _ = hpo_task.grid_search(first)
    oracle = _LESSONS_BEST.replace('{"lr": 0.355, "weight_decay": 5.6e-4}', json.dumps(best))
    assert oracle != _LESSONS_BEST
    verdicts = _grade("import math\nimport random\n" + oracle)
    search = verdicts["test_search"]
    assert not search.passed and not verdicts["test_pruning"].passed, search.lines
    # it passes the task it was tuned for (scale 17.9) and misses its partner (1.12)
    assert "task 2 of 2 (loss scale 1.12): only one trial" in search.reason, search.reason
    assert "task 1 of 2 (loss scale 17.9): only one trial" not in search.reason, search.reason
    assert SAME_FINISHED in search.reason, search.reason


def test_a_pairs_scales_lie_16x_apart_inside_the_range_and_its_first_is_drawn_as_before():
    low, high = hpo_task.LOSS_SCALES
    rng, directions = random.Random(0), set()
    for seed in [rng.randrange(1 << 20) for _ in range(2000)]:
        first, second = hpo_task.pair(seed)
        a, b = hpo_task.loss_scale(first), hpo_task.loss_scale(second)
        assert first == seed and second != seed and low <= a <= high and low <= b <= high
        assert max(a, b) / min(a, b) == pytest.approx(hpo_task.PAIR_RATIO)
        directions.add(b > a)
    assert directions == {True, False}
    # grading seeds 1 and 2 (README's rows) draw their first task's scale as before the pair
    assert [round(hpo_task.loss_scale(random.Random(g).randrange(1 << 20)), 2) for g in (1, 2)] == [
        17.94,
        0.91,
    ]
