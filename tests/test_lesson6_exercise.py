"""Lesson 6's exercise, graded out of the kernel by fault injection: the grader kills the learner's
sandboxed worker between steps and in the middle of a save, restarts it, and compares the final
weights bit for bit with its own uninterrupted run.

One grading per submission (module-scoped): each starts three or four sandboxed workers.
"""

import os
import random
import time
from pathlib import Path

import pytest
import torch
from exercise_cells import POINTS as EXERCISE_POINTS  # noqa: E402  (tests/ is on sys.path)
from exercise_cells import grade, reference_cells, solution_cells  # noqa: E402

from grader.assignments.lesson6 import task as task_module
from grader.assignments.lesson6.faults import incomplete

LESSON = "lesson6"
ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "lesson6" / "lesson6.ipynb"
POINTS = EXERCISE_POINTS[LESSON]


def _reference_train() -> str:
    return dict(reference_cells(LESSON))["train"]


def _mutate(*edits: tuple[str, str]) -> str:
    """The reference answer with one plausible mistake (each edit must apply)."""
    source = _reference_train()
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    return source


def _score(path: Path = SOLUTION, seed: int = 1, **replace: str):
    verdicts, report = grade(LESSON, solution_cells(SOLUTION, path, **replace), seed=seed)
    points = sum(POINTS[g] for g, v in verdicts.items() if v.passed)
    return points, verdicts, report


IN_PLACE = (
    """        tmp = path + ".tmp"  # same folder: os.replace is atomic only within one file system
        with open(tmp, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)""",
    "        torch.save(obj, path)",
)
NO_RNG = [('        torch.set_rng_state(state["rng"])\n', "")]
LAST_NOT_BEST_EVERY_STEP = [
    ("    task.model.load_state_dict(torch.load(best_path, weights_only=True))\n", ""),
    ("            if index + 1 == save_at:\n", "            if True:  # every step\n"),
]


# -- fast: structure, the task, the watcher's tear ----------------------------------------------


def test_the_reference_run_stops_early_and_its_best_is_not_its_last():
    ref = task_module.reference_run(3)
    assert ref["stopped"] and ref["epochs"] - ref["best_epoch"] - 1 == task_module.PATIENCE
    assert any(not torch.equal(ref["best"][k], ref["last"][k]) for k in ref["best"])
    again = task_module.reference_run(3)
    assert all(torch.equal(again["best"][k], ref["best"][k]) for k in ref["best"]), "deterministic"


def test_tear_cuts_a_finished_save_and_plants_a_renamed_one(tmp_path):
    from grader.assignments.lesson6.faults import IN_MODIFY, IN_MOVED_TO, SaveWatcher, tear

    torch.save({"w": torch.arange(1000.0)}, tmp_path / "last.pt")
    assert not incomplete(tmp_path / "last.pt")
    watcher = SaveWatcher.__new__(SaveWatcher)
    watcher.fired, watcher.events = "last.pt", [(IN_MODIFY, "last.pt")]
    assert "cut it" in tear(tmp_path, watcher) and incomplete(tmp_path / "last.pt")
    torch.save({"w": torch.arange(1000.0)}, tmp_path / "best.pt")
    watcher.fired, watcher.events = (
        "best.pt.tmp",
        [(IN_MODIFY, "best.pt.tmp"), (IN_MOVED_TO, "best.pt")],
    )
    assert "half of it" in tear(tmp_path, watcher)
    assert incomplete(tmp_path / "best.pt.tmp") and not incomplete(tmp_path / "best.pt")


def test_tear_never_follows_a_link_or_opens_a_fifo_the_learner_planted(tmp_path):
    """The state folder is the learner's and the parent runs as root: a checkpoint name made a
    symlink would have let `tear` truncate any file, or copy half of one where the learner reads."""
    from grader.assignments.lesson6.faults import IN_MODIFY, IN_MOVED_TO, SaveWatcher, tear

    secret = tmp_path / "secret.txt"
    secret.write_text("the grader's file " * 100)
    state = tmp_path / "state"
    state.mkdir()
    watcher = SaveWatcher.__new__(SaveWatcher)
    (state / "last.pt").symlink_to(secret)
    watcher.fired, watcher.events = "last.pt", [(IN_MODIFY, "last.pt")]
    assert "left alone" in tear(state, watcher) and incomplete(state / "last.pt")
    (state / "best.pt").symlink_to(secret)  # renamed onto a link: never read through it
    watcher.fired, watcher.events = (
        "best.pt.tmp",
        [(IN_MODIFY, "best.pt.tmp"), (IN_MOVED_TO, "best.pt")],
    )
    assert "interrupted" in tear(state, watcher) and not (state / "best.pt.tmp").exists()
    os.mkfifo(state / "fifo.pt")  # an open would block forever without O_NONBLOCK
    watcher.fired, watcher.events = "fifo.pt", [(IN_MODIFY, "fifo.pt")]
    assert "left alone" in tear(state, watcher) and incomplete(state / "fifo.pt")
    assert secret.read_text() == "the grader's file " * 100


