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
# # Lesson 7 — Dynamic padding and length bucketing: exercise
#
# With dynamic padding every batch is padded to its own longest row, so a batch of short sentences
# costs little — *if* the short sentences are batched together. Write the sampler that does it.
#
# Write `bucket_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0)`, returning one
# epoch as a **list of lists of indices** into `lengths`:
#
# * **every index exactly once** per epoch (keep the last, partial batch);
# * exactly one of `batch_size` (at most that many rows per batch) and `max_tokens` (a **token
#   budget**: a batch of more than one row must fit `rows × width <= max_tokens`, where `width` is the
#   batch's longest length **rounded up to a multiple of 8**, as it will be padded) is given;
# * batches as full as those limits allow (not many more batches than needed);
# * rows of similar length together: the padding share should be close to that of a full sort by
#   length (within 6 points);
# * **random**: which rows share a batch must change with `seed` and `epoch` (not only the order
#   of the batches), the same `(seed, epoch)` must give the same batches (no global RNG), and the
#   batch order must not follow length. The usual way (the HF Trainer's `group_by_length`): shuffle with a generator seeded from
#   `(seed, epoch)`, cut the shuffled indices into *mega-batches* (say 50 batches' worth), sort each
#   by length, slice it into batches, then shuffle the order of all the batches.
#
# `effkit.length_buckets.bucket_batches` is the lesson's reference answer: write your own.
#
# **How it is graded.** Outside your notebook: the grader runs your function in a separate process on
# three length distributions, batch sizes, budgets and seeds it draws itself, and judges the lists it
# gets back — coverage (2 points), sizes and budget (2), padding against a full sort (2), randomness
# (2). Then (2 points) it trains **its own** small encoder on its own task with your batches (batch
# size 32, 7 to 11 epochs) against random batches with dynamic padding (each padded to its own
# longest row), epochs interleaved and timed: the interval of your speed-up must lie above 1x
# (measurably faster than dynamic padding alone), with held-out accuracy within 3 points of the
# random batches'.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

# %% nbgrader={"grade": false, "grade_id": "bucket_batches", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bucket_batches(lengths, batch_size=None, max_tokens=None, seed=0, epoch=0):
    """One epoch of length-grouped batches (lists of indices), by rows or by a padded-token budget."""
    ### BEGIN SOLUTION
    lengths = np.asarray(lengths)
    rng = np.random.default_rng([seed, epoch])
    width = lambda rows: -(-int(lengths[rows].max()) // 8) * 8  # noqa: E731  (padded to a multiple of 8)
    typical = batch_size or max(1, max_tokens // (-(-int(np.median(lengths)) // 8) * 8))  # rows per batch, roughly
    order = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(order), 50 * typical):
        mega = order[start:start + 50 * typical]
        mega = mega[np.argsort(lengths[mega], kind="stable")]
        if batch_size:
            batches += [mega[i:i + batch_size] for i in range(0, len(mega), batch_size)]
            continue
        first = 0
        for i in range(1, len(mega) + 1):
            if i == len(mega) or (i + 1 - first) * width(mega[first:i + 1]) > max_tokens:
                batches.append(mega[first:i])
                first = i
    rng.shuffle(batches)
    return [[int(i) for i in b] for b in batches]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_coverage", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_coverage", "lesson7.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_budget", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_budget", "lesson7.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_padding", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_padding", "lesson7.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_randomness", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_randomness", "lesson7.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_speed", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_speed", "lesson7.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. The padding share of a run is
#    (a) padded tokens over computed tokens (rows × padded width), summed over batches;
#    (b) padded tokens divided by real tokens, summed over every batch of the run;
#    (c) zero once an attention mask hides the padded positions from the model.
# 2. Why size batches by a token budget instead of a row count?
#    (a) it removes padding by itself, since each batch then holds only rows of one length;
#    (b) it lets a larger learning rate be used, since every step then sees more tokens;
#    (c) memory and step time follow tokens per step, which then stay about constant.
# 3. Why round padded widths up to a multiple of 8 on a GPU?
#    (a) the attention mask is applied in blocks of 8 positions, so other widths would fail;
#    (b) 16-bit tensor-core matmuls need sides divisible by 8 to run well; the width is a side;
#    (c) it reduces padding, since fewer distinct widths mean fewer wasted positions per batch.
# 4. A length-bucketing sampler keeps training random by
#    (a) sorting by length once, then drawing the batches of that sort in a random order each epoch;
#    (b) dropping the shortest and longest rows, so the widths within a batch vary less;
#    (c) shuffling each epoch, sorting only within mega-batches, then shuffling the batch order.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "a", "q2": "c", "q3": "b", "q4": "c"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson7.ipynb")
