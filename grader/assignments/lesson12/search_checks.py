"""Lesson 12: a search under a fixed budget, driven and trained by the grader, the learner's policy only choosing.

The chosen configuration is judged against the grader's own grid search, and pruning by budget
saved with the search still good. One search serves both cells; ``POLICY_SECONDS`` caps the
policy's time so a slow policy fails instead of stalling a grading.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from grader.assignments.lesson12 import hpo_task as ht
from grader.kit.checks import CheckFailed, Context, expect, stub_reason

# Epochs the search may spend. With the batch size held (hpo_task.FIXED) every epoch is the same count of samples
# and optimizer steps (2,048 and 16), so the budget counts training in units that do not depend on the machine:
# the grader trains every trial itself, and a budget in seconds would grade its load, not the policy. It is not a
# budget of seconds: an epoch's time still varies (the lesson prints one complete trial's spread at batch 128
# among the trials that trained, the same samples and steps, the machine's noise and perhaps the numbers' (not
# measured); a diverged trial stops computing and usually
# costs less), and the policy's own decision
# time is not charged to it (POLICY_SECONDS caps that apart). Calibration: the README.
BUDGET = 120
MAX_TRIALS = 200
CALL_SECONDS = 20
POLICY_SECONDS = 30.0  # the policy's decisions, all calls together, on the parent's clock
FINAL_SEEDS = 3
MARGIN = 0.02  # held-out accuracy below the grid's best; calibration: grader/assignments/lesson12/README.md
MIN_SAVED = 0.3  # share of the unpruned cost of the same trials; calibration: grader/assignments/lesson12/README.md
# A stop is evidence of pruning when the trial it ended trailed the others at its epoch: at least TRAILED of all
# the scores reported at that epoch over the whole search (the stopped trial's own included) lie strictly above
# its score, so it was outside that epoch's top quarter. Successive halving, the median pruner and Hyperband stop
# mostly such trials; stops made whatever the scores (a blind pruner) hit the top quarter as often as the rest.
TRAILED = 0.25
# share of the epochs saved by stops that must come from such stops; calibration: the README
MIN_EVIDENCE = 0.85
# A trailing trial can be known to trail before it runs (the smallest learning rates of the space, on every task
# of the family): the evidence share cannot tell a stop made because of the score from one planned in advance.
# So PROBES of each task's stops (drawn in proportion to the epochs they saved) are replayed on a fresh Search
# with the same seed: the same asks answered, the same scores reported, except that the probed trial reports the
# best score of its epoch in the search at every epoch up to its stop. A stop that follows the scores is not made
# then; every probed stop must follow them (README, "Stops replayed as the best").
PROBES = 3


@dataclass
class SearchRun:
    task_seed: int
    policy_seed: int = 0
    trials: list[dict] = field(default_factory=list)  # config, scores, status
    spent: int = 0
    policy_seconds: float = 0.0
    train_seconds: float = 0.0
    ended: str = ""
    failure: str = ""  # a refused answer: the search stopped there

    @property
    def unpruned_cost(self) -> int:
        """What the same trials cost had none been stopped (the search without pruning): a stopped
        trial charged its full MAX_EPOCHS; one cut by the budget only what it ran (no decision of yours)."""
        return self.spent + sum(
            ht.MAX_EPOCHS - len(t["scores"]) for t in self.trials if t["status"] == "stopped"
        )

    @property
    def saved(self) -> float:
        return 1.0 - self.spent / self.unpruned_cost if self.spent else 0.0

    def evidence(self) -> tuple[int, int]:
        """(epochs saved by stopping trials that trailed at their epoch, epochs saved by all stops): a stopped
        trial saves the MAX_EPOCHS it did not run; it trailed when at least TRAILED of every score reported at
        its last epoch in this search (its own included) lies strictly above its own (ties, e.g. diverged
        trials at chance, are not above one another)."""
        at: dict[int, list[float]] = {}
        for t in self.trials:
            for epoch, score in enumerate(t["scores"], 1):
                at.setdefault(epoch, []).append(score)
        trailed = saved = 0
        for t in self.trials:
            if t["status"] != "stopped":
                continue
            epoch, score = len(t["scores"]), t["scores"][-1]
            saved += ht.MAX_EPOCHS - epoch
            if sum(s > score for s in at[epoch]) >= TRAILED * len(at[epoch]):
                trailed += ht.MAX_EPOCHS - epoch
        return trailed, saved


def _call(ctx: Context, run: SearchRun, probe: str, what: str, **args) -> dict:
    start = time.perf_counter()
    r = ctx.session.call(probe, CALL_SECONDS, **args)
    run.policy_seconds += time.perf_counter() - start
    if not r.ok:
        stub = [e for e in ctx.session.load_errors if e.get("cell") == "search"]
        raise CheckFailed(
            stub_reason(stub[0]["message"] if stub else r.failure) or f"{what} {r.failure}"
        )
    expect(
        run.policy_seconds <= POLICY_SECONDS,
        f"your policy took {run.policy_seconds:.0f} s to decide (at most {POLICY_SECONDS:.0f} s in all): "
        f"a search policy must be cheap next to the trials it runs",
    )
    return r.data


def _fresh_worker(ctx: Context) -> None:
    """Ends the session's worker, so that the next call starts a new one with the learner's cells run afresh:
    each search and each replay (``replay_stops_again``) begins in a process of its own, and a policy carries
    nothing from one to the next by which it could tell a replay from a search (a class attribute counting
    its instances, a module's global, an environment variable it set; as root also a file it wrote, the worker's
    /tmp and /dev/shm being tmpfs of its own; not as root, the host's /tmp is shared and said in the report's
    ``unavailable``). ``ProbeSession.close``; the in-process stand-ins of the tests and the calibration run the
    cells again in a fresh namespace. A new worker costs ~0.3 s (2-core Xeon, quiet), charged, as the first
    worker's start always was, to the search's ``POLICY_SECONDS``."""
    ctx.session.close()


def run_search(ctx: Context, task_seed: int, policy_seed: int) -> SearchRun:
    """The ask-and-tell loop on a fresh ``Search`` in a fresh worker: the policy chooses, this process trains,
    measures and charges."""
    run = SearchRun(task_seed, policy_seed)
    _fresh_worker(ctx)
    _call(
        ctx,
        run,
        "start",
        "Search(...)",
        space=ht.SPACE,
        budget=BUDGET,
        max_epochs=ht.MAX_EPOCHS,
        seed=policy_seed,
    )
    while run.spent < BUDGET and len(run.trials) < MAX_TRIALS:
        n = len(run.trials)
        answer = _call(ctx, run, "ask", f"ask({n})", trial=n).get("config")
        if answer is None:
            run.ended = "ask() returned None"
            break
        try:
            config = ht.validate(answer)
        except CheckFailed as err:
            raise CheckFailed(f"trial {n}: {err}") from err
        record = {
            "config": config,
            "scores": [],
            "status": "running",
            "seed": ctx.rng.randrange(1 << 30),
        }
        run.trials.append(record)
        start = time.perf_counter()
        trial = ht.Trial(task_seed, config, seed=record["seed"])
        run.train_seconds += time.perf_counter() - start
        for epoch in range(1, ht.MAX_EPOCHS + 1):
            if run.spent >= BUDGET:
                record["status"] = "cut by the budget"
                break
            start = time.perf_counter()
            score = trial.step()
            run.train_seconds += time.perf_counter() - start
            run.spent += 1
            record["scores"].append(score)
            stop = _call(
                ctx, run, "report", f"report({n}, {epoch}, ...)", trial=n, epoch=epoch, score=score
            )
            if epoch == ht.MAX_EPOCHS:
                record["status"] = "complete"
            elif stop.get("stop") is True:
                record["status"] = "stopped"
                break
    run.ended = run.ended or ("budget spent" if run.spent >= BUDGET else f"{MAX_TRIALS} trials")
    return run


def best_at(run: SearchRun) -> dict[int, float]:
    """The best score reported at each epoch over the whole search."""
    best: dict[int, float] = {}
    for t in run.trials:
        for epoch, score in enumerate(t["scores"], 1):
            best[epoch] = max(best.get(epoch, score), score)
    return best


def replay_stops_again(ctx: Context, run: SearchRun, target: int) -> bool:
    """Replays ``run`` on a fresh ``Search`` (its seed, a fresh worker) up to trial ``target``, a stopped trial, reporting the
    scores recorded, except the target's: the best of the search at each of its epochs up to its stop. True
    when the policy stops it there anyway (or sooner, or ends the search before it): the stop did not follow
    its score. Each recorded trial is trained again as the search trained it (its config and seed), its scores
    discarded: a replay's reports come at a search's pace, so a policy timing the gaps between its calls (the
    grader training an epoch, or not) cannot tell a replay from a search (a review: the replays ran back to back).
    A trial the policy keeps where the search stopped it (a decision drawn outside the seed) trains on, its real
    scores reported, as a search would: a policy never learns it is replayed from a call that only a replay
    makes (a review: an ``ask`` straight after a ``report`` answered False mid-trial). A replay that spends the
    budget before the target counts as stopped: the policy parted from its own search given its seed and the
    same scores (a deterministic policy never does)."""
    best = best_at(run)
    replay = SearchRun(run.task_seed, run.policy_seed)
    _fresh_worker(ctx)  # as the search began: nothing of the searches or the other replays survives
    _call(
        ctx,
        replay,
        "start",
        "Search(...) (replayed)",
        space=ht.SPACE,
        budget=BUDGET,
        max_epochs=ht.MAX_EPOCHS,
        seed=run.policy_seed,
    )
    for n, t in enumerate(run.trials[: target + 1]):
        if _call(ctx, replay, "ask", f"ask({n}) (replayed)", trial=n).get("config") is None:
            return True
        recorded = t["scores"]
        scores = recorded if n < target else [best[e] for e in range(1, len(recorded) + 1)]
        trial = ht.Trial(run.task_seed, t["config"], seed=t["seed"])
        for epoch in range(1, ht.MAX_EPOCHS + 1):
            if n == target and epoch > len(scores):
                break  # the probed trial ran past its stop
            if replay.spent >= BUDGET:
                return True  # parted from its search and spent the budget before the target
            fresh = trial.step()  # the search's work again: the same pace between calls
            replay.spent += 1
            # kept where the search stopped it, a trial trains on and reports its own scores, as in a search
            score = scores[epoch - 1] if epoch <= len(scores) else fresh
            stop = (
                _call(
                    ctx,
                    replay,
                    "report",
                    f"report({n}, {epoch}, ...) (replayed)",
                    trial=n,
                    epoch=epoch,
                    score=score,
                ).get("stop")
                is True
            )
            if n == target and stop:
                return True
            # a replay that parts from the record stops feeding this trial where the policy says so
            if stop:
                break
    return False


def probed_stops(run: SearchRun, rng) -> list[int]:
    """Up to PROBES stopped trials of ``run``, drawn without replacement in proportion to the epochs each
    saved."""
    stopped = {
        n: ht.MAX_EPOCHS - len(t["scores"])
        for n, t in enumerate(run.trials)
        if t["status"] == "stopped"
    }
    drawn = []
    while stopped and len(drawn) < PROBES:
        pick = rng.choices(list(stopped), weights=list(stopped.values()))[0]
        drawn.append(pick)
        del stopped[pick]
    return sorted(drawn)


def choose(run: SearchRun) -> tuple[dict, float, int] | None:
    """Among complete trials: the configuration with the best mean final validation accuracy."""
    finals: dict[str, list[float]] = {}
    for t in run.trials:
        if t["status"] == "complete":
            finals.setdefault(json.dumps(t["config"], sort_keys=True), []).append(t["scores"][-1])
    if not finals:
        return None
    key = max(finals, key=lambda k: sum(finals[k]) / len(finals[k]))
    return json.loads(key), sum(finals[key]) / len(finals[key]), len(finals[key])


def _shown(config: dict) -> str:
    return f"lr {config['lr']:.3g}, weight decay {config['weight_decay']:.2g}"


@dataclass
class Outcome:
    runs: list[SearchRun]  # one per task of the pair (hpo_task.pair)
    passed: bool
    message: str
    lines: list[str]


def _why(run: SearchRun, chosen: dict | None) -> str:
    complete = sum(t["status"] == "complete" for t in run.trials)
    lrs = {round(t["config"]["lr"], 12) for t in run.trials}
    if chosen is None:
        return (
            "no trial ran to the end, so there is nothing to choose: let the best trials finish "
            f"(report() returning False up to epoch {ht.MAX_EPOCHS})"
        )
    if len(lrs) == 1:
        return (
            f"every trial used the learning rate {next(iter(lrs)):.3g}: the learning rate is the axis that "
            "matters most; a grid over the others cannot make up for it. Search it on a log scale"
        )
    if complete <= 1:
        return (
            "only one trial ran to the end: stop the weak ones early, but let several promising ones "
            "finish (the best learning rate moves by decades from one of the grader's tasks to the "
            "next: a configuration fixed in advance is not a search)"
        )
    return (
        f"your search tried {len(run.trials)} configurations; explore more of them cheaply (stop the weak "
        "ones after an epoch or two) and sample the learning rate on a log scale"
    )


def _judge(
    ctx: Context, task_seed: int, policy_seed: int, label: str
) -> tuple[SearchRun, bool, list[str], str]:
    """One task of the pair: the search, its choice against the grid's best, and why it missed."""
    run = run_search(ctx, task_seed, policy_seed)
    counts = {
        s: sum(t["status"] == s for t in run.trials)
        for s in ("complete", "stopped", "cut by the budget")
    }
    lines = [
        f"{label}: your search: {len(run.trials)} trials ({counts['complete']} complete, {counts['stopped']} "
        f"stopped, {counts['cut by the budget']} cut by the budget), {run.spent} of {BUDGET} epochs ({run.ended}), "
        f"every trial at batch {ht.FIXED['batch_size']}; training {run.train_seconds:.1f} s, "
        f"your policy's decisions {run.policy_seconds:.1f} s"
    ]
    picked = choose(run)
    grid_best, grid_val, grid_cost = ht.grid_search(task_seed)
    seeds = [ctx.rng.randrange(1 << 30) for _ in range(FINAL_SEEDS)]
    grid_test = ht.test_accuracy(task_seed, grid_best, seeds)
    lines.append(
        f"{label}: the grader's grid: {len(ht.GRID['lr'])} learning rates x {len(ht.GRID['weight_decay'])} "
        f"weight decays = {len(ht.grid_configs())} configurations, {grid_cost} epochs; its best "
        f"({_shown(grid_best)}) scores {grid_test:.1%} held out (mean of {FINAL_SEEDS} fresh seeds)"
    )
    if picked is None:
        return run, False, lines, _why(run, None)
    config, val, runs = picked
    mine = ht.test_accuracy(task_seed, config, seeds)
    gap = grid_test - mine
    lines.append(
        f"{label}: your choice ({_shown(config)}; validation {val:.1%} over {runs} run(s)) scores {mine:.1%} "
        f"held out on the same seeds: {gap * 100:+.1f} pp below the grid's best (at most "
        f"{MARGIN * 100:.0f} pp), for {run.spent / grid_cost:.0%} of the grid's cost"
    )
    return run, gap <= MARGIN, lines, "" if gap <= MARGIN else _why(run, config)


