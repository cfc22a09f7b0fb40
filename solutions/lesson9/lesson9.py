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
# # Lesson 9 — Knowledge distillation: exercise
#
# A small *student* learns from a large *teacher* by matching its softened output distribution as
# well as the labels (Hinton, Vinyals & Dean 2015):
#
# `loss = alpha * T² * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(student, labels)`
#
# ## Part (a): the distillation loss
#
# Write `distillation_loss(student_logits, teacher_logits, labels, temperature, alpha)`:
#
# * logits have shape `(N, C)`, `labels` holds `N` class indices;
# * the KL term compares the two distributions **softened by the temperature**, is averaged **per
#   sample** (the sum over classes, then the mean over the batch: `reduction="batchmean"`), and is
#   multiplied by `T²`, which keeps its gradient the same size whatever `T`;
# * the cross-entropy uses the student's plain logits and the true labels;
# * return a scalar tensor the student's logits can be differentiated through.
#
# Mind `F.kl_div(input, target)`: it computes `KL(target || input)` and expects `input` as
# **log**-probabilities. Write it yourself with `torch.nn.functional`; `effkit.distill.kd_loss` is
# the lesson's reference answer.
#
# **How it is graded.** Outside your notebook: the grader runs your function in a separate process
# on logits, labels, temperatures (2 to 5) and mixing weights it draws itself, and compares the
# value (3 points) and the gradient with respect to the student's logits (2 points) with its own
# reference, in float64. When they differ it recomputes the usual mistakes and names the one you made.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch
import torch.nn.functional as F

# %% nbgrader={"grade": false, "grade_id": "distillation_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def distillation_loss(student_logits, teacher_logits, labels, temperature, alpha):
    """alpha * T^2 * KL(teacher_T || student_T) (per sample) + (1 - alpha) * CE(student, labels)."""
    ### BEGIN SOLUTION
    student_log_probs = F.log_softmax(student_logits / temperature, dim=-1)
    teacher_log_probs = F.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    soft = F.kl_div(student_log_probs, teacher_log_probs, reduction="batchmean", log_target=True)
    hard = F.cross_entropy(student_logits, labels)
    return alpha * temperature**2 * soft + (1 - alpha) * hard
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_loss_value", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_loss_value", "lesson9.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_loss_gradient", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_loss_gradient", "lesson9.ipynb")

# %% [markdown]
# ## Part (b): a distillation recipe
#
# The grader owns a small task: a **teacher** MLP with 4 hidden layers of width 256, trained on
# 16,384 samples, and only **512 labelled samples** for the student (the sample budget: 30 epochs
# over them, Adam, batch 64). Choose how to distil it, **under constraints the grader draws for
# each grading**:
#
# `distillation_recipe(constraints)` returns plain data,
# `{"temperature": float, "alpha": float, "student_layers": int, "student_init": "teacher" | "scratch"}`:
# the temperature `T`, the weight `alpha` of the soft term, the student's number of hidden layers
# (1 to 4, width 256 as the teacher's) and its initialisation — the teacher's own layers (every
# other one, as DistilBERT) or fresh random weights. `constraints` is a dict:
# `constraints["teacher"]`, the teacher's shape (`inputs`, `width`, `hidden_layers`, `classes`) and
# `weights_available` — when false the teacher is a black box (only its logits, as from a served
# model), so its layers cannot be copied; and `constraints["labelled_samples"]`. A fixed
# initialisation fails some gradings: decide it from the constraints.
#
# **How it is graded** (3 points). Your function only *chooses*; the grader draws the constraints,
# checks your choice against them, then trains, in its own process, with `effkit.distill.kd_loss`
# and the teacher's logits cached once. On three tasks it draws, your student must beat **the same
# student (same depth, same initialisation, same samples and steps) trained on labels alone** by at
# least 3 points of held-out accuracy on average, and be **measurably faster at inference than the
# teacher** (the grader times both, interleaved, and the 95% interval of the speed ratio must lie
# above 1).

# %% nbgrader={"grade": false, "grade_id": "distillation_recipe", "locked": false, "schema_version": 3, "solution": true, "task": false}
def distillation_recipe(constraints):
    """Temperature, soft-term weight, student depth and initialisation for these constraints, as plain data."""
    ### BEGIN SOLUTION
    teacher = constraints["teacher"]
    # Every other layer, as DistilBERT: fewer layers to run at inference, a student faster than the teacher.
    layers = max(1, teacher["hidden_layers"] // 2)
    # Copy the teacher's layers when they are available (a head start); a black box gives logits only.
    init = "teacher" if teacher["weights_available"] else "scratch"
    # T = 4 softens the teacher's outputs; most weight on the soft term: 512 labels say less than it.
    return {"temperature": 4.0, "alpha": 0.9, "student_layers": layers, "student_init": init}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_recipe", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_recipe", "lesson9.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. Why multiply the soft term by `T²`?
#    (a) to keep the KL term positive, since at a high `T` it can otherwise dip below zero;
#    (b) to normalise the soft targets over the classes, which softening spreads out;
#    (c) its gradients shrink as `1/T²`, so without it the soft term fades as `T` grows.
# 2. Training data without random augmentation, a frozen teacher: the cheapest way to get its logits
#    is
#    (a) to run the teacher in every step, under `no_grad` and in eval mode;
#    (b) to run it in train mode, so that dropout regularises the targets;
#    (c) to compute them once for the whole set and cache them.
# 3. A student keeps 3 of a 6-layer encoder's layers (embeddings and head kept). Its inference
#    compute per token is about
#    (a) the same (width is unchanged); (b) half the encoder's; (c) a quarter.
# 4. What does distilling a teacher into a smaller student buy, and at what price?
#    (a) a model cheaper to serve than the teacher, paid for by teacher forwards in training;
#    (b) cheaper training steps than labels alone, since soft targets carry more signal;
#    (c) the teacher's accuracy at the student's serving cost, since it copies the outputs.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "c", "q2": "c", "q3": "b", "q4": "a"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson9.ipynb")
