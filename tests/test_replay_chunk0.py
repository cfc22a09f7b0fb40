"""Every scored run's chunk 0 is replayed, as exactly as a drawn chunk (lesson 14's residual, a
seventh review, 2026-12-06): a step made cheaper in the first chunk only, and restored after it, met
only the loose direction and size bound against naive's own chunk 0, and chunk 0 is about half of
lesson 14's scored time.

The replay runs in the baseline worker from the run's initial weights, with the recipe's fresh
optimizer and schedule, on the learner's kept batches (``grader.timed.replay``). The draw is a unit
test; the end-to-end test is one lesson-2 grading at the tiny spec (~15 s here) with two runs: the
first steps on 40% of each batch in chunk 0 only, the second is honest.
"""

import dataclasses
from pathlib import Path

import pytest

from grader import assignments
from grader.frontends.notebook import read_notebook, solution_ids, solution_sources
from grader.timed import protocol
from grader.timed.replay import KEPT_COSINE, KEPT_SIZE_BAND, REPLAYS_PER_RUN, SIZE_BAND, Commits

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("k", [1, 2, 4, 8])  # lesson 3's gpu spec has 2 chunks, lesson 14's 8
def test_chunk_0_is_replayed_in_every_run_and_the_others_are_drawn_among_the_rest(tmp_path, k):
    commits = Commits(tmp_path / "commits")
    seen = set()
    for r in range(200):
        drawn = commits.draw(r, k)
        assert drawn == commits.drawn[r] and drawn[0] == 0, drawn  # its batches are kept
        rest = drawn[1:]
        assert rest == sorted(set(rest)) and set(rest) <= set(range(1, k)), drawn
        assert len(rest) == min(REPLAYS_PER_RUN, k - 1)  # the secret draw keeps its size
        seen |= set(rest)
    assert seen == set(range(1, k))  # every later chunk can still be drawn


# The correct submission's pipeline; in the timed worker's first run only (told apart by the size of
# its training set, then by a count), the grader's trainer steps on 40% of each batch for chunk 0's
# steps and takes its own step back at the last of them (tests/submissions/timed_partial_step.ipynb,
# confined to chunk 0).
CHUNK0_PARTIAL = """

import gc

from effkit.workloads.cifar.recipes import NaiveTrainer

_TIMED_RUNS = []


class FastPipeline(FastPipeline):
    def __iter__(self):
        timed = len(self.labels) > 250  # the probe sets hold at most 250 images
        if timed and not getattr(self, "hooked", False):
            self.hooked = True
            _TIMED_RUNS.append(self)
            for t in gc.get_objects():
                if len(_TIMED_RUNS) == 1 and isinstance(t, NaiveTrainer) and t.pipeline.inner is self:
                    end = round(t.steps_per_epoch / 2)  # chunk 0 of two per epoch
                    step = t._optimizer_step

                    def partial_step(x, y, optimizer, scheduler, _step=step, _t=t, _end=end):
                        k = max(1, int(0.4 * len(y)))
                        _step(x[:k], y[:k], optimizer, scheduler)
                        if _t.step + 1 >= _end:  # chunk 0 ends: the recipe's own step again
                            del _t._optimizer_step

                    t._optimizer_step = partial_step
        yield from super().__iter__()
"""


def _cells(extra: str = "") -> list[tuple[str, str]]:
    ids = solution_ids(read_notebook(ROOT / "solutions" / "lesson2" / "lesson2.ipynb"))
    correct = read_notebook(ROOT / "tests" / "submissions" / "correct.ipynb")
    return [
        (c.grade_id, c.source + (extra if c.grade_id == "fast_pipeline" else ""))
        for c in solution_sources(correct, ids)
    ]


@pytest.mark.slow
@pytest.mark.untimed
def test_a_cheaper_chunk_0_is_caught_by_its_replay_and_an_honest_one_passes():
    a = assignments.get("lesson2")
    spec = dataclasses.replace(a.specs["tiny"], repeats=2)  # two chunks a run: both replayed
    m = protocol.measure(a, _cells(CHUNK0_PARTIAL), spec, "cpu", progress=lambda _: None)
    assert m.error is None and m.problems == [], (m.error, m.problems)
    checks = {(w["run"], w["chunk"], w["against"]): w for w in m.work_checks}
    # what caught nothing before: chunk 0 against naive's own is within the loose bounds
    first = checks[0, 0, "baseline"]
    assert first["cosine"] >= spec.first_cosine, first
    assert SIZE_BAND[0] <= first["ratio"] <= SIZE_BAND[1], first
    # the replay of its kept batches from the run's initial weights parts from it (cosine 0.58,
    # size 1.45x here, seven tensors apart; before, run 1's chunk 1 alone was replayed, exactly)
    partial = checks.get((0, 0, "replay of your batches"))
    assert partial is not None and not _exact(partial), m.work_checks
    assert any(
        p.startswith("run 1, timed chunk 1:") and "unlike the grader's replay" in p
        for p in m.work_problems
    ), m.work_problems
    # the honest run's chunk 0 replays exactly (1.0000000, 1.000x here), as both chunk 1s do
    for r, c in ((1, 0), (0, 1), (1, 1)):
        honest = checks[r, c, "replay of your batches"]
        assert _exact(honest), honest
    assert not any(p.startswith("run 2,") for p in m.work_problems), m.work_problems


def _exact(check: dict) -> bool:
    """A replay within the kept-batch bounds, its farthest tensor too."""
    lo, hi = KEPT_SIZE_BAND
    _, tensor_cosine, tensor_ratio = check["tensor"]
    return all(
        cos >= KEPT_COSINE and lo <= ratio <= hi
        for cos, ratio in ((check["cosine"], check["ratio"]), (tensor_cosine, tensor_ratio))
    )