def _wait_for(killed: list) -> None:
    """Up to a second for the watcher's thread to kill."""
    for _ in range(100):
        if killed:
            return
        time.sleep(0.01)


def _killed_by(tmp_path, *writes, min_bytes: int = 100_000) -> tuple[list, str | None]:
    """Arm a watcher on ``tmp_path``, make the ``writes`` (callables), wait up to a second."""
    from grader.assignments.lesson6.faults import SaveWatcher

    (tmp_path / "old").mkdir()  # a folder an earlier worker made: watched from the start
    killed = []
    watcher = SaveWatcher(tmp_path, lambda: killed.append(True), min_bytes)
    try:
        torch.save({"w": torch.zeros(50_000)}, tmp_path / "before.pt")  # not armed: no kill
        watcher.arm()
        for write in writes:
            write()
            time.sleep(0.05)  # each write's events read before the next (as between two steps)
        _wait_for(killed)
    finally:
        watcher.close()
    return killed, watcher.fired


BIG = {"w": torch.arange(50_000.0)}  # 200 kB: past the 100 kB a checkpoint must reach here


def test_the_save_watcher_kills_on_the_first_checkpoint_sized_write_once_armed(tmp_path):
    """Writes smaller than a checkpoint do not draw the kill away from the real save: a log line,
    a marker, a small torch.save decoy (an in-place save behind a decoy scored 12 instead of 2, a
    review found). Any format counts once the file is checkpoint-sized (the legacy one too)."""
    killed, fired = _killed_by(
        tmp_path,
        lambda: (tmp_path / "log.txt").write_text("epoch 3\n"),
        lambda: (tmp_path / "e3").write_bytes(b"y" * 1000),
        lambda: torch.save({"decoy": torch.zeros(10)}, tmp_path / "decoy.pt"),
        lambda: torch.save(BIG, tmp_path / "last.pt", _use_new_zipfile_serialization=False),
    )
    assert killed == [True] and fired == "last.pt"


def test_a_sparse_pad_does_not_draw_the_kill(tmp_path):
    """A file that claims a checkpoint's size without its bytes (``truncate``) costs nothing to write:
    the watcher counts bytes written, so the kill still lands on the real save (a review, 2026-12-07)."""

    def pad():
        with open(tmp_path / "pad", "wb") as f:
            f.truncate(3_000_000)

    killed, fired = _killed_by(tmp_path, pad, lambda: torch.save(BIG, tmp_path / "last.pt"))
    assert killed == [True] and fired == "last.pt"


def test_a_finished_save_renamed_into_place_as_a_folder_is_caught_and_left_whole(tmp_path):
    """A folder written elsewhere and renamed in (an atomic folder save) before its watch existed:
    the kill lands, and a finished save is not torn."""
    from grader.assignments.lesson6.faults import SaveWatcher, tear

    state, prep = tmp_path / "state", tmp_path / "prep"
    state.mkdir()
    prep.mkdir()
    torch.save(BIG, prep / "model.pt")
    killed = []
    watcher = SaveWatcher(state, lambda: killed.append(True), 100_000)
    try:
        watcher.arm()
        os.rename(prep, state / "step5")
        _wait_for(killed)
    finally:
        watcher.close()
    assert killed == [True] and watcher.fired == "step5/model.pt"
    assert "left whole" in tear(state, watcher) and not incomplete(state / "step5" / "model.pt")


@pytest.mark.parametrize("folder", ["old", "new"])
def test_a_checkpoint_in_a_folder_inside_the_state_folder_is_caught_too(tmp_path, folder):
    """inotify watches one folder: a save into a folder inside it (one folder per checkpoint, as
    torch.distributed.checkpoint writes) went unseen, failing honest work and hiding in-place saves."""

    def save():
        (tmp_path / folder).mkdir(exist_ok=True)
        torch.save(BIG, tmp_path / folder / "model.pt")

    killed, fired = _killed_by(tmp_path, save)
    assert killed == [True] and fired == f"{folder}/model.pt"


