"""Lesson 6 - never lose a run: a crash-safe training loop graded by fault injection.

**What it does.** The learner writes ``train(task, ckpt_dir)`` (see :mod:`grader.assignments.lesson6.task`):
resume from ``ckpt_dir`` if a checkpoint is there, train with early stopping, save at least once
per epoch, and end with the *best* weights in ``task.model``. One grading draws a seed and kill
moments, computes its own uninterrupted run in this process (no learner code; one thread,
deterministic kernels), then runs the learner's ``train`` in sandboxed workers that share one
state folder (:func:`grader.sandbox.launch` ``state_dir``) and kills them:

1. between two steps in the middle of epoch 3 (the parent withholds the go-ahead the worker asks
   for before each step, and kills its cgroup);
2. in the middle of the first save after the best epoch, while early stopping counts its patience
   (:class:`grader.assignments.lesson6.faults.SaveWatcher`: the first write into the folder);

and lets the third worker finish; its final weights come back as raw tensor bytes. Each restart
must resume without raising, at most one epoch behind where the killed worker was.

* ``test_resume`` (4 points): the run survives every kill and its final weights equal the
  grader's run bit for bit (its best or its last weights);
* ``test_torn`` (2): after the kill mid-save (a torn file in the folder) the run resumes from a
  complete checkpoint and never loads the torn one;
* ``test_best`` (2): the final weights are the best epoch's, not the last's;
* ``test_overhead`` (2): checkpointing costs at most ``LIMIT`` x the unprotected run's time, on
  the same epochs of these very workers (:mod:`grader.assignments.lesson6.timing`): no run of the
  learner's is untimed, so none can tell it is timed (:mod:`grader.assignments.lesson6.overhead`);
* ``test_quiz`` (2).

**When to use it.** Through :mod:`grader.cells`.

**Expected gain.** Crash safety judged the way it fails in production: by killing the process.

**Pitfalls.** One fault-injection run serves the four checks (cached on the probe session). A
worker whose steps are not consecutive is killed: positions are claims, and the kills and the
timed epochs rest on them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.assignments import Assignment
from grader.assignments.lesson6.faults import SaveWatcher, kill_now, tear
from grader.assignments.lesson6.task import Task, reference_run
from grader.assignments.lesson6.timing import EpochTimer
from grader.cells import CheckFailed, Context, expect, stub_reason
from grader.channel import ChannelError, tensor_from
from grader.quiz import quiz_check
from grader.sandbox import StateFolder

CALL_SECONDS = 60.0
MIN_EPOCHS = 8  # earlier stops leave too little room between the kills, and too few epochs to time
REFERENCE_NAMES = ("CheckpointManager", "save_checkpoint", "load_checkpoint", "effkit.resume")

SETUP_SOURCE = """\
import math
import os

import torch

