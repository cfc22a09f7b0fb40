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
# # Lesson 4 — Bigger batches, safely: exercise
#
# Gradient accumulation builds a big batch out of micro-batches that fit in memory. It is only
# the *same* big batch if every optimizer step uses the gradient of the mean loss over **every
# real token of its window** — not the mean of per-micro-batch means (the bug Hugging Face
# `transformers` shipped: see its pull request #34191 and issue #37766).
#
# Write `train_accumulated(model, optimizer, micro_batches, accum_steps)`:
#
# * `micro_batches` is a list of `(tokens, labels)` pairs of int64 tensors of shape
#   `(rows, length)`; `model(tokens)` returns logits of shape `(rows, length, vocab)`. Labels equal
#   to `IGNORE` (-100) mark padding: they carry no loss. Micro-batches hold very different numbers
#   of real tokens.
# * Group consecutive micro-batches into windows of `accum_steps`; **the last window may be
#   shorter** (7 micro-batches in windows of 3: 3, 3, 1). Every window, the short one included,
#   gets exactly one `optimizer.step()`.
# * The gradient at each step must be the gradient of: (sum of the cross-entropy of every real
#   token in the window) / (number of real tokens in the window). Back-propagate each micro-batch
#   separately, one `backward()` per micro-batch, right after its forward: that is what keeps
#   memory at one micro-batch's activations at a time, the point of accumulating (the grader
#   records the order of forwards and backwards; one backward over a window's summed loss, or
#   every forward of a window before its backwards, gives the same gradients and fails). Clear the
#   gradients between windows.
#
# Write it yourself with plain PyTorch (`torch.nn.functional.cross_entropy` with
# `reduction="sum"` and `ignore_index=IGNORE` helps); `effkit.accumulate.GradAccumulator` is the
# lesson's reference answer.
#
# **How it is graded.** Outside your notebook: the grader runs your function in a separate
# process on micro-batches and a model it draws itself, records the gradient at each optimizer
# step, and compares it with *its own* float64 full-batch gradient of that window (relative error
# at most 1e-4). Full windows first (4 points), then runs whose last window is short (2 points).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch
import torch.nn.functional as F

from grader.assignments.lesson4.accum_task import IGNORE

