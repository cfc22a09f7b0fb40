# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 6 — Never lose a run: exercise
#
# Make a training loop crash-safe. Write `train(task, ckpt_dir)`:
#
# * `task` is a `Task` (built in the setup cell): `task.model`, `task.optimizer` (SGD with
#   momentum), `task.scheduler` (warm-up + cosine, stepped per optimizer step),
#   `task.batches(epoch, start=0)` yields the batches `start, start + 1, ...` of `epoch` (the order
#   depends only on the training data and the epoch), `task.train_step(x, y)` runs one optimizer step
#   (its dropout draws from the global torch RNG), `task.evaluate()` returns the validation loss,
#   and `task.steps_per_epoch`, `task.max_epochs`, `task.patience`.
# * Train epoch after epoch; after each epoch, evaluate. **Early stopping:** an epoch improves when
#   its validation loss is strictly lower than the best so far; stop after `task.patience` epochs in
#   a row without improvement (or after `task.max_epochs`). When you return, `task.model` must hold
#   the weights of the **best** epoch.
# * `ckpt_dir` is a folder that survives crashes. Your process can be killed **at any moment** —
#   between two steps, in the middle of an epoch, in the middle of writing a file — and `train` is
#   then called again, in a fresh process, on a freshly built `Task`. It must continue where the
#   killed run was and end with **exactly** the weights an uninterrupted run would have, bit for
#   bit. Save at least once per epoch: a restart may lose at most one epoch of steps. When graded,
#   `task.batches` gets each batch from the grader, which serves a batch once your run reaches its
#   step (consume it one batch at a time, as a `for` loop does: asking ahead is refused). A run that
#   logged every batch and replayed them after a restart would checkpoint the data, not the state:
#   the grader does not stop that; the exercise asks for a checkpoint of the state — model,
#   optimizer, scheduler, RNG state and loop position (epoch, batch, early-stopping counters).
# * Use `torch.save` / `torch.load(..., weights_only=True)` and the `os` module; write the
#   checkpointing yourself (`effkit.resume` is the lesson's reference answer).
#
# **How it is graded.** Outside your notebook: the grader computes its own uninterrupted run, then
# runs your `train` in a sandboxed process and SIGKILLs it twice, restarting it each time: between
# two steps of epoch 3, at a step it draws, and in the middle of a save — not drawn: once the epoch
# after the best one has begun, while early stopping counts its patience, the first file being
# written in `ckpt_dir` (or a folder inside it) once about 2 MB of it are written (0.4x the model's
# weights, whatever its format) is torn: the kill cuts it to half of what was written. Then it
# compares your final weights with its own, bit for bit (4 points), checks that the restart after the
# kill mid-save did not load or lose to a torn file (2 points), and that the weights you kept are the
# best epoch's (2 points). Throughout those same runs it times your run in half-epoch windows (saves
# included) against the same steps of its own loop without any checkpoint, run beside yours,
# interleaved, and takes the time ratio per window: the cell fails only when the whole
# order-statistic interval of the median ratio (at least 95% coverage) lies above 2x (2 points) —
# judged only when your run survived the kills. Every step must go through `task.train_step`, in
# order: its hook tells the grader where your run is. The quiz is worth 2 points.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import math
import os

import torch

from grader.assignments.lesson6.task import Task

