"""Proof that the timed chunks did the training: reveal on the clock, commits, replays.

Ties the returned weights to work done inside timed chunks (after "Proof-of-Learning", Jia et al.
2021). The replay is statistical: a forged chunk passes unless drawn (margins: the threat model in grader/README.md, "training off the clock").
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import torch

from grader.sandbox.commit import encode, load_state
from grader.timed.updates import compare, tensors_apart, tensors_differ, untouched, update

# Bounds, calibrated on honest and forged gradings (grader/README.md, threat model "training off the clock"; figures in
# benchmarks/results/lesson2-work-check-30-xeon-amx-2c.json). Honest chunk-0 cosines vary with the two
# pipelines' batches (0.25-0.57 in 60 runs here, 0.20 once in CI); weights from anywhere else are
# unrelated to this grading's init and sit at the random-direction null (|cos| ~ 1/sqrt(parameters):
# 0.002 for lesson 2's net; the forgery 0.00-0.01). A chunk's size varies most at the end of the
# schedule, where the update is mostly noise (last chunk 0.37-1.74x, log-sd 0.32: a 0.2 floor is
# 4.8 sd away); a chunk whose steps were moved elsewhere is near 0, the forgery 9.6-9.8x.
SIZE_BAND = (0.2, 5.0)  # learner update norm / baseline update norm, same chunk, every chunk
# Chunk 0: the learner's update's least cosine with the baseline's is the spec's ``first_cosine``
# (0.1 by default: lesson 2's figures above; lesson 14's recipes move further from naive's first steps)
MIN_COSINE = 0.5  # a replayed chunk: cosine of the learner's update with the replay's
# A replay of the learner's own kept batches (lesson 2) repeats its chunk exactly: honest updates
# matched it to the bit on this CPU (cosine 1.0000000, size 1.000x); a step on 40% of each batch
# gave cosine 0.93-0.97, size 1.01-1.16x (grader/README.md, threat model "the timed run is the
# checked run"). GPU kernels are not bit-reproducible: 0.99 leaves them room (not yet measured).
# Lesson 3's steps report their loss (StepAudit): the replay of the same batches from the same
# weights gives the same losses up to bf16 rounding; half a batch's loss is another number.
LOSS_TOLERANCE = (1e-4, 0.05)  # absolute, relative: bf16 1.6% at most, half a batch 19-40%
KEPT_COSINE = 0.99
KEPT_SIZE_BAND = (0.9, 1.1)
REPLAYS_PER_RUN = 2  # chunks drawn in secret per scored run, among 1..K-1; and chunk 0
# Chunk 0 is replayed in every scored run, from the run's initial weights: its other check is only the
# loose bound against naive's own chunk 0, and in a time-to-target grading it is much of the scored
# time (lesson 14's reference reaches its target at its second evaluation). Always: a cheaper chunk 0
# is caught in every grading for one replay more per run (~0.4 s lesson 14, ~1 s lesson 2, ~4 s lesson
# 3: their work-check phases in benchmarks/results), and each later chunk keeps its 2/(K-1) per run.
# Drawn among 0..K-1 it would be caught in 1-(1-2/K)^runs of gradings (lesson 14's 8 chunks, 3 runs:
# 58%; lessons 2-3's smoke specs, 4 chunks, 2 runs: 75%), and every later chunk's odds would fall.
# An exact replay, tensor by tensor (issue 52): the whole update's cosine is the large tensors', so a
# step whose backward stops short of some layers on some steps can keep it above the bound. Each
# trained tensor of at least updates.TENSOR_MIN_NUMEL values must pass the cosine the whole update
# must, and where that replay is exact as measured (a floor of 0.99 or more) its size within
# TENSOR_SIZE_BAND: under Adam a layer skipped one step in four keeps its direction (cosine
# 0.9999998) and loses a quarter of its size (tests/test_replay_tensors.py); honest replays here
# match every tensor at 1.0000000 and 1.000x.
TENSOR_SIZE_BAND = (0.8, 1.25)


class Reveal:
    """What the workers may read: ``exposed`` mirrors ``inputs`` by hard links, item by item."""

    def __init__(self, inputs: Path, exposed: Path):
        self.inputs, self.exposed = Path(inputs), Path(exposed)
        self.exposed.mkdir(mode=0o755, exist_ok=True)

    def show(self, src: Path) -> None:
        dst = self.exposed / Path(src).relative_to(self.inputs)
        if dst.exists() and not src.is_dir():
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        if (
            src.is_dir()
        ):  # a folder shown before may have grown (lesson 3's caches): add what is new
            shutil.copytree(
                src,
                dst,
                copy_function=lambda a, b: os.path.exists(b) or os.link(a, b),
                dirs_exist_ok=True,
            )
        else:
            os.link(src, dst)
        for p in [dst, *dst.rglob("*")] if dst.is_dir() else [dst]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        self.exposed.chmod(0o755)

    def show_shared(self, data) -> None:
        """Everything but the runs' training sets and initial weights (warm-up set, caches)."""
        held = {Path(p) for p in (*data.train_dirs, *data.init_paths)}
        for p in sorted(self.inputs.iterdir()):
            if p not in held:
                self.show(p)

    def show_run(self, data, r: int) -> None:
        self.show(Path(data.train_dirs[r]))
        self.show(Path(data.init_paths[r]))


