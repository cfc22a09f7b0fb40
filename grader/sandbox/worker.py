"""The measured process: trains one recipe on command; the *parent* holds the clock.

Nothing it reports about speed or accuracy is believed; learner code shares this process and
could forge events, which the parent-side clock and evaluation make pointless.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import linecache
import os
import pkgutil
import shutil
import sys
import traceback
import types
import warnings
from pathlib import Path

import torch

from effkit.measure import sync
from grader.sandbox import fence
from grader.sandbox.commit import load_state, set_rng, to_memfd, training_state
from grader.sandbox.learner_view import WORKER_MODULES
from grader.sandbox.tamper import replaced, snapshot

# The parent's modules: watched too where the machine cannot hide them from the worker (no root, no
# view: they are importable, so replacing their functions is reported as before); absent otherwise.
GRADER_MODULES = (
    "grader.kit.audit",
    "grader.timed.gate",
    "grader.frontends.notebook",
    "grader.scoring.perf",
    "grader.timed.protocol",
    "grader.common.quiet",
    "grader.sandbox.supervisor",
    "grader.scoring.targets",
    "grader.sandbox.timelimit",
)


def watched_modules(runtime_module: str) -> list[str]:
    """The grader modules this worker imports before learner code, so that replacing any of their
    functions is detected: the worker-side core and the runtime's own assignment package. Nothing
    else of the grader is in the worker's view (:mod:`grader.sandbox.learner_view`)."""
    package = runtime_module.rpartition(".")[0] + "."
    return [
        m
        for m in WORKER_MODULES
        if m.startswith(package) or not m.startswith("grader.assignments.")
        if m not in ("grader.sandbox.worker", "grader.sandbox.probe_worker")
    ]


def assignment_modules(runtime_module: str) -> list[str]:
    """Every module of the runtime's assignment package this worker can find (its checks too where
    nothing hides them): imported before learner code so that replacing their functions is detected."""
    package = importlib.import_module(runtime_module.rpartition(".")[0])
    return [
        f"{package.__name__}.{m.name}"
        for m in pkgutil.iter_modules(package.__path__)
        if not m.ispkg
    ]


class Diverged(RuntimeError):
    """The weights became NaN/inf."""


class Channel:
    """JSON lines over two pipes: events out, commands in."""

    def __init__(self, evt_fd: int, cmd_fd: int):
        self.out = os.fdopen(evt_fd, "w", buffering=1)
        self.inp = os.fdopen(cmd_fd, "r")

    def send(self, event: str, **data) -> None:
        self.out.write(json.dumps({"event": event, **data}) + "\n")
        self.out.flush()

    def send_bytes(self, event: str, blob: bytes, **data) -> None:
        """An event announcing ``len(blob)`` raw bytes, then the bytes (weights: no file)."""
        self.send(event, nbytes=len(blob), **data)
        self.out.buffer.write(blob)
        self.out.buffer.flush()

    def receive(self) -> dict | None:
        line = self.inp.readline()
        return json.loads(line) if line else None


def _short_traceback(err: BaseException, limit: int = 12) -> str:
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    text = "".join(lines)
    tail = text.splitlines()[-limit:]
    return "\n".join(tail)


def seed_caches(inputs: Path) -> None:
    """Copy the caches the parent built (``inputs/effkit-cache``: the BERT tokenizer) into this
    process's private effkit cache, so the worker tokenizes exactly as the parent evaluates."""
    if (inputs / "effkit-cache").is_dir():
        home = Path(os.environ.get("EFFKIT_DATA") or Path.home() / ".cache" / "effkit")
        shutil.copytree(inputs / "effkit-cache", home, dirs_exist_ok=True)