# %% nbgrader={"grade": false, "grade_id": "train", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train(task, ckpt_dir):
    """Train `task` with early stopping, resuming from `ckpt_dir`; leave the best weights in task.model."""
    ### BEGIN SOLUTION
    last_path, best_path = os.path.join(ckpt_dir, "last.pt"), os.path.join(ckpt_dir, "best.pt")

    def save(obj, path):
        tmp = path + ".tmp"  # same folder: os.replace is atomic only within one file system
        with open(tmp, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)

    epoch, start, best_loss, bad, done = 0, 0, math.inf, 0, False
    if os.path.exists(last_path):
        state = torch.load(last_path, weights_only=True)
        task.model.load_state_dict(state["model"])
        task.optimizer.load_state_dict(state["optimizer"])
        task.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        epoch, start, best_loss, bad, done = (state[k] for k in ("epoch", "start", "best_loss", "bad", "done"))

    def checkpoint(epoch, start):
        save({"model": task.model.state_dict(), "optimizer": task.optimizer.state_dict(),
              "scheduler": task.scheduler.state_dict(), "rng": torch.get_rng_state(), "epoch": epoch,
              "start": start, "best_loss": best_loss, "bad": bad, "done": done}, last_path)

    # Once per epoch (a save costs a full copy of model and momentum; a crash loses at most an
    # epoch), in its middle: the next batch's position is part of the state. A kill after the
    # evaluation and before the next save repeats the evaluation: it is deterministic, no harm.
    save_at = task.steps_per_epoch // 2
    while not done and epoch < task.max_epochs:
        for index, (x, y) in enumerate(task.batches(epoch, start), start):
            task.train_step(x, y)
            if index + 1 == save_at:
                checkpoint(epoch, index + 1)
        loss = task.evaluate()
        if loss < best_loss:
            best_loss, bad = loss, 0
            save(task.model.state_dict(), best_path)
        else:
            bad += 1
            done = bad >= task.patience
        epoch, start = epoch + 1, 0
    task.model.load_state_dict(torch.load(best_path, weights_only=True))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_resume", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_resume", "lesson6.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_torn", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_torn", "lesson6.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_best", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_best", "lesson6.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_overhead", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_overhead", "lesson6.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. A checkpoint takes 30 s to write and your job fails about once every 24 hours. Young's rule
#    says to save about every:
#    (a) 27 minutes; (b) 38 minutes; (c) 4 hours.
# 2. Three seeds of a recipe end at, say, 71.0%, 71.6% and 72.3% held-out accuracy; one run of a
#    change ends at 72.9%. If the change did nothing, how often would a single run land above all
#    three?
#    (a) 1 time in 20;
#    (b) 1 time in 8;
#    (c) 1 time in 4.
# 3. Why write a checkpoint to a temporary file and then `os.replace` it onto its name?
#    (a) a crash in the middle of the write leaves the old, complete checkpoint in place;
#    (b) the rename flushes the data to disk, so no `fsync` is needed before it;
#    (c) writing a fresh file avoids fragmenting the old one, so the write is faster.
# 4. Suppose EMA − raw held-out accuracy at the end of each run has a median of +6.1 points, with an
#    interval from +5.2 to +8.0, over six constant-LR seeds, and +0.2, from −0.3 to +0.4, over six
#    annealed runs (three seeds × two schedules, not independent); each interval covers its median
#    about 95% of the time. You may conclude:
#    (a) the EMA gains at a constant LR; after annealing, these runs resolve no difference;
#    (b) the EMA gains at a constant LR and costs nothing after annealing, so always keep it;
#    (c) six runs per group are too few: neither interval shows the EMA changes anything.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "b", "q2": "c", "q3": "a", "q4": "a"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson6.ipynb")

# %% [markdown]
# ## Your turn: crash it yourself (not graded)
#
# A hook given to `Task` runs before every step: raise from it to "crash" your run at step 30, then
# call `train` again on a fresh task, as the grader does, and compare with an uninterrupted run.
# Then break your `train` on purpose — skip `torch.set_rng_state`, or restart the epoch at batch 0 —
# and watch the weights differ.

# %%
import tempfile

from grader.assignments.lesson6.task import reference_run, single_thread


class Crash(Exception):
    pass


def crash_at(step):
    def hook(epoch, index):
        if epoch * Task.steps_per_epoch + index == step:
            raise Crash(f"crashed before step {step}")
    return hook


folder_tmp = tempfile.TemporaryDirectory()  # removed when the kernel stops
folder = folder_tmp.name
with single_thread():
    try:
        train(Task(seed=0, hook=crash_at(30)), folder)
    except Crash as crash:
        print(crash)
    task = Task(seed=0)
    train(task, folder)
reference = reference_run(0)["best"]
same = all(torch.equal(task.model.state_dict()[k], reference[k]) for k in reference)
print(f"resumed run equals the uninterrupted one bit for bit: {same}")