class DiskFull(RuntimeError):
    """The grader's own disk cannot hold the commits: the machine's fault, never the learner's."""


class Commits:
    """The committed states of one grading, on the parent's private disk (they can be large: a
    gpu-profile lesson 3 grading keeps five of ~1 GB). ``expected`` commits in all; the grading
    stops at the first commit that shows the rest cannot fit, not minutes later at a full disk."""

    def __init__(self, folder: Path, expected: int = 1):
        self.folder = Path(folder)
        self.folder.mkdir(mode=0o700, exist_ok=True)
        self.expected, self.added = expected, 0
        self.drawn: dict[int, list[int]] = {}  # run -> chunks to replay, secret until the chunk ran

    def draw(self, r: int, k_chunks: int) -> list[int]:
        """The chunks of run ``r`` to replay, drawn before it starts so that their batches are kept
        as they come: chunk 0, and ``REPLAYS_PER_RUN`` drawn in secret among 1..K-1."""
        pool = range(1, k_chunks)
        drawn = random.SystemRandom().sample(pool, min(REPLAYS_PER_RUN, len(pool)))
        self.drawn[r] = [0, *sorted(drawn)]
        return self.drawn[r]

    def kept_path(self, r: int, c: int) -> Path:
        return self.folder / f"kept-{r}-{c}.safetensors"

    def keep(self, r: int, c: int, kept: dict) -> None:
        """What the learner's chunk ``c`` kept (its batches, or its step losses), for its replay:
        safetensors (a header and raw bytes)."""
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in kept.items()}, str(self.kept_path(r, c)))

    def path(self, role: str, r: int, c: int) -> Path:
        return self.folder / f"{role}-{r}-{c}.pt"

    def add(self, role: str, r: int, c: int, blob: bytes) -> dict:
        state = load_state(blob)  # refused here, before anything else reads it
        if "kept" in state:  # judged and kept by the caller; the disk holds the state alone
            blob = _without_batches(state)
        left = max(1, self.expected - self.added)
        free = shutil.disk_usage(self.folder).free
        if free < left * len(blob):
            raise DiskFull(self._short(left, len(blob), free))
        try:
            self.path(role, r, c).write_bytes(blob)
        except OSError as err:  # ENOSPC or a quota: another process took the space meanwhile
            self.path(role, r, c).unlink(missing_ok=True)
            raise DiskFull(f"{self._short(left, len(blob), free)} ({err})") from err
        self.added += 1
        return state

    def _short(self, left: int, size: int, free: int) -> str:
        return (
            f"the grading machine's disk cannot hold this grading's training states: {left} more "
            f"of {size / 1e6:,.0f} MB need {left * size / 1e9:.1f} GB in {self.folder}, "
            f"{free / 1e9:.1f} GB free (free space there, or set TMPDIR to a larger disk)"
        )

    def state(self, role: str, r: int, c: int) -> dict:
        return load_state(self.path(role, r, c))


