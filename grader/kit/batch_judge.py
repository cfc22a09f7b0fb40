"""The parent's judge of a timed chunk's kept batches: what the timed run's pipeline fed the trainer.

Every timed chunk commits the batches its trainer received (:class:`grader.kit.audit.EpochAudit`).
Here they are decoded and matched to the run's own training images: every step of the batch size,
exact crops of the zero-padded image, about half of them mirrored, the crop offsets spread as random
crops spread, labels aligned, no image twice in an epoch (across its chunks), each epoch's crops and
flips drawn afresh (not the last epoch's replayed), and not effkit's ``DevicePipeline`` for the run's
seed. A pipeline that honours the contract only
where it is probed fails here. Parent only: a lesson's ``timed_checks`` builds its ``ChunkJudge``
from these (lessons 2 and 14); never in a worker's view of the repository.
"""

from __future__ import annotations

import math
import types

import numpy as np
import torch

from grader.kit.pixels import PAD, decode

REFERENCE_REUSED = (
    "your pipeline's batches are bit-identical to effkit's DevicePipeline (the reference answer) "
    "for the same data and seed: write your own pipeline to earn the performance points"
)

PATCH = slice(12, 20)  # an 8x8 patch of the source that every crop within the padding keeps whole
MIN_IMAGES_FOR_SPREAD = 100  # below this a chunk's crop and flip statistics say too little
OFFSETS = (2 * PAD + 1) ** 2  # the 81 crops of a 4-px zero padding
# Distinct offsets among n uniform crops average 81 (1 - (80/81)^n), 57.6 at n = 100, with an SD
# near 3: under 60% of that is a dozen SDs away for a contract pipeline, and catches a few
# pre-shifted copies of the set drawn from (10 copies: at most 10 offsets)
MIN_OFFSET_SHARE = 0.6
# Under the contract an image keeps last epoch's crop and flip with probability 1/162 (0 with
# alternating flips): a pipeline that replays an augmented epoch keeps all of them
MAX_REPLAYED = 0.1
# A random hash of a patch (uint8 x 192 weights < 2**40: no int64 overflow); matches are verified.
_WEIGHTS = np.random.default_rng(0).integers(1, 2**40, 8 * 8 * 3, dtype=np.int64)


def _hashes(patches: np.ndarray) -> np.ndarray:
    return patches.reshape(len(patches), -1).astype(np.int64) @ _WEIGHTS


