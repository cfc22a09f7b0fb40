# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 12 — Hyperparameter search on a budget
#
# **Goal:** find a good configuration for a fixed amount of compute, and know when the "winner" is
# real. We will:
#
# 1. count what an exhaustive grid costs — and run it, as the reference;
# 2. run random search and Optuna's TPE sampler with the same budget, every epoch on the clock;
# 3. stop weak trials early: Optuna's median, successive-halving (ASHA) and Hyperband pruners;
# 4. plot each search's cost to a target (epochs, samples, seconds);
# 5. re-run the top configurations on new seeds: the seed noise is the floor below which no
#    winner exists;
# 6. run trials in parallel through one study in a shared storage (SQLite here; a database or a
#    journal file across machines).
#
# **Run time** (measured on a 2-core AMD EPYC VM, no GPU, with other jobs running): 1 to 2.5 min in
# `cpu` (60 s executed by nbclient at load average 1.9-3.1; 140 s at 3.6-4.5, the two parallel
# workers alone 23 s of it), 17-39 s in `smoke` (the test harness's runs at load ~3-5). The
# summary's last line prints this run's own time.
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (the same sizes: the task is
# a small MLP, a GPU buys nothing here), `smoke` (tests only: a coarse grid, tiny budgets; its
# numbers show the code runs, not what is true). The task is `effkit.hpo.TuningTask`: a synthetic
# 4-class problem (2,048 training, 2,048 validation and 4,096 held-out samples) and an MLP trained
# with SGD + momentum and a cosine schedule, a few milliseconds per epoch, so that hundreds of
# trials fit in minutes. The search space is the one every earlier lesson tuned by hand: the
# learning rate (log scale), the batch size and the weight decay. The graded exercise and the quiz
# are in `exercises/lesson12/`.

# %%
# %matplotlib inline
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import optuna
from matplotlib.patches import FancyBboxPatch
from tqdm.auto import tqdm

from effkit import lesson
from effkit.hpo import SPACE, Ledger, TuningTask, full_run, optuna_objective
from effkit.measure import device_name

# %%
LESSON_START = time.perf_counter()
PROFILE = lesson.profile()
DEVICE_NAME = device_name(lesson.device())
SIZES = {
    "smoke": dict(n_train=512, n_val=512, n_test=1024, max_epochs=3, budget=24, grid_lr=4, grid_bs=[64, 256],
                  grid_wd=[1e-4], search_seeds=1, top=2, noise_seeds=3, workers=2, worker_trials=2),
    "cpu": dict(n_train=2048, n_val=2048, n_test=4096, max_epochs=9, budget=150, grid_lr=8,
                grid_bs=[32, 64, 128, 256, 512], grid_wd=[1e-6, 1e-4, 1e-2], search_seeds=5, top=3, noise_seeds=5,
                workers=2, worker_trials=8),
}
SIZES["gpu"] = SIZES["cpu"]
S = SIZES[PROFILE]
optuna.logging.set_verbosity(optuna.logging.WARNING)
task = TuningTask(seed=0, n_train=S["n_train"], n_val=S["n_val"], n_test=S["n_test"], max_epochs=S["max_epochs"])
print(f"profile {PROFILE!r} on {DEVICE_NAME} (one thread per trial); a trial trains at most {task.max_epochs} epochs "
      f"of {len(task.x):,} samples; each search gets {S['budget']} epochs")

# %% [markdown]
# ## 1. What a grid costs
#
# A grid tries every combination: 8 learning rates x 5 batch sizes x 3 weight decays is 120
# configurations, each trained to the end. Its cost grows as the *product* of the axes — and every
# axis you add multiplies it again (warm-up, precision, accumulation: 3 more axes of 3 values make it
# 27 times dearer). Here the grid is the reference: the best any search could find on these points.

# %%
lrs = [10 ** (-3 + 3.5 * i / max(S["grid_lr"] - 1, 1)) for i in range(S["grid_lr"])]
lrs = [min(v, SPACE["lr"]["high"]) for v in lrs]
grid = [{"lr": lr, "batch_size": b, "weight_decay": wd} for lr in lrs for b in S["grid_bs"] for wd in S["grid_wd"]]
grid_ledger = Ledger("grid", len(task.x))
for i, config in enumerate(tqdm(grid, desc="grid")):
    trial = task.trial(config, seed=10_000 + i)
    for _ in range(task.max_epochs):
        start = time.perf_counter()
        score = trial.step()
        grid_ledger.charge(time.perf_counter() - start)
    grid_ledger.trials += 1
    grid_ledger.finish(config, score)
per_epoch = grid_ledger.seconds / grid_ledger.epochs
TARGET = grid_ledger.best - 0.01  # within 1 point of the grid's best validation accuracy
print(f"grid: {len(grid)} configurations x {task.max_epochs} epochs = {grid_ledger.epochs} epochs "
      f"({grid_ledger.epochs * len(task.x):,} samples), {grid_ledger.seconds:.1f} s on this CPU "
      f"({per_epoch * 1000:.1f} ms per epoch, evaluation included)")
print(f"grid's best: {grid_ledger.best:.1%} validation at {grid_ledger.best_config}; target for the searches: "
      f"{TARGET:.1%}")
print(f"the same grid with 3 more axes of 3 values: {27 * grid_ledger.epochs:,} epochs, "
      f"~{27 * grid_ledger.seconds / 60:.0f} min here")

# %% [markdown]
# ### Every trial's cost on the clock
#
# A search charged in *epochs* pays the same for every epoch; the clock does not. An epoch at batch
# 32 takes 64 optimizer steps over the 2,048 samples, one at batch 512 takes 4: the same samples,
# fewer and larger matrix multiplications. Measured, interleaved (one thread, as the trials run):

# %%
def epoch_of(batch_size):
    trial = task.trial({"lr": 0.05, "batch_size": batch_size, "weight_decay": 1e-4}, seed=7)

    def run():
        for _ in range(3):  # three epochs per burst (each with the validation pass a search pays for)
            trial.step()
        return 3 * len(task.x)
    return run


epoch_ab = lesson.ab("one epoch of a trial: batch 32 vs batch 512", epoch_of(32), epoch_of(512), pairs=6,
                     a_label="batch 32", b_label="batch 512")
epoch_line = {"faster": f"an epoch at batch 512 ran {epoch_ab.ratio:.1f}x as fast as one at batch 32: a budget in "
                        "epochs charges them alike, the clock (and a GPU-hour bill) does not — the tables below give "
                        "both",
              "slower": f"an epoch at batch 512 ran slower ({epoch_ab.ratio:.2f}x) than one at batch 32 here",
              "no clear difference": "no per-epoch cost difference between batch 32 and 512 that this measurement "
                                     "can resolve"}[epoch_ab.verdict.word]
print(epoch_line)

# %% [markdown]
# ## 2 and 3. Searches with the same budget, with and without pruning
#
# Each search below gets the same budget of epochs. **Random search** samples the space (Bergstra &
# Bengio 2012: when one axis matters most, 9 random trials try 9 learning rates where a 3 x 3 grid
# tries 3). **TPE** (Bergstra et al. 2011, Optuna's default sampler) fits densities to the good and
# the bad trials so far and samples where the ratio favours the good. The **pruners** stop a trial
# between epochs: the *median* pruner (Optuna's `MedianPruner`) when the trial's *best* score so far
# is below the median of the *completed* trials' scores at the same epoch, and only once
# `n_startup_trials` trials have completed and the trial is past `n_warmup_steps`; *successive
# halving* (Jamieson & Talwalkar 2016; asynchronous: ASHA, Li et al. 2020) keeps only the top 1/η of
# the trials at each rung (1, 3, 9 epochs for η = 3, as drawn below); *Hyperband* (Li et al. 2018)
# runs several successive halvings that start at different rungs, hedging against a first epoch that
# predicts badly. The "TPE + SHA" search below uses Optuna's defaults, which differ
# from the drawing: `SuccessiveHalvingPruner()` keeps the top quarter (η = 4) and picks its first
# rung itself (`min_resource="auto"`).

# %%
fig, ax = plt.subplots(figsize=(8, 2.6))
for i, (n, r) in enumerate(((27, 1), (9, 3), (3, 9))):
    ax.add_patch(FancyBboxPatch((i * 2.8, 0.2), 2.2, 0.3 + 0.09 * n, boxstyle="round,pad=0.05", color="tab:blue",
                                alpha=0.25 + 0.2 * i))
    ax.text(i * 2.8 + 1.1, 0.35 + 0.045 * n, f"{n} trials\nx {r} epoch{'s' if r > 1 else ''}", ha="center",
            va="center", fontsize=9)
    if i < 2:
        ax.annotate("", xy=(i * 2.8 + 2.75, 0.6), xytext=(i * 2.8 + 2.3, 0.6), arrowprops={"arrowstyle": "->"})
        ax.text(i * 2.8 + 2.5, 0.75, "top 1/3", ha="center", fontsize=8)
ax.text(8.6, 1.4, "cost: 27x1 + 9x2 + 3x6\n= 63 epochs for 27 configs\n(a grid of 27: 243)", fontsize=8)
ax.set(xlim=(-0.2, 11), ylim=(0, 3), title="Successive halving (η = 3): most trials stop at the first rung")
ax.axis("off")
plt.show()

# %% [markdown]
# **Predict.** Random search trains every trial to the end, so with this budget it examines about
# budget / 9 configurations. How many will TPE with the successive-halving pruner examine with the
# same budget?

# %%
GUESS_TRIALS_WITH_SHA = None  # your guess, e.g. 30

# %% [markdown]
# ## Your turn
#
# Choose a pruner of your own (its parameters too) — for instance
# `optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1)` or
# `optuna.pruners.SuccessiveHalvingPruner(reduction_factor=2)` — and it runs below next to the others.

# %%
def my_pruner():
    return optuna.pruners.SuccessiveHalvingPruner(reduction_factor=2)  # your turn: change it


# %%
METHODS = {
    "random": (lambda s: optuna.samplers.RandomSampler(seed=s), lambda: optuna.pruners.NopPruner()),
    "TPE": (lambda s: optuna.samplers.TPESampler(seed=s), lambda: optuna.pruners.NopPruner()),
    "TPE + median": (lambda s: optuna.samplers.TPESampler(seed=s),
                     lambda: optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1)),
    "TPE + SHA": (lambda s: optuna.samplers.TPESampler(seed=s), lambda: optuna.pruners.SuccessiveHalvingPruner()),
    "TPE + Hyperband": (lambda s: optuna.samplers.TPESampler(seed=s),
                        lambda: optuna.pruners.HyperbandPruner(min_resource=1, max_resource=task.max_epochs)),
    "TPE + yours": (lambda s: optuna.samplers.TPESampler(seed=s), my_pruner),
}
searches: dict[str, list[Ledger]] = {}
for name, (sampler, pruner) in tqdm(METHODS.items(), desc="searches"):
    for seed in range(S["search_seeds"]):
        ledger = Ledger(name, len(task.x))
        study = optuna.create_study(direction="maximize", sampler=sampler(seed), pruner=pruner())
        study.optimize(optuna_objective(task, ledger, budget=S["budget"], seed=seed), n_trials=10 * S["budget"])
        searches.setdefault(name, []).append(ledger)


