"""The learner's solution cells of an exercise notebook, as the grader carries them: the cells whose
``grade_id`` is a solution cell of the instructor's source notebook (`grader.frontends.notebook.solution_ids`).
Shared by the out-of-kernel exercise tests. ``InProcess`` and ``grade_in_process`` grade cells the
way a sandboxed worker would answer them, in this process (the sandboxed path is each lesson's
reference test); the tests of lessons 7 to 13 use them (lesson 5's keeps its own planner-only
session, graded through grade_in_process). ``reference_cells``, ``stub_cells``, ``grade`` and
``grade_here`` are the exercise tests' one way to read a lesson's cells and grade them; ``POINTS`` is
each cell-checked assignment's graded cells and points, from its manifest (tests/test_manifest.py
checks them against the notebooks)."""

from __future__ import annotations

import importlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from grader import assignments
from grader.frontends.notebook import solution_ids, solution_sources
from grader.sandbox.launch import LOOPBACK_UP
from grader.sandbox.probe import CallResult, loopback_tx_bytes
from grader.scoring.checks import CellVerdict, CheckFailed, Context, grade_cells

ROOT = Path(__file__).resolve().parents[1]

# each exercise's graded cells and their points, as its manifest declares them (the instructor's
# notebook must give them: tests/test_manifest.py), for the exercises whose every graded cell is a
# cell check (lessons 2 and 3 fill a timed performance cell too)
POINTS = {
    m.id: m.points for m in assignments.manifests() if not assignments.get(m.id).performance_cell
}


def solution_path(lesson: str) -> Path:
    """The instructor's source notebook of ``lesson`` (the reference solution)."""
    return ROOT / "solutions" / lesson / f"{lesson}.ipynb"


def exercise_path(lesson: str) -> Path:
    """The released notebook of ``lesson`` (the learner's stub)."""
    return ROOT / "exercises" / lesson / f"{lesson}.ipynb"


def grade_id(cell) -> str | None:
    """A notebook cell's nbgrader ``grade_id``, None for a cell without one."""
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def solution_cells(source: Path, path: Path, **replace: str) -> list[tuple[str, str]]:
    """(grade_id, source) of ``path``'s solution cells; ``replace`` swaps a cell's source by id."""
    ids = solution_ids(nbformat.read(source, as_version=4))
    cells = [
        (c.grade_id, c.source) for c in solution_sources(nbformat.read(path, as_version=4), ids)
    ]
    return [(gid, replace.get(gid, src)) for gid, src in cells]


def reference_cells(lesson: str, **replace: str) -> list[tuple[str, str]]:
    """The reference solution's cells of ``lesson``; ``replace`` swaps a cell's source by id."""
    return solution_cells(solution_path(lesson), solution_path(lesson), **replace)


def stub_cells(lesson: str, **replace: str) -> list[tuple[str, str]]:
    """The released stub's solution cells of ``lesson``; ``replace`` swaps a cell's source by id."""
    return solution_cells(solution_path(lesson), exercise_path(lesson), **replace)


def grade(lesson: str, cells: list[tuple[str, str]], only=None, seed: int = 1):
    """(verdicts, report) of the grader's own grading of ``cells`` (sandboxed workers)."""
    return grade_cells(assignments.get(lesson), cells, only=only, seed=seed)


def grade_here(
    lesson: str,
    cells: list[tuple[str, str]],
    only,
    seed: int = 1,
    fresh: bool = False,
    strict: bool = True,
) -> dict[str, CellVerdict]:
    """``only``'s checks on ``cells`` in this process (`InProcess` with the lesson's probes): all drawing
    from one ``random.Random(seed)`` in order, or (``fresh``) each from a fresh one; ``strict`` as InProcess's."""
    assignment = assignments.get(lesson)
    probes = importlib.import_module(f"grader.assignments.{lesson}.probes")
    session = InProcess(assignment, probes, cells, strict=strict)
    if fresh:
        return {
            gid: grade_in_process(assignment, session, [gid], random.Random(seed))[gid]
            for gid in only
        }
    return grade_in_process(assignment, session, only, random.Random(seed))