def _without_batches(state: dict) -> bytes:
    return encode({k: v for k, v in state.items() if k != "kept"})


def _start(commits: Commits, data, role: str, r: int, c: int) -> dict:
    if c == 0:
        return torch.load(data.init_paths[r], map_location="cpu", weights_only=True)
    return commits.state(role, r, c - 1)["model"]


def check_work(
    out,
    data,
    commits: Commits,
    baseline,
    reveal: Reveal,
    spec,
    runs: list[int],
    begin_of,
    timeout_s: float,
) -> list[str]:
    """Problems for ``runs`` (their chunks all committed); every figure lands in ``out.work_checks``."""
    problems = []
    k_chunks = spec.epochs * spec.chunks_per_epoch
    for r in runs:
        bad = []
        for c in range(k_chunks):  # every chunk: about as much change as the baseline's chunk
            start, end = (
                _start(commits, data, "learner", r, c),
                commits.state("learner", r, c)["model"],
            )
            ref_start, ref_end = (
                _start(commits, data, "baseline", r, c),
                commits.state("baseline", r, c)["model"],
            )
            cos, ratio = compare(update(start, end), update(ref_start, ref_end))
            still = untouched(start, end, ref_start, ref_end)
            out.work_checks.append(
                {
                    "run": r,
                    "chunk": c,
                    "against": "baseline",
                    "cosine": cos,
                    "ratio": ratio,
                    "untouched": len(still),
                }
            )
            if still and not any(
                f"run {r + 1}," in p and "unchanged" in p for p in problems
            ):  # once a run
                problems.append(
                    f"run {r + 1}, timed chunk {c + 1}: your training left {len(still)} tensor(s) the "
                    f"baseline trained exactly unchanged ({', '.join(still[:3])}): a step that skips "
                    "part of the model is not the recipe's step, so your speed cannot be credited"
                )
            if not SIZE_BAND[0] <= ratio <= SIZE_BAND[1] or (
                c == 0 and not cos >= spec.first_cosine
            ):
                bad.append((c, "the baseline's", cos, ratio))
        drawn = commits.drawn.get(r) or commits.draw(r, k_chunks)
        for c in drawn:
            mine = _kept(commits, r, c)
            batches = mine if mine is not None and "x" in mine else None
            end = _replay(baseline, commits, reveal, spec, begin_of(r), r, c, batches, timeout_s)
            start_model = _start(commits, data, "learner", r, c)  # chunk 0: the run's init
            mine_model = commits.state("learner", r, c)["model"]
            cos, ratio = compare(update(start_model, mine_model), update(start_model, end["model"]))
            against = "replay of your batches" if batches is not None else "replay"
            apart = tensors_apart(start_model, mine_model, end["model"])
            out.work_checks.append(
                {"run": r, "chunk": c, "against": against, "cosine": cos, "ratio": ratio}
                | ({"tensor": list(apart[0])} if apart else {})
            )
            (lo, hi), least = SIZE_BAND, MIN_COSINE
            if batches is not None:
                (lo, hi), least = KEPT_SIZE_BAND, KEPT_COSINE
            elif spec.replay_scored:
                least = spec.replay_cosine
            exact = batches is not None or spec.replay_scored  # the very batches, the same masks
            band = TENSOR_SIZE_BAND if least >= KEPT_COSINE else (lo, hi)
            each = (
                least
                if spec.replay_tensor_cosine is None
                else min(least, spec.replay_tensor_cosine)
            )
            differ = tensors_differ(apart, each, band) if exact else []
            if differ and not any(f"run {r + 1}," in p and "tensor" in p for p in problems):
                problems.append(
                    f"run {r + 1}, timed chunk {c + 1}: {len(differ)} trained tensor(s) changed "
                    f"unlike the grader's replay of the same batches from your weights "
                    f"({', '.join(differ[:3])}): a step that does not update what the recipe's "
                    "step updates is not the recipe's step"
                )
            if spec.replay_losses and mine is not None and "losses" in mine:  # held to the replay's
                differ = losses_differ(mine["losses"], (end.get("kept") or {}).get("losses"))
                out.work_checks[-1]["losses"] = differ or "match"
                if differ and not any(f"run {r + 1}," in p and "losses" in p for p in problems):
                    problems.append(
                        f"run {r + 1}, timed chunk {c + 1}: your step returned losses unlike the "
                        f"grader's replay of the same batches from your weights ({differ}): a step "
                        "that trains on part of each batch is not the recipe's step"
                    )
            if cos >= least and lo <= ratio <= hi:
                continue
            if batches is not None or spec.replay_scored:  # the very batches the chunk trained on
                bad.append((c, "the grader's replay of it", cos, ratio))
            else:  # its own pipeline, not kept: other batches, so a replay is only statistical
                out.flags.append(
                    f"run {r + 1}, timed chunk {c + 1}: your weights changed unlike the grader's replay "
                    f"of it (direction {cos:+.2f}, size x{ratio:.2f}); reported, no effect on points"
                )
        for c, what, cos, ratio in bad[:2]:
            problems.append(
                f"run {r + 1}, timed chunk {c + 1}: your weights changed unlike {what} (direction "
                f"{cos:+.2f}, size x{ratio:.2f}): the training that produced them was not done "
                "inside the timed chunks, so your speed cannot be credited"
            )
    return problems