class Worker:
    def __init__(self, config: dict, channel: Channel):
        self.config = config
        self.channel = channel
        for name in watched_modules(config["assignment_module"]):
            importlib.import_module(name)  # so that replacing any of their functions is detected
        for name in (*GRADER_MODULES, *assignment_modules(config["assignment_module"])):
            with contextlib.suppress(
                ModuleNotFoundError
            ):  # not in this worker's view: nothing to replace
                importlib.import_module(name)
        self.assignment = importlib.import_module(config["assignment_module"])
        self.device = config["device"]
        self.learner_object = None
        self.commit_fd: int | None = (
            None  # the last chunk's sealed state (grader.sandbox.commit.to_memfd)
        )
        self.before = snapshot()  # clocks and effkit/grader functions before any learner code

    # -- learner code -----------------------------------------------------------------------
    def load(self, cmd: dict) -> None:
        # no keyring, io_uring, bpf or perf events from here on (grader/sandbox/fence.py: kernel objects
        # gradings would share); on a machine the fence supports, no learner cell runs without it
        why = fence.install(ranks=False) if fence.supported() else None
        if why:
            raise SystemExit(f"the worker's seccomp fence could not be installed: {why}")
        # The reference answers this worker never needs refuse to run from here on, whatever route
        # learner code takes to them (a list, getattr on a built string): the timed run is judged
        # on what it ran, not only on what the probe worker saw (grader/README.md, threat model).
        refuse = getattr(self.assignment, "refuse_reference_answers", None)
        if refuse is not None:
            refuse()
        module = types.ModuleType("learner_solution")
        module.__file__ = "<learner solution cells>"
        sys.modules["learner_solution"] = module
        for name, source in cmd["cells"]:
            filename = f"<cell {name}>"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            code = compile(source, filename, "exec")  # tracebacks now show the learner's lines
            exec(code, module.__dict__)  # noqa: S102 - running the submission is the point
        changed = replaced(self.before)
        obj = module.__dict__.get(cmd["object_name"])
        if obj is None:
            raise LookupError(
                f"your solution cells define no {cmd['object_name']!r}; keep that name for your class"
            )
        self.learner_object = obj
        self.channel.send(
            "loaded", replaced=changed, reference_reused=self.assignment.reuses_reference(obj)
        )

    # -- training ---------------------------------------------------------------------------
    def chunk(self, cmd: dict) -> None:
        """One timed chunk of a run: optionally build it, train part ``j`` of ``parts`` of the
        next epoch (or whole epochs), optionally finish it (drain and audit the last epoch, check
        and save the weights)."""
        if cmd.get("begin"):
            self._begin(cmd["begin"])
        trainer, model, audit = self.trainer, self.model, self.audit
        if hasattr(audit, "take_kept"):
            audit.take_kept()  # the warm-up's, or what a previous chunk left: this chunk's only
        j, parts = cmd.get("part", (0, 1))
        spe = trainer.steps_per_epoch
        n = min(
            round((j + 1) * spe / parts) - round(j * spe / parts), trainer.total_steps - self.steps
        )
        if n > 0:
            trainer.train_steps(n)
            sync(self.device)
            self.steps += n
        if j == parts - 1:
            self.epoch += 1
        bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise Diverged(
                f"training diverged: NaN/inf in the weights ({bad[0]}, ...) in epoch "
                f"{self.epoch + (j < parts - 1)}, i.e. the loss became NaN. " + audit.nan_hint()
            )
        report = {"epoch": self.epoch}
        # taken before finish() drains the epoch's tail: only batches the trainer trained on
        kept = audit.take_kept() if hasattr(audit, "take_kept") else None
        if cmd.get("finish"):
            audit.finish(trainer.pipeline, self.epoch)
            now = _instance_functions(trainer, model)
            planted = sorted(k for k, v in now.items() if self.methods.get(k) != v)
            if planted:  # in-process, so only a tripwire: the kept batches' replay is the proof
                audit.problems.append(
                    f"your code replaced the grader's {', '.join(planted[:3])} on its instance: the "
                    "timed run must train with the recipe's own step"
                )
            # Learner code also runs *during* training (the pipeline): look for tampering again.
            report = {
                "audit": audit.report(),
                "steps": self.steps,
                "replaced": replaced(self.before),
            }
        event = "done" if cmd.get("finish") else "chunk_done"
        if not cmd.get("send_weights"):
            self.channel.send(event, **report)
            return
        # The training state at the end of every timed chunk, still on the clock: grader.timed.replay
        # checks the work it reflects. In a sealed memfd the parent copies out while we are frozen
        # (the previous one is closed: it was read before this chunk began), else over the pipe.
        if cmd["send_weights"] == "memfd":
            if self.commit_fd is not None:
                os.close(self.commit_fd)
            self.commit_fd, nbytes = to_memfd(trainer, kept)
            self.channel.send(event, memfd=self.commit_fd, nbytes=nbytes, **report)
        else:
            self.channel.send_bytes(event, training_state(trainer, kept), **report)

    def replay(self, cmd: dict) -> None:
        """Chunk ``chunk`` of a run again, through the reference path, from a committed state
        (``begin["init_path"]``; chunk 0: the run's initial weights): only ever in the baseline
        worker, where no learner code ran."""
        if self.learner_object is not None:
            raise RuntimeError("replays run only in a grader-only worker")
        begin, state = dict(cmd["begin"]), None
        c, parts = cmd["chunk"], cmd["parts"]
        if c == 0:  # as the run began: its initial weights (loaded by _begin, as a run's chunk 0
            # does), the recipe's fresh optimizer and schedule, generators as its build seeded them
            self._begin(begin)
        else:
            start = begin.pop("init_path")
            self._begin(begin)
            state = load_state(Path(os.environ["EFFKIT_GRADER_DATA"]) / start)
            self.model.load_state_dict(state["model"])
            own = self.trainer.optimizer.state_dict()  # the recipe's hyper-parameters
            own["state"] = state["optimizer"]
            self.trainer.optimizer.load_state_dict(own)
        trainer = self.trainer
        spe = trainer.steps_per_epoch
        j, first = c % parts, (c // parts) * spe + round((c % parts) * spe / parts)
        n = min(round((j + 1) * spe / parts) - round(j * spe / parts), trainer.total_steps - first)
        with warnings.catch_warnings():  # the schedule to where chunk c starts
            warnings.simplefilter("ignore")
            for _ in range(first):
                trainer.scheduler.step()
        if cmd.get("batches"):  # the batches the learner's timed chunk trained on, as committed
            trainer._batches = iter(self._kept_batches(cmd["batches"], n))
        else:  # the very batches the chunk trained on (same seed, same stream)
            trainer.skip_batches(first)
        try:  # and the learner's dropout masks, from its committed generators (chunk 0: seeded)
            if state is not None:
                set_rng(state, self.device)
        except (
            RuntimeError,
            ValueError,
        ):  # a state torch refuses: the replay differs, the learner's doing
            pass
        if hasattr(trainer, "step"):
            trainer.step = first
        if n > 0:
            trainer.train_steps(n)
            sync(self.device)
        kept = self.audit.take_kept() if hasattr(self.audit, "take_kept") else None
        self.channel.send_bytes("replayed", training_state(trainer, kept))

    def _kept_batches(self, name: str, n: int) -> list:
        """A timed chunk's batches (a safetensors file the parent wrote): exactly ``n`` steps."""
        from safetensors.torch import load_file

        kept = load_file(str(Path(os.environ["EFFKIT_GRADER_DATA"]) / name))
        sizes = kept["sizes"].tolist()
        if len(sizes) != n:
            raise ValueError(f"the kept batches hold {len(sizes)} steps, the chunk has {n}")
        xs, ys = kept["x"].split(sizes), kept["y"].split(sizes)
        return [(x.to(self.device), y.to(self.device)) for x, y in zip(xs, ys, strict=True)]

    def _begin(self, spec: dict) -> None:
        self.audit = self.assignment.EpochAudit()
        self.audit.keep = bool(getattr(self.assignment, "KEEP_BATCHES", False))
        inputs = Path(os.environ["EFFKIT_GRADER_DATA"])  # the parent's inputs, read-only here
        seed_caches(inputs)
        self.trainer = self.assignment.build_trainer(
            self.learner_object,
            self.audit,
            str(inputs / spec["data_dir"]),
            self.device,
            spec["seed"],
            spec["profile"],
            spec["hooks"],
        )
        self.model = self.assignment.model_of(self.trainer)
        if spec.get("init_path"):  # the parent's initial weights: runs r of A and B start equal
            state = torch.load(
                inputs / spec["init_path"], map_location=self.device, weights_only=True
            )
            self.model.load_state_dict(state)
        self.steps, self.epoch = 0, 0
        self.methods = _instance_functions(self.trainer, self.model)  # before any chunk runs

    def serve(self) -> None:
        self.channel.send("ready", pid=os.getpid())
        while True:
            cmd = self.channel.receive()
            if cmd is None or cmd.get("cmd") == "exit":
                return
            try:
                if cmd["cmd"] == "load":
                    self.load(cmd)
                elif cmd["cmd"] == "chunk":
                    self.chunk(cmd)
                elif cmd["cmd"] == "replay":
                    self.replay(cmd)
                else:
                    raise ValueError(f"unknown command {cmd['cmd']!r}")
            except Diverged as err:
                self.channel.send("error", kind="nan", message=str(err))
            except BaseException as err:  # noqa: BLE001 - report anything the learner's code raises
                self.channel.send(
                    "error",
                    kind="exception",
                    message=f"{type(err).__name__}: {err}",
                    traceback=_short_traceback(err),
                )
                if isinstance(err, KeyboardInterrupt | SystemExit):
                    return


def _instance_functions(*objects) -> dict[str, int]:
    """Functions held on the instances themselves (``trainer._optimizer_step = fake``), by identity:
    the grader's objects get none after their build, so one that appears or changes is planted."""
    kinds = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    return {
        f"{type(obj).__name__}.{k}": id(v)
        for obj in objects
        for k, v in vars(obj).items()
        if isinstance(v, kinds)
    }


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])  # on the command line: the worker reads no file of the parent's
    channel = Channel(int(argv[2]), int(argv[3]))
    try:
        Worker(config, channel).serve()
    except BaseException as err:  # noqa: BLE001 - start-up failures must reach the parent too
        channel.send(
            "error",
            kind="startup",
            message=f"{type(err).__name__}: {err}",
            traceback=_short_traceback(err),
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
