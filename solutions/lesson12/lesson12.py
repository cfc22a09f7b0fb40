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
# # Lesson 12 — Hyperparameter search on a budget: exercise
#
# You get **120 epochs** of training to tune a small classifier. The grader's own exhaustive grid
# (15 learning rates x 6 weight decays = 90 configurations, 9 epochs each) costs 810. Write the
# search *policy* that spends your 120 well: which configuration to try next, and which running
# trial to stop.
#
# ## The loop the grader runs
#
# ```
# search = Search(space, budget=120, max_epochs=9, seed=...)
# while epochs spent < 120:
#     config = search.ask(trial)             # you: the next configuration (or None: done)
#     for epoch in 1 .. 9:                   # the grader trains the trial, one epoch at a time
#         score = validation accuracy after this epoch   (the grader measures it)
#         stop = search.report(trial, epoch, score)       # you: True stops this trial now
#         if stop: break
# ```
#
# Every epoch costs 1 from the budget, whether the trial ends up complete or stopped; a trial
# still running when the budget is spent is cut. A trial that reaches epoch 9 is **complete**.
#
# As in the lesson, the **batch size is held fixed at 128** for every trial (held, not tuned on
# validation accuracy; it is not the fastest batch size the lesson measured): you search the learning
# rate and the weight decay only. Held fixed,
# it also makes every epoch the same count of samples and optimizer steps (2,048 and 16), so the
# budget counts training in units that do not depend on the machine (the grader trains every trial
# itself: a budget of seconds would grade its machine and its load, not your policy). It is not a
# budget of seconds: an epoch's time still varies (the lesson's section 2 prints how far one complete
# trial's time spread at this batch size among the trials that trained: the same samples and steps,
# the machine's noise and perhaps the numbers' own cost; a diverged trial stops computing and
# usually costs less), and your
# policy's own decision time is not charged to it (it is capped apart: 30 s for all the calls of
# one search together, and as much for each replay). The search space (the same dict is passed to `Search` as `space`):
#
# | name | type | range |
# | --- | --- | --- |
# | `lr` | float, log scale | 0.001 to 3.0 (SGD, momentum 0.9) |
# | `weight_decay` | float, log scale | 1e-6 to 0.1 |
#
# `ask(trial)` returns a plain dict such as `{"lr": 0.05, "weight_decay": 1e-4}`, with every value
# inside the space (a `batch_size` other than 128 is refused); `trial` counts 0, 1, 2, ... .
# `report(trial, epoch, score)` returns `True` to stop the trial (ignored at epoch 9). Optuna's
# ask-and-tell interface fits this loop exactly (`study.ask(distributions)`,
# `trial.report(score, epoch)`, `trial.should_prune()`, `study.tell(...)`); a hand-written
# successive halving works too.
#
# **How it is graded** (outside your notebook). The grader draws a pair of tasks of its own (the
# lesson's task, `effkit.hpo.TuningTask`, with seeds you cannot know and its loss multiplied by a
# scale drawn between 0.25 and 64, as a summed loss or a loss weight would: SGD's steps scale with
# it, so the best learning rate lies anywhere from about 0.003 to 2; the second task, on other data,
# has 16 times the first's scale, or a sixteenth: that moves its best learning rate about 16x, and
# the data shifts it too (at scale 1 the best lies anywhere in 0.18-0.56), so the two best learning
# rates lie roughly 5x to 50x apart: every fixed configuration the grader measured stayed within
# the margin over at most 8x of the scales measured (about 10x interpolated), and each one it graded on pairs missed a task of
# every pair tried; search the learning rate on a log scale). On each
# task it creates a fresh `Search` in a process of its own (with the same `seed` both times) and runs
# the loop above: it trains and evaluates every trial itself; only your configurations and stop
# decisions cross. When the budget is spent it **chooses**, among complete trials, the configuration
# with the best mean validation accuracy at epoch 9 (proposing a configuration again runs it on a
# new seed, and the runs are averaged).
#
# * `test_search` (4 points): on each task, the chosen configuration, retrained on 3 fresh seeds,
#   must score a held-out accuracy at most **2 points** below the best configuration of the
#   grader's exhaustive grid, retrained on the same seeds.
# * `test_pruning` (3 points): with the search still passing `test_search`, on each task it must
#   have spent at least **30% less** than the same trials would have cost run to the end (no
#   pruning); its trials must differ between the two tasks (both searches get the same `seed`, so
#   identical traces are a plan fixed by the seed); and on each task at least **85%** of the epochs
#   its stops saved must come from trials that trailed when stopped: a stop counts only if at least
#   a quarter of all the scores reported at that epoch in the search were higher than the stopped
#   trial's. Stopping trials whatever their scores ends good ones as often as weak ones, and fails
#   that rule; stopping trials planned to be weak, whatever they score, can pass it, hence the replay:
#   the grader also replays a few of your stops on a fresh `Search`, each in a new process of its
#   own (your seed, the same scores, except that the stopped trial reports the best score of its
#   epoch): a stop that follows the scores is not made then. Trials planned to trail and stopped whatever they score fail.
#   Which pruner matters: on the grader's calibration draws (its README; the searches without the grid, so these
#   counts are this cell's own rules, savings, evidence and replay, not `test_search`'s, measured on fewer draws)
#   TPE with successive halving met them in 62 of 64 pairs of tasks, seeded random search with halving by hand in
#   18 of 24, TPE with Hyperband in 11 of 24 and TPE with `MedianPruner(n_startup_trials=5)` in 8 of 24 (for those
#   two one task of most pairs saved less than 30%): an honest pruner that stops late passes on some draws, not others.
#   The replays train your recorded trials again, so they reach your policy at a search's pace.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import optuna