def _kept(commits: Commits, r: int, c: int) -> dict | None:
    from safetensors.torch import load_file

    path = commits.kept_path(r, c)
    return load_file(str(path)) if path.exists() else None


def _replay(baseline, commits, reveal, spec, begin: dict, r: int, c: int, batches, timeout_s):
    """Chunk ``c`` of run ``r`` again in the baseline worker, from the learner's committed state of
    chunk ``c - 1`` (chunk 0: from the run's initial weights, ``begin["init_path"]``, shown since its
    first chunk), on the learner's kept ``batches`` where there are some: the replayed state."""
    shown = {}  # the name the worker reads -> the parent's file
    if c > 0:
        shown[f"replay-{r}-{c}.pt"] = commits.path("learner", r, c - 1)
        begin = dict(begin, init_path=f"replay-{r}-{c}.pt")
    extra = {}
    if batches is not None:  # an exact replay of what the learner's chunk trained on
        extra["batches"] = commits.kept_path(r, c).name
        shown[extra["batches"]] = commits.kept_path(r, c)
    for name, src in shown.items():
        shutil.copyfile(src, reveal.exposed / name)
        (reveal.exposed / name).chmod(0o644)
    baseline.send(cmd="replay", begin=begin, chunk=c, parts=spec.chunks_per_epoch, **extra)
    event, _ = baseline.expect("replayed", timeout_s, f"replaying chunk {c + 1} of run {r + 1}")
    end = load_state(baseline.blob(event.get("nbytes"), timeout_s, "the replayed weights"))
    baseline.pause()
    for name in shown:
        (reveal.exposed / name).unlink()
    return end


def losses_differ(mine, ref) -> str:
    """'' when most of the learner's per-step losses match the replay's within ``LOSS_TOLERANCE``, else
    where they part (a step on part of each batch returns that part's loss, not the batch's, on every step).
    An honest bf16 chunk may part on one step: on an AVX512-BF16 EPYC one step of an honest 12 read 0.0753
    against the replay's 0.0845 (11%) while its update matched at cosine 0.99995, and failed a correct
    solution; half the rows are 19-40% off on every step."""
    if ref is None or len(mine) != len(ref):
        return f"{len(mine)} losses for {0 if ref is None else len(ref)} replayed steps"
    pairs = list(zip(mine.tolist(), ref.tolist(), strict=True))
    off = [
        (i, a, b)
        for i, (a, b) in enumerate(pairs)
        if not abs(a - b) <= LOSS_TOLERANCE[0] + LOSS_TOLERANCE[1] * abs(b)
    ]
    if 2 * len(off) <= len(pairs):
        return ""
    i, a, b = off[0]
    return f"{len(off)} of {len(pairs)} steps, first step {i + 1}: {a:.4f}, the replay's {b:.4f}"