def mean(values):
    values = list(values)
    return sum(values) / len(values)


rows = []
for name, ledgers in searches.items():
    reached = [c for c in (ledger.cost_to(TARGET) for ledger in ledgers) if c is not None]
    rows.append({"name": name, "trials": mean(lg.trials for lg in ledgers), "complete": mean(lg.complete for lg in ledgers),
                 "best": mean(lg.best for lg in ledgers), "saved": mean(lg.saved for lg in ledgers),
                 "hits": len(reached), "median_epochs": statistics.median(e for e, _ in reached) if reached else None,
                 "median_seconds": statistics.median(s for _, s in reached) if reached else None})
print(f"{'search':16} {'trials':>7} {'complete':>9} {'best val':>9} {'saved':>6}  target {TARGET:.1%}: reached, "
      f"median cost (means and medians over {S['search_seeds']} search seed(s))")
for r in rows:
    cost = (f"{r['median_epochs']:.0f} epochs / {r['median_seconds']:.1f} s" if r["hits"] else "-")
    print(f"{r['name']:16} {r['trials']:7.1f} {r['complete']:9.1f} {r['best']:9.1%} {r['saved']:6.0%}  "
          f"{r['hits']} of {S['search_seeds']}, {cost}")
sha_trials = mean(lg.trials for lg in searches["TPE + SHA"])
random_trials = mean(lg.trials for lg in searches["random"])
lesson.check_guess(GUESS_TRIALS_WITH_SHA, sha_trials, "configurations TPE + SHA examined", "{:.0f}")
print(f"the grid reached its own best after {grid_ledger.epochs} epochs ({grid_ledger.seconds:.1f} s); "
      f"'saved': the share of the same trials' unpruned cost that the pruner's stops saved")