class RunImages:
    """One run's training set, indexed so that a crop, mirrored or not, finds its source."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images, self.labels = images, np.asarray(labels)
        hashes = _hashes(np.ascontiguousarray(images[:, PATCH, PATCH]))
        self.order = np.argsort(hashes)
        self.sorted = hashes[self.order]
        self.padded = np.pad(images, ((0, 0), (PAD, PAD), (PAD, PAD), (0, 0)))

    def locate(self, pixels: np.ndarray) -> np.ndarray:
        """Per image (B x 32 x 32 x 3 uint8): [source, dy, dx, flipped], source -1 if none fits."""
        found = np.full((len(pixels), 4), -1, dtype=np.int64)
        for flipped in (0, 1):
            views = pixels[:, :, ::-1] if flipped else pixels
            for dy in range(2 * PAD + 1):
                for dx in range(2 * PAD + 1):
                    todo = np.nonzero(found[:, 0] < 0)[0]
                    if not len(todo):
                        return found
                    # source pixel (i, j) sits at crop pixel (i + PAD - dy, j + PAD - dx)
                    r0, c0 = PATCH.start + PAD - dy, PATCH.start + PAD - dx
                    h = _hashes(np.ascontiguousarray(views[todo, r0 : r0 + 8, c0 : c0 + 8]))
                    pos = np.minimum(np.searchsorted(self.sorted, h), len(self.sorted) - 1)
                    hit = self.sorted[pos] == h
                    cand, src = todo[hit], self.order[pos[hit]]
                    if not len(cand):
                        continue
                    want = self.padded[src, dy : dy + 32, dx : dx + 32]
                    same = (views[cand] == want).reshape(len(cand), -1).all(axis=1)
                    found[cand[same]] = np.stack(
                        [src[same], *(np.full(int(same.sum()), v) for v in (dy, dx, flipped))],
                        axis=1,
                    ).reshape(-1, 4)
        return found


def chunk_steps(spec, n_train: int, batch_size: int, c: int) -> range:
    """The recipe's steps that timed chunk ``c`` trains (as :meth:`grader.sandbox.worker.Worker.chunk`)."""
    spe, parts = math.ceil(n_train / batch_size), spec.chunks_per_epoch
    j, first = c % parts, (c // parts) * spe + round((c % parts) * spe / parts)
    return range(first, first + round((j + 1) * spe / parts) - round(j * spe / parts))


class EpochLedger:
    """One timed run's record across its chunks, judged in order: which images an epoch has shown,
    and each image's crop and flip in this epoch and the last (the parent's, from decoded pixels)."""

    def __init__(self, n_images: int):
        self.epoch = -1
        self.seen = np.zeros(n_images, dtype=bool)
        self.now = np.full((n_images, 3), -1, dtype=np.int64)
        self.before = self.now.copy()

    def check(self, ok: np.ndarray, epoch: int) -> list[str]:
        """Problems with one chunk's located images (``ok``: rows of [source, dy, dx, flipped])."""
        if epoch != self.epoch:
            self.epoch, self.before = epoch, self.now
            self.now, self.seen[:] = np.full_like(self.before, -1), False
        src, problems = ok[:, 0], []
        again = int(self.seen[src].sum())
        if again:
            problems.append(
                f"{again} images came twice in epoch {epoch + 1}: shown in an earlier chunk of it"
            )
        self.seen[src] = True
        self.now[src] = ok[:, 1:]
        last = self.before[src]
        known = last[:, 0] >= 0
        if known.sum() >= MIN_IMAGES_FOR_SPREAD:
            kept = float((last[known] == ok[known, 1:]).all(axis=1).mean())
            if kept > MAX_REPLAYED:
                problems.append(
                    f"{kept:.0%} of {int(known.sum())} images had the same crop and flip as in epoch "
                    f"{epoch}: random crops and flips are drawn afresh every epoch (about 1 in 162 "
                    "repeats by chance), not an augmented epoch replayed"
                )
        return problems


def judge(
    run: RunImages,
    kept: dict,
    steps: range,
    batch_size: int,
    reference,
    ledger: EpochLedger | None = None,
) -> list[str]:
    """Problems with one chunk's batches (empty when it is the contract the probes checked);
    with the run's ``ledger``, across its chunks too (every chunk of the run, in order)."""
    n, sizes = len(run.images), kept["sizes"].tolist()
    spe = math.ceil(n / batch_size)
    want = [batch_size if s % spe < spe - 1 else n - batch_size * (spe - 1) for s in steps]
    if sizes != want:
        at = next(
            (i for i, (a, b) in enumerate(zip(sizes, want, strict=False)) if a != b),
            min(len(sizes), len(want)),
        )
        return [
            f"the trainer received {len(sizes)} batches of {sorted(set(sizes))[:4]} rows where the "
            f"recipe takes {len(want)} of {batch_size} (step {steps.start + at + 1} differs): every "
            "image once per epoch, in batches of the batch size, in the timed run too"
        ]
    try:
        pixels = decode(kept["x"]).numpy().astype(np.uint8)
    except AssertionError as err:
        return [str(err)]
    found = run.locate(pixels)
    problems = []
    lost = int((found[:, 0] < 0).sum())
    if lost:
        problems.append(
            f"{lost} of {len(found)} images are not an exact 32x32 crop of a zero-padded (4 px) "
            "training image, mirrored or not"
        )
    ok = found[found[:, 0] >= 0]
    labels = kept["y"].numpy()[found[:, 0] >= 0]
    wrong = int((run.labels[ok[:, 0]] != labels).sum())
    if wrong:
        problems.append(f"{wrong} images came with another label than their own")
    twice = len(ok) - len(np.unique(ok[:, 0]))
    if twice:
        problems.append(f"{twice} images came twice in one epoch")
    if len(ok) >= MIN_IMAGES_FOR_SPREAD:
        offsets = len({(int(a), int(b)) for a, b in ok[:, 1:3]})
        expected = OFFSETS * (1 - (1 - 1 / OFFSETS) ** len(ok))
        rate = float(ok[:, 3].mean())
        if offsets < MIN_OFFSET_SHARE * expected or not 0.25 < rate < 0.75:
            problems.append(
                f"random crops and flips expected: {offsets} distinct crop offsets (random crops give "
                f"about {expected:.0f}) and {rate:.0%} mirrored among {len(ok)} images"
            )
    if ledger is not None:
        problems += ledger.check(ok, steps.start // spe)
    x0, y0 = reference(steps.start)
    if torch.equal(kept["x"][: len(x0)], x0.cpu()) and torch.equal(kept["y"][: len(y0)], y0.cpu()):
        problems.append(REFERENCE_REUSED)
    return problems


def reference_batches(images: np.ndarray, labels, batch_size: int, device: str, seed: int):
    """``step -> (x, y)``: effkit's DevicePipeline's batch at that step of a run (epochs cycle)."""
    from effkit.workloads.cifar.pipelines import DevicePipeline

    dataset = types.SimpleNamespace(data=images, targets=[int(t) for t in labels])
    state = {"at": 0, "last": None}

    def restart() -> None:
        state["pipe"] = DevicePipeline(dataset, batch_size, device, seed)
        state["stream"], state["at"] = iter(state["pipe"]), 0

    def batch(step: int):
        if step == state["at"] - 1:  # both sides' same chunk: asked twice
            return state["last"]
        if step < state["at"] or "pipe" not in state:
            restart()
        while True:
            try:
                state["last"] = next(state["stream"])
            except StopIteration:  # a new epoch: a fresh iter() reshuffles, as in the trainer
                state["stream"] = iter(state["pipe"])
                continue
            state["at"] += 1
            if state["at"] - 1 == step:
                return state["last"]

    return batch
