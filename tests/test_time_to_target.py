"""A time-to-target grading's clock (grader.timed.measurement): the parent's evaluation of each
committed chunk decides when a run got there, and every evaluation until then is on its clock."""

import pytest

from grader.timed.measurement import GradingSpec, Measurement
from grader.timed.protocol import _begin_of, _hooks


def _measurement(target=0.8):
    spec = GradingSpec("t", "smoke", 100, 100, 10, 2, 2, target=target, learner_hooks={"lr": 0.2})
    m = Measurement(device="cpu", spec=spec)
    for r in range(2):
        for c in range(4):
            m.chunks += [("baseline", r, c, 2.0), ("learner", r, c, 1.0)]
    accuracy = {"baseline": [0.5, 0.7, 0.79, 0.85], "learner": [0.6, 0.81, 0.9, 0.9]}
    for r in range(2):
        for role, accs in accuracy.items():
            m.evaluations += [(role, r, c, a, 0.5) for c, a in enumerate(accs)]
    return m


def test_time_to_target_counts_chunks_and_evaluations_until_the_first_at_target():
    m = _measurement()
    assert m.times_to_target("baseline") == {0: 4 * (2.0 + 0.5), 1: 10.0}
    assert m.times_to_target("learner") == {0: 2 * (1.0 + 0.5), 1: 3.0}


def test_a_run_that_never_reaches_the_target_has_no_time():
    m = _measurement(target=0.95)
    assert m.times_to_target("learner") == {0: None, 1: None}


def test_after_a_second_look_only_its_runs_count():
    m = _measurement()
    m.scored_from = 1
    assert m.times_to_target("baseline") == {1: 10.0}


def test_only_the_learners_side_builds_its_changes():
    spec = _measurement().spec
    assert _hooks(spec, "baseline") == {} and _hooks(spec, "learner") == {"lr": 0.2}

    class Data:
        inputs = __import__("pathlib").Path("/in")
        train_dirs, seeds, init_paths = [inputs / "t0"], [3], [inputs / "i0"]

    assert _begin_of(Data, spec, 0, "learner")["hooks"] == {"lr": 0.2, "epochs": 2}
    assert _begin_of(Data, spec, 0)["hooks"] == {"epochs": 2}


@pytest.mark.parametrize("role", ["baseline", "learner"])
def test_no_evaluation_no_time(role):
    m = _measurement()
    m.evaluations = []
    assert m.times_to_target(role) == {}


def test_every_evaluation_costs_the_same_on_both_clocks():
    """A load spike during one of the parent's evaluations is not the learner's speed."""
    m = _measurement()
    before = m.times_to_target("learner")
    m.evaluations = [e[:4] + (9.0 if e[:3] == ("learner", 0, 0) else e[4],) for e in m.evaluations]
    assert m.times_to_target("learner") == before
