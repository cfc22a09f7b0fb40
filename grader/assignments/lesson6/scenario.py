"""Lesson 6's scenario: the learner's ``train`` run, killed mid-epoch and restarted, until it ends.

:func:`run_scenario` is shared by the resume, torn-write, best-checkpoint and overhead checks
(:mod:`grader.assignments.lesson6.checks`, :mod:`grader.assignments.lesson6.overhead`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.assignments.lesson6.faults import SaveWatcher, kill_now, tear
from grader.assignments.lesson6.task import WEIGHT_BYTES, Task, TrainData, reference_run
from grader.assignments.lesson6.timing import EpochTimer, batch_reply, next_batch
from grader.kit.checks import (
    ChannelError,
    CheckFailed,
    Context,
    StateFolder,
    expect,
    stub_reason,
    tensor_from,
    without_comments,
)

CALL_SECONDS = 60.0
MIN_EPOCHS = 8  # earlier stops leave too little room between the kills, and too few epochs to time
REFERENCE_NAMES = ("CheckpointManager", "save_checkpoint", "load_checkpoint", "effkit.resume")


SPE = Task.steps_per_epoch
# A write that makes a file this large is a checkpoint's (the weights in fp16 are half of them):
# smaller writes (a log line, a marker) must not draw the kill away from the real save.
SAVE_MIN_BYTES = int(0.4 * WEIGHT_BYTES)


class _Kill(Exception):
    """Raised in the serve callback: the parent kills the worker before this step."""


@dataclass
class Life:
    kind: str  # the planned kill: "step", "save" or "end"
    first: int | None = None  # global index of the first step this worker trained
    fetched: int | None = None  # the first batch it asked for, before it trained any
    done: int = 0  # steps done when it was killed (its last go-ahead + 1)
    end: str = ""
    failure: str = ""  # the learner's run raised / crashed (learner-facing)
    torn: str = ""
    unproved: bool = False  # a save life that wrote no file the save kill could catch


@dataclass
class Scenario:
    seed: int
    ref: dict
    data: TrainData  # the training set: only the parent holds it, and serves it batch by batch
    lives: list[Life] = field(default_factory=list)
    final: dict | None = None
    problem: str = ""  # why the run could not be judged (learner-facing)
    state: Path | None = None  # the checkpoint folder, kept for test_overhead
    folder: StateFolder | None = None
    notes: list[str] = field(default_factory=list)
    pairs: list[tuple[float, float]] = field(
        default_factory=list
    )  # (baseline, learner) s per epoch
    timing_failure: str = ""  # the baseline's own failure (a grader bug)


def _draw_seed(ctx: Context) -> tuple[int, TrainData, dict]:
    for _ in range(20):
        seed, data_seed = ctx.rng.randrange(1 << 20), ctx.rng.randrange(1 << 20)
        ref = reference_run(seed, data_seed=data_seed)
        if ref["stopped"] and ref["epochs"] >= MIN_EPOCHS:
            return seed, TrainData(data_seed), ref
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


def _life(
    ctx: Context, sc: Scenario, life: Life, kill_at: int, state: Path, timer: EpochTimer
) -> bool:
    """One worker: returns True when the run may go on to a next worker."""
    session, number = ctx.session, len(sc.lives)
    watcher = SaveWatcher(
        state, lambda: session.box is not None and kill_now(session.box), SAVE_MIN_BYTES
    )

    def serve(msg: dict, blobs=()) -> dict:
        epoch, index = msg.get("epoch"), msg.get("index")
        if not (
            isinstance(epoch, int) and isinstance(index, int) and 0 <= index < SPE and epoch >= 0
        ):
            raise _Kill("malformed")
        step = epoch * SPE + index
        if msg.get("kind") == "batch":
            return _batch(sc, life, step)
        if life.first is None:
            if life.fetched is not None and step != life.fetched:
                life.failure = (
                    f"train(task, ckpt_dir) trained step {step} after asking for the batch of step "
                    f"{life.fetched}: train each batch task.batches(epoch, start) gives with "
                    "task.train_step, in order"
                )
                raise _Kill("malformed")
            life.first = step
        elif step != life.done:  # every batch in order: the kills and the timed epochs rely on it
            life.failure = (
                f"train(task, ckpt_dir) asked for step {step} right after step {life.done - 1}: train "
                "every batch of task.batches(epoch, start) with task.train_step, in order"
            )
            raise _Kill("malformed")
        if life.kind == "step" and step >= kill_at:
            raise _Kill(step)
        if life.kind == "save" and step >= kill_at and not watcher.armed and watcher.fired is None:
            watcher.arm()  # the next write into the folder kills the worker
        timer.step(number, step, life.first, session.box)
        life.done = step + 1
        return next_batch(sc.data, step)  # where the run stands now: the only batch it may have

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
        life.failure = (
            f"train(task, ckpt_dir) returned having told the grader of steps up to {life.done} of the "
            f"run's {total}: every step must go through task.train_step on the task given, whose hook "
            "tells the grader where the run is (where it kills it)"
        )
        return False
    sc.final = _weights(r)
    life.end = "finished"
    if life.kind == "save" and not watcher.available:
        sc.notes.append("the kill mid-save needs Linux inotify: not available here")
    elif life.kind == "save":  # armed, and no write it could catch: the save kill never landed
        life.end = "finished: never caught writing a checkpoint after the kill was armed"
        life.unproved = True
    return False


def _batch(sc: Scenario, life: Life, step: int) -> dict:
    """Serve the batch of ``step`` only where the run stands: the step it trains next, or (before its
    first step) the one it resumes at. A restart that asks for earlier batches, to re-train the lost
    epochs in private instead of restoring them, is stopped here."""
    if life.first is None:
        life.fetched = step if life.fetched is None else life.fetched
        wanted = life.fetched
    else:
        wanted = life.done
    if step != wanted:
        life.failure = (
            f"train(task, ckpt_dir) asked for the batch of step {step} where the run stood at step {wanted} "
            "(not yet trained with task.train_step, whose hook tells the grader where the run is): the "
            "grader serves each batch once the run reaches it, in order. A restarted run must restore its "
            "state from the checkpoint, not re-train what it lost"
        )
        raise _Kill("malformed")
    return batch_reply(sc.data, step // SPE, step % SPE)


def run_scenario(ctx: Context) -> Scenario:
    cached = getattr(ctx.session, "lesson6_scenario", None)
    if cached is not None:
        return cached
    # comments stripped: "# my own, not effkit.resume" in an honest answer is no use of it
    source = without_comments("\n".join(src for _, src in ctx.session.cells))
    used = [n for n in REFERENCE_NAMES if n in source]
    seed, data, ref = _draw_seed(ctx)
    sc = Scenario(seed, ref, data)
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
    timer = EpochTimer(ctx.session.probes, ctx.session.setup, seed, data)
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
    """Why a restart failed or lost too much, or was never put to the test of a kill mid-save ('' when
    every restart was sound)."""
    for life in sc.lives:
        if life.unproved:
            return (
                f"after the best epoch, your run wrote no file of {SAVE_MIN_BYTES / 1e6:.1f} MB or more in "
                "ckpt_dir (or a folder inside it) before it ended: the grader kills it in the middle of "
                "such a write, to test resuming from a torn save, and that never happened, so nothing was "
                "proved. Save the model's weights (and the rest of the state) in ckpt_dir at least once "
                "per epoch"
            )
    for before, after in zip(sc.lives, sc.lives[1:], strict=False):
        where = "the kill in the middle of a save" if before.kind == "save" else before.end
        if after.failure:
            return f"after {where}, the restarted {after.failure}"
        if after.first is not None and after.first < before.done - SPE:
            lost = "from step 0" if after.first == 0 else f"from step {after.first}"
            return (
                f"after {where} (step {before.done} done), the restarted run began {lost}: it lost "
                f"{before.done - after.first} steps, more than one epoch ({SPE}). Save at least once per epoch, "
                "and never destroy the last complete checkpoint while writing the next"
            )
    return ""


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