print(f"every method ran with the same sampler seeds 0-{S['search_seeds'] - 1} on the same task; a search whose first "
      f"trial lands near the best reaches the target at {task.max_epochs} epochs, whatever its pruner")
out = Path("..") / "runs" / "lesson12"  # the repository's runs/, which the cost-to-target dashboard reads
out.mkdir(parents=True, exist_ok=True)
(out / "searches.json").write_text(json.dumps({
    "workload": "lesson12-hpo", "profile": PROFILE, "device": DEVICE_NAME,
    "recipes": {"grid": grid_ledger.as_recipe(TARGET), **{n: lg[0].as_recipe(TARGET) for n, lg in searches.items()}}},
    indent=1))
print(f"wrote {(out / 'searches.json').resolve()}: `make dashboard` (python -m effkit.dashboard) plots each "
      "search's cost to target beside the course's other runs")

# %%
fig, axes = plt.subplots(2, 3, figsize=(11, 5.5), sharex=True, sharey=True)
for ax, r, (name, ledgers), colour in zip(axes.flat, rows, searches.items(), plt.cm.tab10.colors, strict=False):
    for ledger in ledgers:  # one line per search seed: the spread is the searches' own luck
        points = [(0, 0.0)] + [(e, b) for e, _, b in ledger.curve] + [(ledger.epochs, ledger.best)]
        ax.step(*zip(*points, strict=True), where="post", color=colour, alpha=0.8, lw=1.2)
    ax.axhline(TARGET, color="grey", ls="--", lw=0.8)
    reached = f"median {r['median_epochs']:.0f} epochs" if r["hits"] else "never"
    ax.set_title(f"{name}: target {r['hits']}/{len(ledgers)}, {reached}", fontsize=9)