def _finished(run: SearchRun) -> set[str]:
    return {
        json.dumps(t["config"], sort_keys=True) for t in run.trials if t["status"] == "complete"
    }


def evaluate(ctx: Context) -> Outcome:
    """Run (once per probe session) the learner's search on both tasks of a pair and judge each choice;
    cached for both cells. Both searches get the same policy seed: what differs is only what they observe."""
    cached = getattr(ctx.session, "lesson12_outcome", None)
    if cached is not None:
        return cached
    task_seed = ctx.rng.randrange(1 << 20)
    policy_seed = ctx.rng.randrange(1 << 30)
    runs, lines, whys = [], [], []
    for k, seed in enumerate(ht.pair(task_seed)):
        label = f"task {k + 1} of 2 (loss scale {ht.loss_scale(seed):.3g})"
        run, passed, task_lines, why = _judge(ctx, seed, policy_seed, label)
        runs.append(run)
        lines += task_lines
        if not passed:
            whys.append(f"{label}: {why}")
    if whys and _finished(runs[0]) and _finished(runs[0]) == _finished(runs[1]):
        whys.append(
            f"your search ran the same configurations to the end on both tasks, whose loss scales lie "
            f"{ht.PAIR_RATIO:.0f}x apart and move their best learning rates about as far (5x to 50x, as each "
            "task's data shifts it too): a configuration fixed in advance is good on one of them at most; "
            "choose what to finish from the scores you observe"
        )
    passed = not whys
    message = "; ".join(lines) + ("" if passed else ". " + ". ".join(whys) + ".")
    outcome = Outcome(runs, passed, message, lines)
    ctx.session.lesson12_outcome = outcome
    return outcome


