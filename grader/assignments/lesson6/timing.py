"""Lesson 6: the checkpointing overhead, timed on the very runs the fault injection judges.

No run of the learner's is untimed, so code cannot save every step when judged and rarely when
timed. Positions are claims; ``checks`` kills a worker whose steps are not consecutive.
"""

from __future__ import annotations

import threading
import time

from grader.assignments.lesson6.task import MAX_EPOCHS, Task, TrainData
from grader.kit.checks import ProbeSession

BARE_SECONDS = (
    900.0  # the baseline's one call spans the whole fault injection (worker starts included)
)
WAIT_SECONDS = 60.0  # one drive: two baseline segments, a fraction of a second normally
SEGMENT = Task.steps_per_epoch // 2  # steps per timed window
_clock = time.perf_counter


def batch_reply(data: TrainData, epoch: int, index: int) -> dict:
    """A training batch as plain JSON lists (a few hundred integers: no tensor blobs needed)."""
    x, y = data.batch(epoch, index)
    return {"at": [epoch, index], "x": x.tolist(), "y": y.tolist()}


def next_batch(data: TrainData, step: int) -> dict:
    """The go-ahead for ``step`` carries the batch of the step after it: one round trip a step, as
    before the batches moved to the parent (a second one narrowed the overhead check's margin)."""
    return batch_reply(data, (step + 1) // Task.steps_per_epoch, (step + 1) % Task.steps_per_epoch)


class _Stop(Exception):
    """Raised in the baseline's serve callback once the grading no longer needs it."""


class EpochTimer:
    def __init__(
        self, probes: str, setup: list[tuple[str, str]], seed: int, data: TrainData
    ) -> None:
        self.session = ProbeSession(
            probes, setup, [], [], grader_only=True
        )  # refuses learner cells
        self.seed, self.data = seed, data
        self.bare: dict[
            int, float
        ] = {}  # segment -> seconds, the grader's loop without checkpoints
        self.learner: dict[int, float] = {}  # segment -> seconds, the learner's train
        self.failure = ""  # the baseline's own failure (a grader bug)
        self.unavailable: list[str] = []
        self._cond = threading.Condition()
        self._allowed = 0  # the baseline may start the segments below this
        self._at = -1  # the segment start the baseline waits at
        self._finished = self._closing = False
        self._bare_go: dict[int, float] = {}
        self._go: tuple[int, int, float] | None = (
            None  # the learner's last segment start: (life, segment, time)
        )
        self._thread = threading.Thread(target=self._run, daemon=True, name="lesson6-baseline")
        self._thread.start()

    # -- the baseline's thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            r = self.session.call(
                "bare", BARE_SECONDS, self._serve, seed=self.seed, max_epochs=MAX_EPOCHS
            )
            failure = "" if r.ok else r.failure
        except _Stop:
            failure = ""
        except Exception as err:  # noqa: BLE001 - reported as the grader's own failure
            failure = repr(err)[:300]
        with self._cond:
            self.failure, self._finished = failure, True
            self._cond.notify_all()

    def _serve(self, msg: dict, blobs=()) -> dict:
        if msg.get("kind") == "batch":  # the grader's own probe asks in order
            return batch_reply(self.data, msg["epoch"], msg["index"])
        step = msg["epoch"] * Task.steps_per_epoch + msg["index"]  # the grader's own probe
        if step % SEGMENT:
            return next_batch(self.data, step)
        seg, now = step // SEGMENT, _clock()
        with self._cond:
            if seg - 1 in self._bare_go:
                self.bare[seg - 1] = now - self._bare_go[seg - 1]
            self._at = seg
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._allowed > seg or self._closing)
            if self._closing:
                raise _Stop
        reply = next_batch(self.data, step)
        self._bare_go[seg] = _clock()
        return reply

    # -- the parent's side ------------------------------------------------------------------------
    def ready(self, timeout_s: float) -> bool:
        """Wait until the baseline stands at its first step (its worker started, untimed)."""
        with self._cond:
            return (
                self._cond.wait_for(lambda: self._at >= 0 or self._finished, timeout_s)
                and not self._finished
            )

    def _drive(self, through: int, box) -> None:
        """Let the baseline run its segments up to ``through``; the learner's worker frozen meanwhile."""
        with self._cond:
            if self._finished or self._at > through:
                return
        cgroup = getattr(box, "cgroup", None)
        frozen = cgroup is not None and cgroup.freeze(True)
        if box is not None and not frozen:
            note = "the learner's worker frozen while the baseline runs (no cgroup freezer)"
            if note not in self.unavailable:
                self.unavailable.append(note)
        try:
            with self._cond:
                self._allowed = max(self._allowed, through + 1)
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._finished or self._at > through, WAIT_SECONDS)
        finally:
            if cgroup is not None:
                cgroup.freeze(False)

    def step(self, life: int, step: int, first: int, box) -> None:
        """The learner's worker ``life`` (whose first step was ``first``) asks to train ``step``:
        at a segment start, its previous segment ends here, if it trained all of it warm."""
        if step % SEGMENT:
            return
        now, seg = _clock(), step // SEGMENT
        if (
            self._go is not None
            and self._go[:2] == (life, seg - 1)
            and first < self._go[1] * SEGMENT
        ):
            self.learner[seg - 1] = now - self._go[2]
        self._drive(seg if seg % 2 == 0 else seg - 1, box)  # ABBA: even segments the baseline first
        self._go = (life, seg, _clock())  # after the thaw: the go-ahead follows at once

    def pairs(self) -> list[tuple[float, float]]:
        """(baseline, learner) seconds of every segment both timed, in order."""
        if self.learner:
            self._drive(max(self.learner), None)  # the odd segments the baseline runs second
        return [(self.bare[e], self.learner[e]) for e in sorted(self.learner) if e in self.bare]

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=WAIT_SECONDS)
        self.session.close()