for ax in axes[-1]:
    ax.set_xlabel(f"epochs paid for (x {len(task.x):,} samples)")
for ax in axes[:, 0]:
    ax.set_ylabel("best complete trial\n(validation)")
top_score = max([grid_ledger.best] + [lg.best for ledgers in searches.values() for lg in ledgers])
axes[0][0].set(xlim=(0, S["budget"]), ylim=(max(0.0, TARGET - 0.12), top_score + 0.01))
fig.suptitle(f"Cost to target ({TARGET:.1%}, dashed): {S['search_seeds']} searches per method, {S['budget']} epochs "
             f"each; the grid needs {grid_ledger.epochs} — {DEVICE_NAME}", fontsize=10)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Seed noise: is the winner real?
#
# A search maximises a *validation* score of *one* training run per trial; the run's seed (the
# initial weights, the order of the batches) moves that score too. Before choosing, re-run the top
# configurations on new seeds and compare them on the held-out set: when the interval of their
# *difference* contains 0, this budget cannot name a winner, and any of them is as good a choice as
# it can tell. (Two intervals that overlap can still differ measurably: read the difference's.)
#
# **Predict.** By how many points does the held-out accuracy of one configuration vary between seeds
# (its standard deviation)?

# %%
GUESS_SEED_SD_POINTS = None  # your guess, e.g. 0.5

