"""The correctness worker: runs the learner's solution cells, then probes on the parent's command.

Learner code shares this process and can forge any message, so no message is a verdict.
"""

from __future__ import annotations

import importlib
import linecache
import os
import sys
import threading
import traceback
import types
from functools import partial

from grader.sandbox import fence
from grader.sandbox.channel import WorkerEnd
from grader.sandbox.proctree import descendants
from grader.sandbox.tamper import replaced, snapshot

_EVIDENCE: set[str] = set()
_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, partial)
_WORKDIR = os.getcwd()


def _audit(event: str, args) -> None:
    # Cheap, permanent (audit hooks cannot be removed), and only evidence: see module doc.
    if event in ("sys._getframe", "sys._current_frames"):
        _EVIDENCE.add(
            f"your code inspected stack frames ({event}): a way to reach the grader's objects"
        )
    elif event in ("gc.get_objects", "gc.get_referrers", "gc.get_referents"):
        _EVIDENCE.add(f"your code searched the garbage collector ({event})")
    elif (
        event == "open"
        and len(args) >= 2
        and isinstance(args[1], str)
        and any(c in args[1] for c in "wax+")
    ):
        path = os.path.abspath(os.fsdecode(args[0])) if isinstance(args[0], str | bytes) else ""
        if path and not path.startswith(_WORKDIR):
            _EVIDENCE.add(f"your code opened {path} for writing, outside its working directory")


def _from_learner(event: str) -> bool:
    """Frames and the garbage collector: flagged when learner code asks *directly* (or through
    ``inspect``); libraries that inspect frames internally are not learner tampering. Writes:
    flagged whenever learner code is anywhere on the stack."""
    frame = sys._getframe(2)  # 0 here, 1 the filter, 2 whoever called the audited C function
    if event.startswith("open"):
        while frame is not None:
            if frame.f_code.co_filename.startswith("<cell"):
                return True
            frame = frame.f_back
        return False
    for _ in range(2):
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith("<cell"):
            return True
        if not frame.f_code.co_filename.endswith("inspect.py"):
            return False
        frame = frame.f_back
    return False


_IN_HOOK = [False]


def _audit_filtered(event: str, args) -> None:
    if _IN_HOOK[0] or not event.startswith(("sys._getframe", "sys._current_frames", "gc.", "open")):
        return
    _IN_HOOK[0] = True  # _from_learner itself calls sys._getframe, an audited event
    try:
        if _from_learner(event):
            _audit(event, args)
    finally:
        _IN_HOOK[0] = False


class Worker:
    def __init__(self, chan: WorkerEnd):
        self.chan = chan
        self.ns: dict = {}
        self.probes = None
        self.before: dict = {}
        self.owned: list = []  # grader-owned objects handed to learner code (instance dicts watched)

    def evidence(self) -> list[str]:
        out = sorted(_EVIDENCE)
        changed = replaced(self.before) if self.before else []
        out += [f"your code replaced {name}" for name in changed[:8]]
        for obj in self.owned:
            planted = [k for k, v in vars(obj).items() if isinstance(v, _FUNCTIONS)]
            if planted:
                out.append(
                    f"your code replaced methods on a grader object ({type(obj).__name__}: {', '.join(planted)})"
                )
        extra = [
            t.name
            for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive()
        ]
        if extra:
            out.append(f"threads left running by your code: {', '.join(extra[:4])}")
        kids = descendants(os.getpid())
        if kids:
            out.append(f"processes left running by your code: {len(kids)}")
        return out

    def watch(self, obj, *parts: str) -> object:
        """Hand ``obj`` to learner code, watching its instance dict (and its ``parts``') for
        functions planted on the instance (``trainer.train_steps = fake``)."""
        self.owned += [obj, *(getattr(obj, p) for p in parts)]
        return obj

    def load(self, cmd: dict) -> None:
        self.probes = importlib.import_module(cmd["probes"])
        module = types.ModuleType("learner_solution")
        module.__file__ = "<solution cells>"
        sys.modules["learner_solution"] = module
        self.ns = module.__dict__
        errors = []
        for name, source in cmd["setup"]:
            exec(compile(source, f"<setup {name}>", "exec"), self.ns)  # noqa: S102 - the grader's own locked cell
        self.before = snapshot()
        # the parent reads the sandbox's memory charge now, the last moment no learner code has run
        # (lesson 11's budget counts from here), and answers before any learner cell starts
        self.chan.send({"event": "setup_loaded"})
        if (self.chan.receive() or {}).get("cmd") != "cells":
            raise SystemExit(0)
        # every worker: no keyring, io_uring, bpf, perf events (grader/sandbox/fence.py: kernel objects that
        # gradings would share); lesson 11's ranks: only internet sockets too. Before any learner cell; where
        # a fence cannot be installed on a machine it supports, no cell runs (fail closed)
        why = fence.install(ranks=False) if fence.supported() else None
        if not why and cmd.get("fence") and fence.supported():
            why = fence.install()
        if why:
            raise SystemExit(f"the worker's seccomp fence could not be installed: {why}")
        sys.addaudithook(_audit_filtered)
        for name, source in cmd["cells"]:
            filename = f"<cell {name}>"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            try:
                exec(compile(source, filename, "exec"), self.ns)  # noqa: S102 - running the submission is the point
            except BaseException as err:  # noqa: BLE001 - a raising cell is the learner's, like in a kernel
                errors.append(
                    {"cell": name, "message": f"{type(err).__name__}: {err}", "traceback": _tb(err)}
                )
        defined = [n for n in cmd.get("names", []) if callable(self.ns.get(n))]
        self.chan.send(
            {"event": "loaded", "errors": errors, "defined": defined, "evidence": self.evidence()}
        )

    def call(self, cmd: dict) -> None:
        probe = getattr(self.probes, "probe_" + cmd["probe"])
        try:
            msg, blobs = probe(self, **cmd.get("args", {}))
        except BaseException as err:  # noqa: BLE001 - learner code raised: the parent decides what it means
            self.chan.send(
                {
                    "event": "raised",
                    "message": f"{type(err).__name__}: {err}",
                    "traceback": _tb(err),
                    "evidence": self.evidence(),
                }
            )
            return
        self.chan.send({"event": "result", "data": msg, "evidence": self.evidence()}, blobs)

    def serve(self) -> None:
        self.chan.send(
            {"event": "ready", "pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd()}
        )
        while True:
            cmd = self.chan.receive()
            if cmd is None or cmd.get("cmd") == "exit":
                return
            if cmd["cmd"] == "load":
                self.load(cmd)
            elif cmd["cmd"] == "call":
                self.call(cmd)


def _tb(err: BaseException, limit: int = 10) -> str:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return "\n".join(line for line in text.splitlines()[-limit:])


def main() -> int:
    chan = WorkerEnd(int(sys.argv[1]), int(sys.argv[2]))
    Worker(chan).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