from grader.assignments.lesson6.task import Task"""

QUIZ_KEY = {  # the notebook holds only the questions
    "q1": "a",  # sqrt(2 x 30 s x 24 h) = 2277 s, about 38 minutes
    "q2": "c",  # the validation set is data, not state of the run
    "q3": "b",  # write to a temporary file, fsync, rename: the old file survives a crash
    "q4": "b",  # the best epoch's weights, saved when they happened
}
QUIZ_WHY = {  # why each wrong option is wrong: the feedback a learner reads
    "q1": {"b": "Young: sqrt(2 x 30 s x 86,400 s) = 2,277 s, about 38 minutes; 3 hours loses too much work per failure",
           "c": "saving every 30 s spends half the time writing checkpoints"},
    "q2": {"a": "without the RNG states, dropout and shuffling draw different numbers after the resume",
           "b": "without the position the resumed epoch repeats or skips batches"},
    "q3": {"a": "it is not faster: it adds an fsync and a rename",
           "c": "os.replace compresses nothing; it swaps a complete file in atomically"},
    "q4": {"a": "epoch 10 is patience epochs past the best: its validation loss was worse",
           "c": "averaging weights is a different technique (SWA), not what early stopping keeps"},
}

SPE = Task.steps_per_epoch


class _Kill(Exception):
    """Raised in the serve callback: the parent kills the worker before this step."""


@dataclass
class Life:
    kind: str  # the planned kill: "step", "save" or "end"
    first: int | None = None  # global index of the first step this worker trained
    done: int = 0  # steps done when it was killed (its last go-ahead + 1)
    end: str = ""
    failure: str = ""  # the learner's run raised / crashed (learner-facing)
    torn: str = ""


@dataclass
class Scenario:
    seed: int
    ref: dict
    lives: list[Life] = field(default_factory=list)
    final: dict | None = None
    problem: str = ""  # why the run could not be judged (learner-facing)
    state: Path | None = None  # the checkpoint folder, kept for test_overhead
    folder: StateFolder | None = None
    notes: list[str] = field(default_factory=list)
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (baseline, learner) s per epoch
    timing_failure: str = ""  # the baseline's own failure (a grader bug)


def _draw_seed(ctx: Context) -> tuple[int, dict]:
    for _ in range(20):
        seed = ctx.rng.randrange(1 << 20)
        ref = reference_run(seed)
        if ref["stopped"] and ref["epochs"] >= MIN_EPOCHS:
            return seed, ref
    raise CheckFailed("the grader could not draw a run that stops early (a grader bug: report it)")


def _mid_epoch(ctx: Context, low: int, high: int) -> int:
    """A step in [low, high) that is not the first of an epoch."""
    steps = [s for s in range(low, max(low + 1, high)) if s % SPE]
    return ctx.rng.choice(steps)


def _weights(r) -> dict:
    metas = r.data.get("weights")
    expect(
        isinstance(metas, dict) and len(metas) == len(r.blobs), "the worker's answer was malformed"
    )
    try:
        return {
            k: tensor_from(m if isinstance(m, dict) else {}, raw)
            for (k, m), raw in zip(metas.items(), r.blobs, strict=True)
        }
    except ChannelError as err:
        raise CheckFailed(f"the worker sent malformed weights ({err})") from err


def _life(ctx: Context, sc: Scenario, life: Life, kill_at: int, state: Path, timer: EpochTimer) -> bool:
    """One worker: returns True when the run may go on to a next worker."""
    session, number = ctx.session, len(sc.lives)
    watcher = SaveWatcher(state, lambda: session.box is not None and kill_now(session.box))

    def serve(msg: dict, blobs=()) -> dict:
        epoch, index = msg.get("epoch"), msg.get("index")
        if not (
            isinstance(epoch, int) and isinstance(index, int) and 0 <= index < SPE and epoch >= 0
        ):
            raise _Kill("malformed")
        step = epoch * SPE + index
        if life.first is None:
            life.first = step
        elif step != life.done:  # every batch in order: the kills and the timed epochs rely on it
            life.failure = (f"train(task, ckpt_dir) asked for step {step} right after step {life.done - 1}: train "
                            "every batch of task.batches(epoch, start) with task.train_step, in order")  # fmt: skip
            raise _Kill("malformed")
        if life.kind == "step" and step >= kill_at:
            raise _Kill(step)
        if life.kind == "save" and step >= kill_at and not watcher.armed and watcher.fired is None:
            watcher.arm()  # the next write into the folder kills the worker
        timer.step(number, step, life.first, session.box)
        life.done = step + 1
        return {}

    try:
        r = session.call("run", CALL_SECONDS, serve, seed=sc.seed)
    except _Kill as kill:
        session.close()  # kills the worker's whole tree before it trains this step
        life.end = (
            f"killed before step {kill.args[0]}"
            if kill.args[0] != "malformed"
            else "malformed request"
        )
        return kill.args[0] != "malformed" and not life.failure
    finally:
        watcher.close()
    if watcher.fired is not None:
        session.close()
        life.torn = tear(state, watcher)
        life.end = f"killed during a save, after step {life.done}"
        return True
    if not r.ok:
        life.failure = stub_reason(r.failure) or f"train(task, ckpt_dir) {r.failure}"
        return False
    total = sc.ref["epochs"] * SPE
    if life.done != total:  # never reached its kill, or hid steps from it: nothing was proved
        life.failure = (f"train(task, ckpt_dir) returned having told the grader of steps up to {life.done} of the "
                        f"run's {total}: every step must go through task.train_step on the task given, whose hook "
                        "tells the grader where the run is (where it kills it)")  # fmt: skip
        return False
    sc.final = _weights(r)
    life.end = "finished"
    if life.kind == "save" and not watcher.available:
        sc.notes.append("the kill mid-save needs Linux inotify: not available here")
    return False


def run_scenario(ctx: Context) -> Scenario:
    cached = getattr(ctx.session, "lesson6_scenario", None)
    if cached is not None:
        return cached
    source = "\n".join(src for _, src in ctx.session.cells)
    used = [n for n in REFERENCE_NAMES if n in source]
    seed, ref = _draw_seed(ctx)
    sc = Scenario(seed, ref)
    ctx.session.lesson6_scenario = sc
    if used:
        sc.problem = f"your train uses effkit's {used[0]}, the lesson's reference answer: write the save and load yourself"
        return sc
    # Kill 1: between two steps in the middle of epoch 3. Kill 2: in the first save after the best
    # epoch, while early stopping counts its patience. Then a worker that finishes.
    plan = [
        ("step", _mid_epoch(ctx, 2 * SPE, 3 * SPE)),
        ("save", (ref["best_epoch"] + 1) * SPE),
        ("end", 0),
    ]
    # Its own size-limited tmpfs (as root): saves cost serialisation, and cannot fill the disk.
    folder = StateFolder()
    state = sc.state = folder.path
    sc.folder = folder
    sc.notes += [f"protection unavailable here: {u}" for u in folder.unavailable]
    weakref.finalize(ctx.session, folder.close)  # also when test_overhead is not run
    ctx.session.close()  # the next worker starts with the state folder
    ctx.session.state_dir = state
    # The baseline for test_overhead, beside every worker of the learner's (no run of its own to tell apart).
    timer = EpochTimer(ctx.session.probes, ctx.session.setup, seed)
    try:
        try:  # the first worker starts while the baseline's does (both untimed)
            ctx.session.start()
        except ChannelError:
            ctx.session.close()  # its first call starts it again and says why it failed
        if not timer.ready(ctx.session.startup_timeout_s):
            sc.timing_failure = timer.failure or "its worker did not start"
        for kind, at in plan:
            life = Life(kind)
            sc.lives.append(life)
            if not _life(ctx, sc, life, at, state, timer):
                break
    finally:
        ctx.session.state_dir = None  # a later restart (the quiz) needs no folder
        sc.pairs = timer.pairs()
        timer.close()
        sc.timing_failure = sc.timing_failure or timer.failure
        sc.notes += [f"protection unavailable here: {u}" for u in timer.unavailable]
        if sc.final is None:
            ctx.session.close()
        # else: the worker that finished stays up (with its folder) for test_overhead and the quiz
    return sc


def _resume_problem(sc: Scenario) -> str:
    """Why a restart failed or lost too much ('' when every restart was sound)."""
    for before, after in zip(sc.lives, sc.lives[1:], strict=False):
        where = "the kill in the middle of a save" if before.kind == "save" else before.end
        if after.failure:
            return f"after {where}, the restarted {after.failure}"
        if after.first is not None and after.first < before.done - SPE:
            lost = "from step 0" if after.first == 0 else f"from step {after.first}"
            return (f"after {where} (step {before.done} done), the restarted run began {lost}: it lost "
                    f"{before.done - after.first} steps, more than one epoch ({SPE}). Save at least once per epoch, "
                    "and never destroy the last complete checkpoint while writing the next")  # fmt: skip
    return ""


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _story(ctx: Context, sc: Scenario) -> None:
    for note in sc.notes:
        ctx.ok(note)
    for k, life in enumerate(sc.lives, 1):
        start = "from scratch" if not life.first else f"resumed at step {life.first}"
        ctx.ok(
            f"worker {k}: {start}, {life.end or life.failure}"
            + (f" ({life.torn})" if life.torn else "")
        )


def check_resume(ctx: Context) -> None:
    sc = run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    first = sc.lives[0]
    expect(not first.failure, first.failure)
    _story(ctx, sc)
    problem = _resume_problem(sc)
    expect(not problem, problem)
    expect(sc.final is not None, "the run never finished")
    ref = sc.ref
    if not (_equal(sc.final, ref["best"]) or _equal(sc.final, ref["last"])):
        diff = max(
            float((sc.final[k].double() - ref["best"][k].double()).abs().max())
            for k in ref["best"]
            if k in sc.final
        )
        raise CheckFailed(
            f"after {len(sc.lives) - 1} kills and restarts your final weights differ from the grader's uninterrupted "
            f"run (max |difference| {diff:.2e} from its best weights). A resumed run is bit-equal only if the "
            "checkpoint holds everything its future depends on: model, optimizer (momentum), scheduler, the torch "
            "RNG state (dropout), the epoch and the next batch, and the early-stopping counters")  # fmt: skip
    ctx.ok(
        f"final weights equal the uninterrupted run's bit for bit ({ref['epochs']} epochs, seed {sc.seed})"
    )


def check_torn(ctx: Context) -> None:
    sc = run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    expect(not sc.lives[0].failure, sc.lives[0].failure)
    saves = [k for k, life in enumerate(sc.lives) if life.kind == "save" and life.torn]
    expect(
        bool(saves),
        "the grader never caught your run writing a checkpoint after a restart: save at least once per epoch",
    )
    k = saves[-1]
    ctx.ok(f"killed during a save after step {sc.lives[k].done}: {sc.lives[k].torn}")
    after = sc.lives[k + 1] if k + 1 < len(sc.lives) else None
    expect(after is not None, "the run did not continue after the kill mid-save")
    if after.failure:
        raise CheckFailed(f"after the kill in the middle of a save, the restarted {after.failure}. A save interrupted "
                          "half-way must never destroy or replace the last complete checkpoint: write to a temporary "
                          "file, flush and os.fsync it, then os.replace it onto the final name")  # fmt: skip
    if after.first is not None and after.first < sc.lives[k].done - SPE:
        raise CheckFailed(f"after the kill in the middle of a save (step {sc.lives[k].done} done) the run began again at "
                          f"step {after.first}: the interrupted save destroyed the last complete checkpoint. Write to a "
                          "temporary file, fsync, then os.replace onto the name")  # fmt: skip
    ctx.ok(f"the next worker resumed at step {after.first} from a complete checkpoint")


def check_best(ctx: Context) -> None:
    sc = run_scenario(ctx)
    expect(not sc.problem, sc.problem)
    expect(not sc.lives[0].failure, sc.lives[0].failure)
    expect(
        sc.final is not None,
        "the run never finished, so there are no final weights to judge (see test_resume)",
    )
    ref = sc.ref
    if _equal(sc.final, ref["best"]):
        ctx.ok(
            f"early stopping fired after epoch {ref['epochs']}; you kept epoch {ref['best_epoch'] + 1}'s weights, the best"
        )
        return
    if _equal(sc.final, ref["last"]):
        raise CheckFailed(f"early stopping fired after epoch {ref['epochs']} and you kept that epoch's weights; the best "
                          f"validation loss was epoch {ref['best_epoch'] + 1}'s. Save the best weights when they "
                          "happen (best.pt) and load them before returning")  # fmt: skip
    raise CheckFailed(
        "your final weights are neither the best nor the last of the grader's run (see test_resume)"
    )


def _overhead(ctx: Context) -> None:
    from grader.assignments.lesson6.overhead import check_overhead

    check_overhead(ctx)


CELL_CHECKS = {"test_resume": check_resume, "test_torn": check_torn, "test_best": check_best,
               "test_overhead": _overhead, "test_quiz": quiz_check(QUIZ_KEY, QUIZ_WHY)}  # fmt: skip
NAMES = ("train",)
ASSIGNMENT = Assignment(id="lesson6", notebook="lesson6", object_name="train", performance_cell=None,
                        setup_cell="setup", setup_source=SETUP_SOURCE, runtime_module="", timeout_s=180,
                        probes="grader.assignments.lesson6.probes", names=NAMES, cell_checks=CELL_CHECKS)  # fmt: skip