# %%
finalists = sorted((f for ledgers in searches.values() for ledger in ledgers for f in ledger.completed),
                   key=lambda f: -f[0])  # every complete trial of every search, best validation first
top, seen = [], set()
for _val, config in finalists:
    key = tuple(sorted(config.items()))
    if key not in seen:
        seen.add(key)
        top.append(config)
top = top[:S["top"]]
reruns = {}
for i, config in enumerate(top):
    reruns[i] = [full_run(task, config, seed=50_000 + s)[1] for s in range(S["noise_seeds"])]
    shown = ", ".join(f"{k} {v:.3g}" for k, v in config.items())
    print(f"#{i + 1} ({shown}): held out {mean(reruns[i]):.2%} ± {statistics.stdev(reruns[i]):.2%} SD over "
          f"{S['noise_seeds']} new seeds")
seed_sd = mean(statistics.stdev(v) for v in reruns.values())
lesson.check_guess(GUESS_SEED_SD_POINTS, 100 * seed_sd, "seed-to-seed SD of held-out accuracy, points", "{:.2f}")
# a t interval for the difference #1 - #2 (95% only if the accuracies are normal; few seeds)
a, b = reruns[0], reruns[1]
diff = mean(a) - mean(b)
se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
T95 = {2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31}  # t quantiles, df = 2 (n - 1)
half = T95.get(2 * (S["noise_seeds"] - 1), 2.0) * se
distinguishable = abs(diff) > half
winner_line = (f"the top two differ by {diff * 100:+.2f} points held out (approximate 95% t interval {100 * (diff - half):+.2f} to "
               f"{100 * (diff + half):+.2f}, {S['noise_seeds']} seeds each): "
               + ("a difference the seeds can resolve" if distinguishable else
                  "not distinguishable: no winner between them at this budget — take either"))
print(winner_line)

# %% [markdown]
# ## 6. Parallel trials through a shared storage
#
# Optuna keeps a study in a *storage*; every process that opens the same study name in the same
# storage adds its trials to it, and its sampler and pruner read everyone's. On one machine a
# SQLite file is enough (it locks the whole file on writes: fine for a few workers). Across machines
# a team points every worker at a database server or a journal file on a shared disk, with the
# **same command** on every machine:
#
# ```bash
# # once:
# optuna create-study --storage postgresql://USER:PASSWORD@DB-HOST/optuna --study-name team-search \
#     --direction maximize
# # then on each of N machines (a different --seed each):
# python -m effkit.hpo worker --storage postgresql://USER:PASSWORD@DB-HOST/optuna --study team-search \
#     --trials 50 --seed $RANK
# ```
#
# or, without a database server, a journal file on a shared file system:
# `optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend("/shared/study.log"))`.
# Below: two workers at once on this machine, one SQLite file.

