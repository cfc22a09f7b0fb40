"""The performance protocol: baseline vs learner in fresh processes, timed and judged by the parent.

The parent holds the data, the clock and the evaluation, and interleaves and freezes the workers,
so verdicts cannot be faked and noise does not flip them (grader/README.md). Learner code can
still fork out of a stopped group; the audit and replays make that visible.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from statistics import median

from grader.common.cellcode import QUIZ_CELL, to_python
from grader.sandbox.commit import encode
from grader.sandbox.launch import unavailable_note
from grader.sandbox.supervisor import Worker, WorkerFailed, _clock, boosted_self, start_worker
from grader.timed.measurement import GradingSpec, Measurement, Timing
from grader.timed.replay import Commits, DiskFull, Reveal, check_work
from grader.timed.weights import weights_problems

__all__ = [
    "GradingSpec",
    "Measurement",
    "Timing",
    "WorkerFailed",
    "measure",
]  # the timed layer's face


def _private_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="effkit-grader-"))
    path.chmod(0o700)
    return path


def measure(
    assignment,
    cells: list[tuple[str, str]],
    spec: GradingSpec,
    device: str,
    progress=print,
    correctness=None,
    second_look=None,
    speed_look=None,
) -> Measurement:
    """Run the protocol for ``cells`` (name, source) of the learner; see the module docstring.

    ``correctness() -> str`` says why speed cannot count ('' when it can): the caller's correctness
    checks (:func:`grader.scoring.checks.gate_problem`), run here first, before any timed worker.
    ``second_look(diffs_pp) -> bool`` (the accuracy gate's ``needs_second_look``) is asked after the
    first ``repeats`` pairs were evaluated; when it says so, ``repeats`` more paired runs follow on
    fresh data (``GraderData.add_look``), in the same workers. ``speed_look(ratios) -> bool`` is asked
    next, when accuracy took no second look: a speed-up below its target that a busy machine can
    explain takes the same second look, and its runs alone are scored (speed and accuracy).

    Raises :class:`WorkerFailed` only when the *baseline* fails (the grader could not run);
    anything the learner's code does wrong ends up in ``Measurement.error`` / ``.problems``.
    """
    # The quiz answers have nothing to do with speed: an unanswered quiz (its stub raises) must not
    # cost the timed grading, so that cell never travels to a timed worker.
    cells = [(name, source) for name, source in cells if name != QUIZ_CELL]
    with boosted_self():  # our own work (data, evaluation) at the workers' priority when allowed
        return _measure(
            assignment, cells, spec, device, progress, correctness, second_look, speed_look
        )


def _measure(
    assignment,
    cells,
    spec: GradingSpec,
    device: str,
    progress,
    correctness=None,
    second_look=None,
    speed_look=None,
) -> Measurement:
    runtime = assignment.runtime()
    t_start = _clock()
    out = Measurement(device=device, spec=spec)
    # The correctness contract first, out of every timed worker: speed only counts for correct
    # code, and a verdict computed where learner code runs could be forged.
    problem = correctness() if correctness is not None else ""
    out.phases_s["correctness"] = _clock() - t_start
    if problem:
        out.problems.append(
            "your code fails the grader's correctness checks, and speed only "
            f"counts for correct code: {problem}"
        )
        out.phases_s["total"] = _clock() - t_start
        return out
    workdir = _private_dir()
    inputs = workdir / "inputs"  # GraderData writes the training inputs here (private) ...
    inputs.mkdir(mode=0o755)
    reveal = Reveal(inputs, workdir / "exposed")  # ... and workers read what is shown of them here
    # every chunk of every run, both sides (a second look adds more: checked as they come)
    commits = Commits(workdir / "commits", 2 * spec.repeats * spec.epochs * spec.chunks_per_epoch)
    workers: dict[str, Worker] = {}
    try:
        for role in ("baseline", "learner"):
            workers[role] = start_worker(
                role,
                workdir,
                {"assignment_module": assignment.runtime_module, "device": device, "role": role},
                cpu_cores=spec.cpu_cores if device == "cpu" else None,
                inputs=reveal.exposed,
            )
        data = runtime.GraderData(workdir, spec, device)  # writes sets while workers import
        out.phases_s["data"] = _clock() - t_start
        # Said as each phase ends (seconds since the grading began): a grading stopped from outside
        # (a lease, a job limit) writes no report, and its log must still say where the time went.
        progress(
            f"  {out.phases_s['data']:6.1f} s  the grader's data and initial weights are ready"
        )
        for w in workers.values():
            w.expect("ready", spec.startup_timeout_s, "starting up")
            w.pause()
        out.phases_s["startup"] = _clock() - t_start
        progress(f"  {out.phases_s['startup']:6.1f} s  both workers are ready")
        a, b = workers["baseline"], workers["learner"]
        plain = []
        for name, source in cells:  # the worker is plain Python, not IPython: drop magics, say so
            code, dropped = to_python(source)
            plain.append((name, code))
            out.flags += [f"ignored IPython syntax in {name}, {d}" for d in dropped]
        if b.unavailable:  # one line, not one per protection: the list is in the report
            out.flags.append(unavailable_note(b.unavailable, " (timed worker)"))
        b.send(
            cmd="load",
            cells=[*assignment.trusted_cells(), *plain],
            object_name=assignment.object_name,
        )
        loaded, _ = b.expect("loaded", spec.load_timeout_s, "running your solution cells")
        b.pause()
        if loaded["replaced"]:
            out.flags.append(
                "your code replaced "
                + ", ".join(loaded["replaced"][:6])
                + " - ignored: the grader's clock and evaluation run in other processes"
            )
        if loaded["reference_reused"]:
            out.problems.append(loaded["reference_reused"])
            return out
        # Only now the warm-up set and caches: while the learner's cells ran, its inputs folder was
        # as empty as the probe worker's (a run's training set and initial weights: at its first chunk)
        reveal.show_shared(data)
        limit = spec.startup_timeout_s
        for w in (a, b):  # warm-up: allocator, thread pools, lazy imports; not scored
            begin = {
                "data_dir": _rel(data, data.warmup_dir),
                "seed": 0,
                "hooks": dict(_hooks(spec, w.role), epochs=1),
                "profile": spec.profile,
            }
            t_go = w.send(cmd="chunk", begin=begin, part=[0, 1], finish=True)
            done, t_end = w.expect("done", limit, "the warm-up run")
            w.pause()
            out.warmup_s[w.role] = t_end - t_go
            _collect(out, w.role, done, warmup=True)
            limit = spec.min_timeout_s + spec.timeout_factor * out.warmup_s["baseline"]
        # Audit problems do not stop the protocol: the runs and the grader's own evaluation still
        # happen, so the report shows everything that is wrong (e.g. skipped training AND accuracy).
        out.phases_s["warmup"] = _clock() - t_start
        progress(
            f"  {out.phases_s['warmup']:6.1f} s  warm-up done (baseline {out.warmup_s['baseline']:.1f} s, "
            f"yours {out.warmup_s['learner']:.1f} s); now the timed runs"
        )
        _timed_runs(out, a, b, data, spec, progress, range(spec.repeats), reveal, commits)
        out.phases_s["runs"] = _clock() - t_start
        _evaluate(out, data, runtime, range(spec.repeats))
        out.phases_s["evaluation"] = _clock() - t_start
        diffs, ratios = out.accuracy_diffs_pp(), out.speed_ratios()
        why = ""
        if second_look is not None and not out.problems and second_look(diffs):
            # Below the gate: a second, independent look (fresh data) before any points are lost.
            why = (
                f"  your accuracy is {sum(diffs) / len(diffs):+.2f} pp vs the baseline after {spec.repeats} "
                f"paired runs, below the gate: {spec.repeats} more on fresh data before deciding"
            )
        elif speed_look is not None and not out.problems and speed_look(ratios):
            # Below the speed target with chunk pairs above it: on a loaded host (2 of 62 gradings of
            # lesson 2's reference beside a test suite, 2026-12-07) that is noise as often as speed.
            out.speed_look = True
            out.flags.append(
                f"a second look for speed: the first {len(ratios)} chunk pairs' median was "
                f"{median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}), below the target "
                "with pairs above it; the second look's runs alone are scored"
            )
            why = (
                f"  your speed-up is {median(ratios):.2f}x after {spec.repeats} paired runs (chunk "
                f"pairs {min(ratios):.2f}-{max(ratios):.2f}x), below the target with pairs above it: "
                f"{spec.repeats} more on fresh data, scored alone"
            )
        if why:
            progress(why)
            more = data.add_look()  # both workers are frozen while the parent writes it
            reveal.show_shared(data)
            _timed_runs(out, a, b, data, spec, progress, more, reveal, commits)
            out.phases_s["second_look_runs"] = _clock() - t_start
            _evaluate(out, data, runtime, more)
            out.scored_from = more.start
            out.phases_s["second_look"] = _clock() - t_start
        b.close()  # done with learner code: the replays need the baseline worker alone
        scored = sorted({t.repeat for t in out.runs if t.repeat >= out.scored_from})
        if scored and not out.problems:
            out.work_problems = check_work(
                out,
                data,
                commits,
                a,
                reveal,
                spec,
                scored,
                lambda r: _begin_of(data, spec, r, "learner"),  # it replays the learner's chunks
                spec.startup_timeout_s,
            )
            out.phases_s["work_check"] = _clock() - t_start
            progress(f"  {out.phases_s['work_check']:6.1f} s  the timed chunks' work checked")
        return out
    except WorkerFailed as err:
        if err.role in ("baseline", "grader"):
            raise  # the grader itself could not run: not the learner's fault, no verdict
        out.error = err
        return out
    finally:
        for w in workers.values():
            w.close()
        out.phases_s["total"] = _clock() - t_start
        shutil.rmtree(workdir, ignore_errors=True)


def _evaluate(out: Measurement, data, runtime, repeats: range) -> None:
    """The parent's checks of the learner's weights, then its own evaluation of both sides' runs."""
    out.problems += weights_problems(data, repeats, out.flags)
    for t in out.runs:
        if t.repeat not in repeats:
            continue
        try:
            t.accuracy = data.evaluate(data.weights_path(t.role, t.repeat), t.repeat)
        except runtime.InvalidWeights as err:
            if t.role == "baseline":
                raise
            out.problems.append(f"run {t.repeat + 1}: {err}")


def _hooks(spec: GradingSpec, role: str) -> dict:
    """The recipe's overrides for ``role``: the spec's, and each side's own (the learner's changes, the
    grader's baseline variant)."""
    return dict(spec.hooks, **(spec.learner_hooks if role == "learner" else spec.baseline_hooks))


def _begin_of(data, spec: GradingSpec, r: int, role: str = "baseline") -> dict:
    return {
        "data_dir": _rel(data, data.train_dirs[r]),
        "seed": data.seeds[r],
        "profile": spec.profile,
        "hooks": dict(_hooks(spec, role), epochs=spec.epochs),
        "init_path": _rel(data, data.init_paths[r]),
    }


def _timed_runs(
    out: Measurement,
    a: Worker,
    b: Worker,
    data,
    spec: GradingSpec,
    progress,
    repeats: range,
    reveal: Reveal,
    commits: Commits,
) -> None:
    """Paired runs ``repeats`` of ``epochs`` epochs, advanced in chunks of 1/``chunks_per_epoch``
    epoch, interleaved A B B A A B ...

    Chunk ``c`` of run ``r`` is the same work on both sides (the first also builds the recipe, the
    last also audits and saves); the two sides do it back to back, so load that changes over
    seconds hits both halves of each pair alike. Run ``r``'s training set and initial weights are
    shown to the workers just before its first chunk, and every chunk ends with a commit of the
    training state (:mod:`grader.timed.replay`).
    """

    parts = spec.chunks_per_epoch
    seconds: dict[tuple[str, int], float] = {}
    judge = _chunk_judge(data)
    i = 0
    for r in repeats:
        begins = {role: _begin_of(data, spec, r, role) for role in ("baseline", "learner")}
        commits.draw(r, spec.epochs * parts)  # the chunks to replay, kept secret in this process
        reveal.show_run(data, r)  # both workers are frozen: from now on, only timed chunks run
        for c in range(spec.epochs * parts):
            last = c == spec.epochs * parts - 1
            for w in (a, b) if i % 2 == 0 else (b, a):  # ABBA: linear drift cancels
                base = [x[3] for x in out.chunks if x[0] == "baseline" and x[2] == c]
                limit = (
                    spec.startup_timeout_s
                    if not base
                    else spec.min_timeout_s + spec.timeout_factor * max(base)
                )
                memfd = a.uses_memfd() and b.uses_memfd()  # the same hand-over on both sides
                t_go = w.send(
                    cmd="chunk",
                    begin=begins[w.role] if c == 0 else None,
                    part=[c % parts, parts],
                    finish=last,
                    send_weights="memfd" if memfd else "pipe",
                )
                event, t_end = w.expect(
                    "done" if last else "chunk_done",
                    limit,
                    f"epoch {c // parts + 1} of run {r + 1}",
                )
                # Through the pipe, on the clock until its last byte: a worker that runs while it
                # sends could work ahead of its next chunk, unseen. A sealed memfd is copied out
                # after the event, with the worker frozen. The weights file is written by us alone.
                blob = w.commit(event, limit, f"sending the weights of run {r + 1}")
                t_end = t_end if memfd else _clock()
                try:
                    state = commits.add(w.role, r, c, blob)
                except DiskFull as err:  # the grader's disk: no verdict, whoever sent the state
                    raise WorkerFailed(str(err), kind="host", role="grader") from err
                except Exception as err:  # noqa: BLE001 - refused by weights_only or its shape
                    raise WorkerFailed(
                        f"the {w.role} sent a training state the grader cannot read "
                        f"({type(err).__name__})",
                        kind="protocol",
                        role=w.role,
                    ) from err
                if last:  # safetensors, like the commit: the parent never unpickles learner bytes
                    weights = encode({"model": state["model"], "optimizer": {}})
                    data.weights_path(w.role, r).write_bytes(weights)
                w.pause()
                if spec.target is not None:  # time to target: the parent's own evaluation, counted
                    _evaluate_chunk(out, data, w.role, r, c, state)
                kept = state.pop("kept", None)
                if kept is not None:
                    _judge_kept(out, judge, commits, w.role, r, c, kept)
                escaped = b.escaped()
                if escaped:  # a process nothing stops could steal the core while A is timed
                    raise WorkerFailed(
                        f"your code left {len(escaped)} process(es) running outside the worker's "
                        "process group, where the grader cannot stop them: your code is not timed "
                        "(speed check 0)",
                        kind="escaped",
                        role="learner",
                    )
                left = b.box.left_session() if w is b else []
                if left and not any(
                    f.startswith(LEFT_SESSION) for f in out.flags
                ):  # reported, no effect
                    out.flags.append(
                        f"{LEFT_SESSION} (pids {left[:4]}); it was stopped with your worker "
                        "whenever the baseline was timed, and killed with it"
                    )
                out.chunks.append((w.role, r, c, t_end - t_go))
                seconds[w.role, r] = seconds.get((w.role, r), 0.0) + t_end - t_go
                if last:
                    _collect(out, w.role, event, warmup=False)
            i += 1
        for role in ("baseline", "learner"):
            out.runs.append(Timing(role, r, seconds[role, r], spec.n_train * spec.epochs))
            progress(f"  run {r + 1}/{repeats.stop} {role:8s} {seconds[role, r]:6.2f} s")


def _evaluate_chunk(out: Measurement, data, role: str, r: int, c: int, state) -> None:
    """The held-out accuracy of chunk ``c``'s committed weights, evaluated here with both workers
    frozen; its seconds join that side's time to target (the same evaluation on both sides)."""
    t0 = _clock()
    try:
        accuracy = data.evaluate_state(state["model"], r)
    except Exception as err:  # noqa: BLE001 - weights that do not fit the recipe's model
        if role == "baseline":
            raise
        problem = f"your run {r + 1}: {err}"
        if problem not in out.problems:
            out.problems.append(problem)
        accuracy = float("nan")
    out.evaluations.append((role, r, c, accuracy, _clock() - t0))


def runtime_of(data):
    """The lesson runtime module that made ``data`` (its ``GraderData``)."""
    return sys.modules[type(data).__module__]


LEFT_SESSION = "your code started a process that left the worker's session"


def _chunk_judge(data):
    """The lesson's parent-only judge of a timed chunk's kept batches (``<its package>.timed_checks``,
    never in a worker's view), where its runtime keeps them; else None."""
    runtime = runtime_of(data)
    if not getattr(runtime, "KEEP_BATCHES", False):
        return None
    package = runtime.__name__.rpartition(".")[0]
    return importlib.import_module(f"{package}.timed_checks").ChunkJudge(data)


def _judge_kept(out: Measurement, judge, commits: Commits, role: str, r: int, c: int, kept) -> None:
    """What a timed chunk trained on, judged here (the learner's every chunk; the baseline's drawn
    ones, a check of the judge itself), and the learner's drawn chunks kept for their replay."""
    drawn = c in commits.drawn.get(r, ())
    if role == "learner" and drawn:  # for its replay (grader.timed.replay.check_work)
        commits.keep(r, c, kept)
    failed = any(p.startswith("your timed run ") for p in out.problems)
    if judge is None or (role == "baseline" and not drawn) or (role == "learner" and failed):
        return  # one failing chunk says it: no points either way, and less of the parent's time
    found = judge(r, c, kept, role)
    if found and role == "baseline":  # the reference pipeline fails the judge: a grader bug
        raise WorkerFailed(
            f"the baseline's timed batches failed the grader's judge: {found}", role="baseline"
        )
    out.problems += [f"your timed run {r + 1}, chunk {c + 1}: {problem}" for problem in found]


def _rel(data, path: Path) -> str:
    """``path`` as the worker names it: relative to the inputs folder it sees read-only."""
    return str(Path(path).relative_to(data.inputs))


def _collect(out: Measurement, role: str, done: dict, warmup: bool) -> None:
    phase = "warm-up" if warmup else "timed run"
    problems = done.get("audit", {}).get("problems", [])
    if problems and role == "baseline":  # the reference failed its own audit: a grader bug
        raise WorkerFailed(f"baseline {phase} failed the audit: {problems}", role="baseline")
    for problem in problems:
        text = f"your code ({phase}): {problem}"
        if text not in out.problems:
            out.problems.append(text)
    changed = done.get("replaced") or []
    if changed and role == "learner":
        note = (
            "your code replaced "
            + ", ".join(changed[:6])
            + " - ignored: the grader's clock and evaluation run in other processes"
        )
        if note not in out.flags:
            out.flags.append(note)