class InProcess:
    """What a worker would answer, computed here from the cells: ``probes.probe_<name>(self, ...)``."""

    def __init__(
        self,
        assignment,
        probes,
        cells: list[tuple[str, str]],
        own_netns: bool = False,
        strict: bool = False,
    ):
        """strict: a raising cell raises here (a test's own cells must load) instead of being
        recorded in ``load_errors`` as the worker records it."""
        self.probes, self.ns, self.load_errors = probes, {}, []
        self.cells = cells  # as a ProbeSession holds them: a parent check may read the sources
        # own_netns (root only): each call runs in a forked child with a network namespace of its
        # own and its loopback up, as in the sandbox, so loopback_bytes counts that call alone
        self.own_netns = own_netns and os.geteuid() == 0
        self.wire = 0
        exec(assignment.setup_source, self.ns)  # noqa: S102  (repository test code, not a learner's)
        for gid, source in cells:
            try:
                exec(source, self.ns)  # noqa: S102
            except Exception as err:  # noqa: BLE001  (a raising cell is recorded, as the worker does)
                if strict:
                    raise
                self.load_errors.append({"cell": gid, "message": f"{type(err).__name__}: {err}"})

    def loopback_bytes(self) -> int | None:
        """The loopback's byte counter, as the sandbox's parent reads it: the calls' own (own_netns),
        else this process's namespace's, where other traffic meanwhile would count too."""
        return self.wire if self.own_netns else loopback_tx_bytes()

    def watch(self, obj, *parts: str) -> object:
        """The worker's hand-over of ``obj`` to learner code (it watches for planted functions): ``obj``."""
        return obj

    def call(
        self, probe: str, timeout_s: float, serve=None, max_blob: int | None = None, **args
    ) -> CallResult:
        """``probes.probe_<probe>(self, **args)``; a result with a blob over ``max_blob`` bytes is refused."""
        if self.own_netns:
            got = self._call_in_own_netns(probe, timeout_s, serve, **args)
        else:
            got = self._call(probe, timeout_s, serve, **args)
        if got.ok and max_blob is not None and any(len(b) > max_blob for b in got.blobs):
            return CallResult(False, failure="sent more than the grader accepts")
        return got

    def call_ranks(
        self, probe: str, timeout_s: float, world: int, relay=None, **args
    ) -> list[CallResult]:
        """``probes.probe_<probe>(self, rank=r, **args)`` for every rank at once, each in a child forked
        from here (with own_netns, all in one namespace of their own, counted alone); a rank not done
        within ``timeout_s`` is killed. ``relay`` (a ``grader.sandbox.relay.Relay``, here in this process)
        answers each rank's requests on a pipe of its own, as the worker's channel would carry them.
        The sandbox's grading starts one worker per rank instead."""
        if relay is not None:
            assert not self.own_netns, "the relay lives in this process: fork the ranks from here"
            return self._fork_ranks(probe, timeout_s, world, relay, **args)

        def ranks() -> CallResult:
            got = self._fork_ranks(probe, timeout_s, world, **args)
            return CallResult(
                True,
                {"ranks": [[r.ok, r.data, r.failure, len(r.blobs)] for r in got]},
                [b for r in got for b in r.blobs],
            )

        packed = self._in_own_netns(ranks) if self.own_netns else ranks()
        out, blobs = [], list(packed.blobs)
        for ok, data, failure, n in packed.data["ranks"]:
            out.append(CallResult(ok, data, blobs[:n], failure))
            blobs = blobs[n:]
        return out

    def _fork_ranks(
        self, probe: str, timeout_s: float, world: int, relay=None, **args
    ) -> list[CallResult]:
        import signal
        import threading

        from grader.sandbox.channel import ChannelError, Endpoint, WorkerEnd

        pids, raws, readers, ends = [], [b""] * world, [], []
        for rank in range(world):
            r, w = os.pipe()
            asks, answers = (os.pipe(), os.pipe()) if relay is not None else ((-1, -1), (-1, -1))
            pid = os.fork()
            if pid == 0:  # the rank: its result as JSON and blobs down the pipe
                code = 1
                try:
                    os.close(r)
                    if (
                        relay is not None
                    ):  # the rank's requests to the relay, as on a worker's channel
                        os.close(asks[0])
                        os.close(answers[1])
                        self.chan = WorkerEnd(asks[1], answers[0])
                    got = self._call(probe, timeout_s, None, rank=rank, **args)
                    head = {
                        "ok": got.ok,
                        "data": got.data,
                        "failure": got.failure,
                        "sizes": [len(b) for b in got.blobs],
                    }
                    with os.fdopen(w, "wb") as out:
                        out.write(json.dumps(head).encode() + b"\n" + b"".join(got.blobs))
                    code = 0
                finally:
                    os._exit(code)
            os.close(w)
            pids.append((pid, r))
            if relay is not None:
                os.close(asks[1])
                os.close(answers[0])
                ends.append(Endpoint(asks[0], answers[1]))

        def read(fd: int, rank: int) -> None:
            with os.fdopen(fd, "rb") as f:
                raws[rank] = f.read()

        def serve(
            end, rank: int
        ) -> None:  # what ProbeSession.call does with a worker's "dev" requests
            try:
                while True:
                    msg, blobs = end.receive(timeout_s + 5)
                    end.send({"cmd": "dev_ok", **relay.serve_for(rank)(msg, blobs)})
            except (ChannelError, OSError):
                pass
            finally:
                relay.finish(rank)
                end.close()

        for rank, (_, r) in enumerate(
            pids
        ):  # read only once every rank is forked: no thread is forked
            readers.append(threading.Thread(target=read, args=(r, rank)))
            readers[-1].start()
        servers = [
            threading.Thread(target=serve, args=(end, rank)) for rank, end in enumerate(ends)
        ]
        for t in servers:
            t.start()
        pids = [pid for pid, _ in pids]
        deadline, out = time.monotonic() + timeout_s, []
        for rank, (pid, reader) in enumerate(zip(pids, readers, strict=True)):
            reader.join(max(0.0, deadline - time.monotonic()))
            late = reader.is_alive()
            if late:
                os.kill(pid, signal.SIGKILL)
                reader.join()
            os.waitpid(pid, 0)
            line, _, rest = raws[rank].partition(b"\n")
            if late or not line:
                out.append(
                    CallResult(
                        False,
                        failure=f"did not return within {timeout_s:.0f} s" if late else "crashed",
                    )
                )
                continue
            head = json.loads(line)
            blobs, at = [], 0
            for n in head["sizes"]:
                blobs.append(rest[at : at + n])
                at += n
            out.append(CallResult(head["ok"], head["data"], blobs, head["failure"]))
        for t in servers:  # each ends when its rank's pipe closes
            t.join()
        return out

    def _call_in_own_netns(self, probe: str, timeout_s: float, serve=None, **args) -> CallResult:
        return self._in_own_netns(lambda: self._call(probe, timeout_s, serve, **args))

    def _in_own_netns(self, fn) -> CallResult:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its own namespace, the call, then JSON and the blobs back
            code = 1
            try:
                os.close(r)
                _unshare_net()
                subprocess.run([sys.executable, "-I", "-S", "-c", LOOPBACK_UP], check=True)
                before = loopback_tx_bytes()
                got = fn()
                head = {
                    "ok": got.ok,
                    "data": got.data,
                    "failure": got.failure,
                    "wire": loopback_tx_bytes() - before,
                    "sizes": [len(b) for b in got.blobs],
                }
                with os.fdopen(w, "wb") as out:
                    out.write(json.dumps(head).encode() + b"\n" + b"".join(got.blobs))
                code = 0
            except BaseException:  # noqa: BLE001  (said on stderr; the parent then fails to read)
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            raw = f.read()
        os.waitpid(pid, 0)
        line, _, rest = raw.partition(b"\n")
        if not line:
            raise RuntimeError(
                "the call in its own network namespace failed: see the captured stderr"
            )
        head = json.loads(line)
        self.wire += head["wire"]
        blobs, at = [], 0
        for n in head["sizes"]:
            blobs.append(rest[at : at + n])
            at += n
        return CallResult(head["ok"], head["data"], blobs, head["failure"])

    def _call(self, probe: str, timeout_s: float, serve=None, **args) -> CallResult:
        try:
            data, blobs = getattr(self.probes, f"probe_{probe}")(self, **args)
        except Exception as err:  # noqa: BLE001  (a raising probe is that check's failure)
            return CallResult(False, failure=f"raised {type(err).__name__}: {err}")
        return CallResult(True, data, blobs)


def _unshare_net() -> None:
    """unshare(CLONE_NEWNET) for this process (os.unshare is Python >= 3.12's)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


def grade_in_process(assignment, session, grade_ids, rng) -> dict[str, CellVerdict]:
    """Each cell check of ``grade_ids`` on ``session``, drawing from one ``rng`` in order, as the grader does."""
    verdicts = {}
    for gid in grade_ids:
        ctx = Context(session, rng)
        try:
            assignment.cell_checks[gid](ctx)
            verdicts[gid] = CellVerdict(gid, True, ctx.lines)
        except CheckFailed as err:
            verdicts[gid] = CellVerdict(gid, False, ctx.lines, str(err))
    return verdicts