# %% nbgrader={"grade": false, "grade_id": "search", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Search:
    """Chooses configurations (ask) and stops weak trials (report); the grader trains them."""

    def __init__(self, space, budget, max_epochs, seed):
        ### BEGIN SOLUTION
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.max_epochs = max_epochs
        self.distributions = {  # every dimension of this space is a float (the batch size is held)
            name: optuna.distributions.FloatDistribution(dim["low"], dim["high"], log=dim.get("log", False))
            for name, dim in space.items()
        }
        # TPE proposes; successive halving (ASHA) stops a trial that is not in the top third of the
        # trials that reached the same rung (1, 3 epochs)
        self.study = optuna.create_study(
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=10),
            pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
        )
        self.running = {}
        ### END SOLUTION

    def ask(self, trial):
        ### BEGIN SOLUTION
        self.running[trial] = self.study.ask(self.distributions)
        return dict(self.running[trial].params)
        ### END SOLUTION

    def report(self, trial, epoch, score):
        ### BEGIN SOLUTION
        t = self.running[trial]
        t.report(score, epoch)
        if epoch == self.max_epochs:
            self.study.tell(t, score)
            return False
        if t.should_prune():
            self.study.tell(t, state=optuna.trial.TrialState.PRUNED)
            return True
        return False
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_search", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_search", "lesson12.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_pruning", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_pruning", "lesson12.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., ..., "q5": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. Successive halving with reduction factor 3 starts 27 configurations at 1 epoch, keeps the best
#    third at each rung and trains the survivors 3 times longer. How many reach 9 epochs?
#    (a) 9; (b) 3; (c) 1.
# 2. Two configurations score 71.2% and 71.6% validation accuracy; re-running one configuration on
#    other seeds moves it by about ±1 point. What do you conclude?
#    (a) take the 71.6% one: both had the same budget, and it scored higher;
#    (b) take the one with the smaller batch, whose noisier gradients generalise;
#    (c) neither wins yet: re-run both on new seeds and compare the means.
# 3. Why does random search usually beat a grid of the same number of trials when one hyperparameter
#    matters much more than the others (Bergstra & Bengio, 2012)?
#    (a) 9 random trials try 9 values of the important one; a 3 x 3 grid tries 3;
#    (b) a grid's trials depend on one another, so they cannot run in parallel;
#    (c) random points avoid the grid's corners, where training tends to diverge.
# 4. The risk of stopping trials after their first epoch is that
#    (a) it stops too few trials to save much compute over running the full grid;
#    (b) it favours fast starters over the configurations that end best;
#    (c) a rung waits for all trials' first epochs, so it cannot run in parallel.
# 5. A team runs trials on 8 machines. With Optuna they
#    (a) point every worker at one study in shared storage (an RDB URL, or a journal file);
#    (b) run an in-memory study per machine, each with its own seed, then keep the overall best;
#    (c) set `n_jobs=8` in `study.optimize`, which spreads the trials over the machines.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "b", "q2": "c", "q3": "a", "q4": "b", "q5": "a"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson12.ipynb")