def _trace(run: SearchRun) -> list[tuple[str, int, str]]:
    return [
        (json.dumps(t["config"], sort_keys=True), len(t["scores"]), t["status"]) for t in run.trials
    ]


def check_search(ctx: Context) -> None:
    outcome = evaluate(ctx)
    expect(outcome.passed, outcome.message)
    for line in outcome.lines:
        ctx.ok(line)


def check_pruning(ctx: Context) -> None:
    outcome = evaluate(ctx)
    expect(
        outcome.passed,
        "pruning saves budget only when the search still finds a good configuration, and this "
        f"one did not: {outcome.message}",
    )
    for k, run in enumerate(outcome.runs):
        stopped = sum(t["status"] == "stopped" for t in run.trials)
        saving = (
            f"task {k + 1} of 2: {run.spent} epochs spent where the same {len(run.trials)} trials, none "
            f"stopped, would cost {run.unpruned_cost}: {run.saved:.0%} saved by stopping {stopped} of them early"
        )
        expect(
            run.saved >= MIN_SAVED,
            f"{saving}, less than the {MIN_SAVED:.0%} required. "
            + ("Your search never stopped a trial: " if stopped == 0 else "")
            + "compare each trial after an epoch or two with the others at the same epoch and stop the weak "
            "ones: successive halving (Optuna's SuccessiveHalvingPruner(min_resource=1, reduction_factor=3), or "
            "by hand: at epochs 1 and 3 stop a trial outside the top third of the scores seen at that epoch); "
            "Optuna's MedianPruner(n_startup_trials=5) behind TPE fell short of this on a task of 16 of 24 "
            "pairs in the grader's calibration",
        )
        ctx.ok(saving)
    # Same seed, different scores: a plan fixed by the seed alone (what to ask, when to stop) traces the same
    # trials on both tasks whatever it observed, and is refused here. Differing traces prove less: randomness
    # drawn outside the seed (os.urandom, the clock) parts them too, so whether the stops followed the scores
    # is the next check's
    expect(
        _trace(outcome.runs[0]) != _trace(outcome.runs[1]),
        "your search asked the same configurations and stopped each at the same epoch on both tasks, "
        "although their scores differed: its stops did not depend on what it observed. Pruning stops a "
        "trial because its score trails the others' at the same epoch",
    )
    ctx.ok(
        "your trials differed between the two tasks, given the same seed: not a plan fixed by the seed alone"
    )
    for k, run in enumerate(outcome.runs):
        trailed, saved = run.evidence()
        share = trailed / saved if saved else 0.0
        evidence = (
            f"task {k + 1} of 2: {trailed} of the {saved} epochs your stops saved ({share:.0%}) came from "
            f"trials that trailed at the epoch they were stopped (at least {TRAILED:.0%} of the scores reported "
            "at that epoch in your search were higher)"
        )
        expect(
            share >= MIN_EVIDENCE,
            f"{evidence}, less than the {MIN_EVIDENCE:.0%} required: a stop counts as pruning only when the "
            f"trial was outside the top {TRAILED:.0%} of the scores at its epoch, and stops made whatever the "
            "scores end good trials as often as weak ones. Stop a trial because its score trails the others' "
            "at the same epoch (successive halving: Optuna's SuccessiveHalvingPruner, or by hand)",
        )
        ctx.ok(evidence)
    # a trailing trial can be planned (a configuration poor on every task), so the stops are also asked why:
    # replayed as the best of their epoch, do they still stop?
    for k, run in enumerate(outcome.runs):
        probes = probed_stops(run, ctx.rng)
        blind = [n for n in probes if replay_stops_again(ctx, run, n)]
        replayed = (
            f"task {k + 1} of 2: {len(probes) - len(blind)} of the {len(probes)} stops replayed (trials "
            f"{', '.join(str(n) for n in probes)}, drawn by the epochs they saved) ran on when the stopped trial "
            "reported the best score of its epoch instead of its own"
        )
        expect(
            not blind,
            f"{replayed}: replayed on a fresh Search with your seed and the same scores, except that trial "
            f"{blind[0] if blind else ''} reported the best score of the search at each epoch up to its stop, "
            "your policy still stopped it there (or its replay parted from its search and spent the budget "
            "before reaching it, which a policy deciding from its seed and the scores never does). Its stop "
            "did not follow its score: a trial planned to trail "
            "(a configuration poor on every task) and stopped whatever it scored is not pruning. Stop a trial "
            "because its score trails the others' at the same epoch",
        )
        ctx.ok(replayed)