def test_tear_never_leaves_the_state_folder_through_a_folder_swapped_for_a_link(tmp_path):
    """The parent runs as root: a folder inside the state folder replaced by a link to elsewhere
    must not lead ``tear`` to truncate or create a file there."""
    from grader.assignments.lesson6.faults import IN_MODIFY, SaveWatcher, tear

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pt").write_bytes(b"the grader's bytes" * 100)
    state = tmp_path / "state"
    state.mkdir()
    (state / "ck").symlink_to(outside)
    watcher = SaveWatcher.__new__(SaveWatcher)
    watcher.fired, watcher.events = "ck/model.pt", [(IN_MODIFY, "ck/model.pt")]
    assert "left alone" in tear(state, watcher)
    assert (outside / "model.pt").read_bytes() == b"the grader's bytes" * 100


def test_an_atomic_save_renamed_before_the_watcher_looked_is_still_the_one_killed(tmp_path):
    """Under load the watcher may read the write's event after the rename: the kill follows the
    file to its new name, and `tear` plants the torn temporary file."""
    from grader.assignments.lesson6.faults import _EVENT, IN_MODIFY, IN_MOVED_TO, SaveWatcher

    watcher = SaveWatcher.__new__(SaveWatcher)
    watcher.directory, watcher.events, watcher.armed, watcher.fired = tmp_path, [], True, None
    watcher._gone, watcher._folders, watcher.min_bytes, killed = None, {1: ""}, 1, []
    watcher._kill = lambda: killed.append(True)
    torch.save({"w": 1}, tmp_path / "last.pt")  # the tmp file, already renamed onto last.pt
    raw = b"".join(  # the two events as inotify queues them: the write, then the rename
        _EVENT.pack(1, mask, 0, len(name) + 1) + name.encode() + b"\0"
        for mask, name in ((IN_MODIFY, "last.pt.tmp"), (IN_MOVED_TO, "last.pt"))
    )
    read_fd, write_fd = os.pipe()
    os.write(write_fd, raw)
    watcher._fd = read_fd
    try:
        watcher._read(fire=True)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert killed == [True] and watcher.fired == "last.pt.tmp"


# -- gradings (three or four sandboxed workers each) --------------------------------------------


@pytest.fixture(scope="module")
def reference():
    return _score(SOLUTION, seed=random.Random(7).randrange(1 << 30))


@pytest.mark.slow
def test_reference_solution_gets_full_marks(reference):
    points, verdicts, report = reference
    assert points == sum(POINTS.values()), {g: (v.reason, v.lines) for g, v in verdicts.items()}
    lines = " | ".join(verdicts["test_resume"].lines)
    assert "killed before step" in lines and "killed during a save" in lines and "finished" in lines
    assert "limit 2.0x" in verdicts["test_overhead"].lines[-1], verdicts["test_overhead"].lines
    assert not [f for f in report["flags"] if "outside its working directory" in f], report["flags"]


# The untouched stub (0 points, NotImplementedError named in every cell's feedback) is graded by the
# instructor cycle (tests/test_instructor_cycle.py): not graded twice in CI.


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, edits, points, hints",
    [
        (
            "torch.save straight to the final name",
            [IN_PLACE],
            2,
            {
                "test_torn": "os.replace",
                "test_resume": "restarted",
                "test_best": "never finished",
                "test_overhead": "survives the kills",
            },
        ),
        (
            "the torch RNG state not restored",
            NO_RNG,
            4,
            {
                "test_resume": "RNG state",
                "test_best": "neither the best nor the last",
                "test_overhead": "survives",
            },
        ),
        (
            "saving every step, keeping the last weights",
            LAST_NOT_BEST_EVERY_STEP,
            8,
            {"test_best": "Save the best weights", "test_overhead": "not every step"},
        ),
    ],
)
def test_plausible_mistakes_score_what_they_deserve_with_a_hint(name, edits, points, hints):
    got, verdicts, _ = _score(SOLUTION, train=_mutate(*edits))
    failed = {g: v.reason for g, v in verdicts.items() if not v.passed}
    # what every cell measured, passed or not: a timed verdict that moves shows its figures
    said = {g: v.reason or v.lines[-1:] for g, v in verdicts.items()}
    assert got == points, (name, said)
    assert set(failed) == set(hints), (name, said)
    for gid, hint in hints.items():
        assert hint in failed[gid], (name, gid, failed[gid])


# -- the timed run must be the graded run (issue 41, class 7) -------------------------------------