# %%
db = out / "study.db"
db.unlink(missing_ok=True)
storage, study_name = f"sqlite:///{db}", "lesson12-parallel"
optuna.create_study(study_name=study_name, storage=storage, direction="maximize")  # once, before the workers
env = dict(os.environ, OMP_NUM_THREADS="1")
start = time.perf_counter()
procs = [subprocess.Popen([sys.executable, "-m", "effkit.hpo", "worker", "--storage", storage, "--study", study_name,
                           "--trials", str(S["worker_trials"]), "--seed", str(k), "--n-train", str(S["n_train"]),
                          "--max-epochs", str(S["max_epochs"])], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for k in range(S["workers"])]
for p in procs:
    print(p.communicate()[0].strip().splitlines()[-1])
parallel_seconds = time.perf_counter() - start
shared = optuna.load_study(study_name=study_name, storage=storage)
states = [t.state.name for t in shared.trials]
parallel_line = (f"{S['workers']} workers, one study in {db}: {len(shared.trials)} trials "
                 f"({states.count('COMPLETE')} complete, {states.count('PRUNED')} pruned) in {parallel_seconds:.1f} s "
                 f"wall; best {shared.best_value:.1%}")
print(parallel_line)

# %% [markdown]
# ### In your own words
#
# Sections 2–5 gave every search the same epoch budget, then re-ran the top configurations on new
# seeds. Explain in 2–3 sentences why a pruned search can examine more configurations than random
# search on that budget, what stopping trials early risks, and why seed noise limits which winner
# you can claim.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=12)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(12, DEVICE_NAME))
print(f"* grid: {len(grid)} configurations, {grid_ledger.epochs} epochs, {grid_ledger.seconds:.1f} s; best "
      f"{grid_ledger.best:.1%} validation; target {TARGET:.1%}")
print(f"  ({grid_ledger.seconds / 3600:.4f} device-hours of this CPU; a GPU-hour figure needs a GPU run, not measured here)")
print(f"* per epoch: {epoch_ab.verdict}")
print(f"* so: {epoch_line}")
for r in rows:
    cost = (f"median {r['median_epochs']:.0f} epochs / {r['median_seconds']:.1f} s "
            f"({r['median_epochs'] / grid_ledger.epochs:.0%} of the grid's epochs)" if r["hits"] else "never")
    print(f"* {r['name']}: {r['trials']:.0f} trials ({r['complete']:.0f} complete) per {S['budget']}-epoch search, "
          f"pruning saved {r['saved']:.0%}, best {r['best']:.1%}; target reached by {r['hits']} of "
          f"{S['search_seeds']} searches, {cost}")
print(f"* so: with the same budget TPE + SHA examined {sha_trials / random_trials:.1f}x as many configurations as "
      f"random search ({sha_trials:.0f} vs {random_trials:.0f}); {S['search_seeds']} search seeds are too few for an "
      "interval on the cost to target: read the medians as an indication, not a ranking")
print(f"* seed noise: held-out SD {100 * seed_sd:.2f} points per configuration; {winner_line}")
print(f"* parallel: {parallel_line}")
print(f"* this run took {time.perf_counter() - LESSON_START:.0f} s in profile {PROFILE!r} on {DEVICE_NAME}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson12/`: write a search policy (Optuna
# allowed) that chooses configurations and stops trials; the grader runs the search on a task of
# its own, trains every trial itself, and compares your choice with its own exhaustive grid.
#
# ### References
#
# * J. Bergstra, Y. Bengio, *Random Search for Hyper-Parameter Optimization*, JMLR 13, 2012.
# * J. Bergstra, R. Bardenet, Y. Bengio, B. Kégl, *Algorithms for Hyper-Parameter Optimization*,
#   NeurIPS 2011 (TPE).
# * K. Jamieson, A. Talwalkar, *Non-stochastic Best Arm Identification and Hyperparameter
#   Optimization*, AISTATS 2016 (successive halving).
# * L. Li, K. Jamieson, G. DeSalvo, A. Rostamizadeh, A. Talwalkar, *Hyperband: A Novel Bandit-Based
#   Approach to Hyperparameter Optimization*, JMLR 18, 2018, [arXiv:1603.06560](https://arxiv.org/abs/1603.06560).
# * L. Li et al., *A System for Massively Parallel Hyperparameter Tuning*, MLSys 2020 (ASHA),
#   [arXiv:1810.05934](https://arxiv.org/abs/1810.05934).
# * T. Akiba, S. Sano, T. Yanase, T. Ohta, M. Koyama, *Optuna: A Next-generation Hyperparameter
#   Optimization Framework*, KDD 2019, [arXiv:1907.10902](https://arxiv.org/abs/1907.10902); Optuna's
#   documentation on [pruners](https://optuna.readthedocs.io/en/stable/reference/pruners.html) and
#   [storages](https://optuna.readthedocs.io/en/stable/reference/storages.html).
#
# ### What to try next
#
# * Search the recipes of the earlier lessons: warm-up steps, accumulation, precision — each axis a
#   grid would multiply, a sampler only adds.
# * Give the pruners a task whose first epoch predicts the last one badly (a small learning rate
#   that starts slowly and ends best): successive halving then drops the eventual winner, Hyperband's
#   later brackets keep it.