# %% nbgrader={"grade": false, "grade_id": "train_accumulated", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_accumulated(model, optimizer, micro_batches, accum_steps):
    """One optimizer step per window of `accum_steps` micro-batches (the last may be shorter),
    each with the gradient of the mean loss over every real token of its window."""
    ### BEGIN SOLUTION
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        real_tokens = sum(int((labels != IGNORE).sum()) for _, labels in window)
        for tokens, labels in window:
            logits = model(tokens)
            loss_sum = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                                       reduction="sum")
            (loss_sum / real_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_full_windows", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_full_windows", "lesson4.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_last_window", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_last_window", "lesson4.ipynb")

# %% [markdown]
# ## Part (b): a bigger batch that keeps up
#
# Your model fits only **16 samples per forward/backward** (the memory cap). You are given a base
# recipe: batch `base_batch` and its LR `base_lr`, the LR tuned at batch 16 for the grader's task
# carried to `base_batch` by the linear rule (3 significant digits). The grader draws both for
# each grading (`base_batch` one of 1, 16, 256 and 4096; `base_lr` over several decades), so
# compute your LR from the arguments: no number from the lesson, none you could import, and no
# rule that leaves out `base_batch` is the answer. You want a
# **bigger effective batch** (16 to 32 micro-batches per optimizer step, accumulated) that still
# reaches the baseline's held-out accuracy (less 0.5 pp) **within `budget_samples`** (81,920, 1.67x
# the baseline's 49,152) and in **at most 1.25x the baseline's wall time**.
#
# Write `choose_recipe(micro_batch, base_batch, base_lr, budget_samples)` returning plain data:
# `{"accum_steps": int, "lr": float, "warmup_steps": int}` (the peak LR of a linear warm-up over
# `warmup_steps` optimizer steps followed by a cosine decay; SGD with momentum 0.9).
#
# **How it is graded.** Your function only *chooses*; the grader trains. It calls
# `choose_recipe` in a separate process with the base recipe it drew, checks the answer (types and
# ranges), and then trains **its own** model with your recipe, on a task it draws for each grading
# (a small ReLU network whose head starts with large logits, fresh teacher-labelled data, effkit's
# `GradAccumulator` and `warmup_cosine`; the task's loss is scaled so that the drawn `base_lr`,
# carried to batch 16 by the linear rule, is the LR tuned there). The baseline (batch 16 at the LR
# the linear rule gives there from `base_lr` at `base_batch`) trains 49,152 samples; the target is its
# held-out accuracy there minus 0.5 pp. Your recipe passes (4 points) when, on at least two of
# three such tasks, it reaches the target within `budget_samples` (81,920) samples, and its wall
# time to the target is at most 1.25x the baseline's (the grader times both runs itself, one after
# the other, on one thread). An unscaled LR, one far below or far above the linear rule's (8x below
# missed 2 of 3 calibration tasks), or a scaled LR without warm-up, misses the target; the feedback
# says which, not the LR to use. The grader's tolerance also admits LRs some way below the linear
# rule's: 4x below passed its calibration. That is square-root scaling's LR when `base_batch` is 16
# and the effective batch 256; from `base_batch` 1 square-root scaling lands 16x below the linear
# rule, from 4096 4x above it. The grader checks that the recipe reaches the target in time, not
# that you used the linear rule.

# %% nbgrader={"grade": false, "grade_id": "choose_recipe", "locked": false, "schema_version": 3, "solution": true, "task": false}
def choose_recipe(micro_batch, base_batch, base_lr, budget_samples):
    """Effective batch (as micro-batches per step), peak LR and warm-up steps for SGD."""
    ### BEGIN SOLUTION
    accum_steps = 16
    batch = micro_batch * accum_steps
    lr = base_lr * batch / base_batch  # linear scaling rule (Goyal et al. 2017)
    warmup_steps = budget_samples // batch // 5  # a fifth of the steps: the first ones are the sharp ones
    return {"accum_steps": accum_steps, "lr": lr, "warmup_steps": warmup_steps}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_recipe", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_recipe", "lesson4.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. 4 GPUs each accumulate 8 micro-batches of 16 samples per optimizer step. The effective batch
#    is:
#    (a) 64; (b) 128; (c) 512.
# 2. Micro-batches of one window hold 100, 20 and 5 real tokens. The loss each one back-propagates
#    should be:
#    (a) its summed token loss divided by the window's 125 real tokens;
#    (b) its mean token loss divided by 3, the number of micro-batches;
#    (c) its summed token loss divided by its own real-token count.
# 3. Adam at batch 256 with LR 1e-3 and β₂ = 0.999 moves to an effective batch of 1,024. By
#    Malladi et al.'s square-root rule, the new LR and β₂ are:
#    (a) LR 4e-3 and β₂ 0.999;
#    (b) LR 2e-3 and β₂ 0.996;
#    (c) LR 2e-3 and β₂ 0.999.
# 4. Training in fp16, a `GradScaler` at loss scale 65,536, you call `clip_grad_norm_(params, 1.0)`
#    before `scaler.unscale_(optimizer)`. The true (unscaled) gradient norm is 0.5. Against
#    unscaling first, the gradient the optimizer then uses is:
#    (a) 32,768 times too small;
#    (b) 65,536 times too small;
#    (c) the same: no clip fires.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "c", "q2": "a", "q3": "b", "q4": "a"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson4.ipynb")

# %% [markdown]
# ## Your turn: the wrong way, measured (not graded)
#
# Compare the gradient of your step with the per-micro-batch mean's on two micro-batches of 30 and
# 6 real tokens. How far apart are they? Then make the two micro-batches hold the same number of
# real tokens: what happens to the difference, and why?

# %%
class Recorder(torch.optim.SGD):
    """SGD with LR 0 that keeps the gradient it was stepped with."""

    def step(self, closure=None):
        self.grad = torch.cat([p.grad.reshape(-1) for p in self.param_groups[0]["params"]]).clone()
        return super().step(closure)


def step_gradient(fn, micro_batches):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 12), torch.nn.Linear(12, 32))
    recorder = Recorder(model.parameters(), lr=0.0)
    fn(model, recorder, micro_batches, accum_steps=len(micro_batches))
    return recorder.grad


def per_micro_batch_mean(model, optimizer, micro_batches, accum_steps):  # the bug, for comparison
    for tokens, labels in micro_batches:
        loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
        (loss / accum_steps).backward()
    optimizer.step()
    optimizer.zero_grad()


tokens = torch.randint(0, 32, (3, 10))
long_labels, short_labels = torch.randint(0, 32, (3, 10)), torch.randint(0, 32, (3, 10))
short_labels[:, 2:] = IGNORE  # your turn: try short_labels[:, 10:] (no padding)
batches = [(tokens, long_labels), (tokens, short_labels)]
mine, bug = step_gradient(train_accumulated, batches), step_gradient(per_micro_batch_mean, batches)
print(f"real tokens {[int((y != IGNORE).sum()) for _, y in batches]}: the per-micro-batch mean's gradient"
      f" differs from yours by {float((bug - mine).norm() / mine.norm()):.0%}")