EVERY_STEP_UNLESS_TIMED = {  # how a submission could tell a timed run from a judged one
    "task.max_epochs": ("", "task.max_epochs == Task.max_epochs"),
    "a second call in the same process": (
        "_CALLS = []\n\n\n",
        "not _CALLS.append(1) and len(_CALLS) == 1",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("observable", sorted(EVERY_STEP_UNLESS_TIMED))
def test_a_run_that_saves_every_step_unless_it_is_timed_earns_no_overhead_points(observable):
    """Saves every step when judged for resume, as the reference when timed: the grader must time
    the very runs it judges (or runs it cannot tell apart), so the cost of every-step saves shows."""
    prefix, judged = EVERY_STEP_UNLESS_TIMED[observable]
    source = prefix + _mutate(
        (
            "    save_at = task.steps_per_epoch // 2\n",
            f"    save_at = task.steps_per_epoch // 2\n    judged = {judged}\n",
        ),
        (
            "            if index + 1 == save_at:\n",
            "            if judged or index + 1 == save_at:\n",
        ),
    )
    got, verdicts, _ = _score(SOLUTION, train=source)
    failed = {g: v.reason for g, v in verdicts.items() if not v.passed}
    assert set(failed) == {"test_overhead"}, (observable, failed)
    assert got == sum(POINTS.values()) - POINTS["test_overhead"]
    assert "not every step" in failed["test_overhead"], failed["test_overhead"]


# A restart that replays the lost epochs instead of restoring them: no model state is ever saved,
# only a marker per epoch. With the training set in the worker it scored 12/12 (a review, 2026-12-07);
# the parent now serves each batch once the run reaches it.
PRIVATE_REPLAY = """def train(task, ckpt_dir):
    import torch.nn.functional as F

    marks = [int(n[1:]) for n in os.listdir(ckpt_dir) if n.startswith("e")]
    resume, best, best_loss, bad = max(marks, default=0), None, math.inf, 0
    for epoch in range(task.max_epochs):
        for x, y in task.batches(epoch):
            if epoch >= resume:
                task.train_step(x, y)
                continue
            task.model.train()  # replayed in private: the step hook never hears of it
            loss = F.cross_entropy(task.model(x), y)
            task.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            task.optimizer.step()
            task.scheduler.step()
        if epoch >= resume:
            open(os.path.join(ckpt_dir, f"e{epoch + 1}"), "w").close()
        loss = task.evaluate()
        if loss < best_loss:
            best, best_loss, bad = {k: v.clone() for k, v in task.model.state_dict().items()}, loss, 0
        else:
            bad += 1
            if bad >= task.patience:
                break
    task.model.load_state_dict(best)"""

# The same, with the uninterrupted run computed before the first step from the task's seed.
SHADOW_RUN = """def train(task, ckpt_dir):
    from grader.assignments.lesson6.task import reference_run

    ref = reference_run(task.seed)
    marks = [int(n[1:]) for n in os.listdir(ckpt_dir) if n.startswith("e")]
    for epoch in range(max(marks, default=0), ref["epochs"]):
        open(os.path.join(ckpt_dir, f"e{epoch}"), "w").write("x")
        for x, y in task.batches(epoch):
            task.train_step(x, y)
    task.model.load_state_dict(ref["best"])"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, source", [("private replay", PRIVATE_REPLAY), ("shadow run", SHADOW_RUN)]
)
def test_a_run_that_recomputes_what_it_lost_instead_of_restoring_it_earns_only_the_quiz(
    name, source
):
    """No checkpoint of the model: a restart re-trains the lost epochs where the grader cannot see
    them. The training batches live in the parent, served in order: the replay is refused, and a
    run made from the seed alone trains on other data."""
    got, verdicts, _ = _score(SOLUTION, train=source)
    failed = {g: v.reason for g, v in verdicts.items() if not v.passed}
    assert got == POINTS["test_quiz"], (name, failed)
    if name == "private replay":
        assert "not re-train what it lost" in failed["test_resume"], failed["test_resume"]


DODGES = {  # a train that never reaches the grader's kill, so its first worker just finishes
    "the task's step hook removed": [
        (
            "    epoch, start, best_loss, bad, done = 0, 0, math.inf, 0, False\n",
            "    task._hook = None\n    epoch, start, best_loss, bad, done = 0, 0, math.inf, 0, False\n",
        )
    ],
    "the position it reports frozen": [
        (
            "            task.train_step(x, y)\n",
            "            task._at = (0, 1)\n            task.train_step(x, y)\n",
        )
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("dodge", sorted(DODGES))
def test_a_run_that_hides_where_it_is_from_the_kills_earns_nothing_for_surviving_them(dodge):
    """The kills (and the timed epochs) rest on the position each step reports: a run that hides it
    was never killed, so it proved nothing about resuming."""
    got, verdicts, _ = _score(SOLUTION, train=_mutate(*DODGES[dodge]))
    failed = {g: v.reason for g, v in verdicts.items() if not v.passed}
    assert set(failed) == {"test_resume", "test_torn", "test_best", "test_overhead"}, (
        dodge,
        failed,
    )
    assert "task.train_step" in failed["test_resume"], failed["test_resume"]
