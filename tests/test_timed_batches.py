"""Lesson 2's timed batches judged in the parent (issue 52 §1): what the timed run trained on must be
the contract the probe worker checked. Fast: the judge on hand-made chunks, no grading."""

import copy

import numpy as np
import pytest
import torch

from effkit.workloads.cifar.pipelines import DevicePipeline, TorchvisionPipeline, normalize
from grader.assignments.lesson2 import timed_checks
from grader.assignments.lesson2.checks import REFERENCE_REUSED, SPECS
from grader.assignments.lesson2.probe_data import _template_dataset
from grader.kit.data import grader_images
from grader.sandbox.commit import encode, load_state

N, BS, SEED = 600, 32, 11


@pytest.fixture(scope="module")
def run():
    images, labels = grader_images(N, 7)
    dataset = copy.copy(_template_dataset())
    dataset.data, dataset.targets = images, labels.tolist()
    judge = timed_checks.RunImages(images, labels)
    reference = timed_checks.reference_batches(images, labels, BS, "cpu", SEED)
    return dataset, judge, reference


class NoAugment:
    """Shuffled, normalised, every image once: no crop, no flip."""

    def __init__(self, dataset, batch_size, device, seed):
        self.x = normalize(torch.from_numpy(np.asarray(dataset.data))).contiguous()
        self.y, self.bs = torch.tensor(dataset.targets), batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return -(-len(self.y) // self.bs)

    def __iter__(self):
        perm = torch.randperm(len(self.y), generator=self.gen)
        for i in range(0, len(self.y), self.bs):
            yield self.x[perm[i : i + self.bs]], self.y[perm[i : i + self.bs]]


def _chunk(dataset, cls, c: int, change=None):
    """Chunk ``c``'s batches of a run that feeds ``cls``'s stream, as a timed worker commits them."""
    steps = timed_checks.chunk_steps(SPECS["smoke"], N, BS, c)
    pipe, out = cls(dataset, BS, "cpu", SEED), []
    while len(out) < steps.stop:
        out += list(pipe)
    batches = [change(x, y) if change else (x, y) for x, y in out[steps.start : steps.stop]]
    kept = {
        "x": torch.cat([x for x, _ in batches]),
        "y": torch.cat([y for _, y in batches]),
        "sizes": torch.tensor([len(y) for _, y in batches]),
    }
    return kept, steps


def test_the_naive_pipelines_timed_batches_pass_every_chunk(run):
    dataset, judge, reference = run
    for c in range(4):  # across the epoch boundary and its partial last batch
        kept, steps = _chunk(dataset, TorchvisionPipeline, c)
        assert timed_checks.judge(judge, kept, steps, BS, reference) == [], c


def test_no_crop_and_no_flip_in_the_timed_run_is_named(run):
    dataset, judge, reference = run
    kept, steps = _chunk(dataset, NoAugment, 1)
    problems = timed_checks.judge(judge, kept, steps, BS, reference)
    assert any("random crops and flips expected: 1 distinct crop offsets" in p for p in problems)


def test_effkits_device_pipeline_in_the_timed_run_is_the_reference(run):
    dataset, judge, reference = run
    kept, steps = _chunk(dataset, DevicePipeline, 2)
    assert timed_checks.judge(judge, kept, steps, BS, reference) == [REFERENCE_REUSED]


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda x, y: (x[: len(y) // 2], y[: len(y) // 2]), "rows where the recipe takes 9 of 32"),
        (lambda x, y: (x, y.roll(1)), "with another label than their own"),
        (lambda x, y: (torch.cat([x[:1], x[:-1]]), y), "came twice in one epoch"),
        (lambda x, y: (x * 2, y), "de-normalising gives"),
        (lambda x, y: (x.roll(1, dims=2), y), "not an exact 32x32 crop"),
    ],
)
def test_a_timed_chunk_that_breaks_the_contract_says_how(run, change, said):
    dataset, judge, reference = run
    kept, steps = _chunk(dataset, TorchvisionPipeline, 1, change)
    problems = timed_checks.judge(judge, kept, steps, BS, reference)
    assert any(said in p for p in problems), problems


def test_a_committed_state_carries_kept_batches_of_the_right_shape_only():
    x = torch.zeros(4, 3, 32, 32)
    good = {"x": x, "y": torch.zeros(4, dtype=torch.int64), "sizes": torch.tensor([3, 1])}
    for batches, ok in (
        (good, True),
        ({**good, "sizes": torch.tensor([3, 2])}, False),  # sizes that do not add up
        ({**good, "x": x.double()}, False),
        ({**good, "extra": x}, False),
    ):
        blob = encode({"model": {"w": torch.ones(2)}, "optimizer": {}, "kept": batches})
        if ok:
            assert load_state(blob)["kept"]["sizes"].tolist() == [3, 1]
        else:
            with pytest.raises(ValueError, match="what it kept of the chunk"):
                load_state(blob)


def test_a_function_planted_on_the_graders_trainer_instance_is_seen():
    """The timed worker's tripwire (in-process: the kept batches' replay is the proof)."""
    from grader.sandbox.worker import _instance_functions

    model = torch.nn.Linear(2, 2)

    class Trainer:
        def _optimizer_step(self, *args):
            pass

    trainer = Trainer()
    trainer.train_step = print  # a step handed in at build: part of the snapshot
    before = _instance_functions(trainer, model)
    assert _instance_functions(trainer, model) == before
    trainer._optimizer_step = lambda *args: None
    model.forward = lambda x: x
    now = _instance_functions(trainer, model)
    assert sorted(k for k, v in now.items() if before.get(k) != v) == [
        "Linear.forward",
        "Trainer._optimizer_step",
    ]


def test_a_steps_losses_are_held_to_the_replays():
    """Lesson 3's timed steps report their losses; half a batch's loss is another number."""
    from grader.timed.replay import losses_differ

    ref = torch.tensor([0.0100, 0.0070, 0.0060], dtype=torch.float64)
    assert losses_differ(ref * 1.01, ref) == ""  # bf16 rounding
    assert losses_differ(ref * 1.2, ref).startswith(
        "3 of 3 steps, first step 1: 0.0120, the replay's 0.0100"
    )
    assert "2 losses for 3 replayed steps" in losses_differ(ref[:2], ref)
    # an honest bf16 chunk parting on one step of 12 (measured: 0.0753 against 0.0845) still matches; half the
    # rows on every step, or on most of them, do not
    twelve = torch.linspace(0.2, 0.08, 12, dtype=torch.float64)
    one_off = twelve.clone()
    one_off[5] *= 0.0753 / 0.0845
    assert losses_differ(one_off, twelve) == ""
    half_rows = twelve * torch.tensor([1.19, 0.7, 1.4, 0.8] * 3, dtype=torch.float64)
    assert losses_differ(half_rows, twelve).startswith("12 of 12 steps")
    most = twelve.clone()
    most[:7] *= 1.25
    assert losses_differ(most, twelve).startswith("7 of 12 steps")
    blob = encode({"model": {}, "optimizer": {}, "kept": {"losses": ref}})
    assert load_state(blob)["kept"]["losses"].tolist() == ref.tolist()


def test_a_commit_is_parsed_never_unpickled():
    """Issue 52 §3b: safetensors both ways; a pickle (even of plain tensors) and an unknown key are
    refused; tied weights, optimizer state and generators survive the trip."""
    import io

    from grader.sandbox.commit import decode

    w = torch.randn(3, 2)
    state = {
        "model": {"a.weight": w, "b.weight": w},  # tied: one storage
        "optimizer": {0: {"step": torch.tensor(4.0), "exp_avg": torch.ones(3, 2)}, 1: {"step": 2}},
        "rng": {"cpu": torch.get_rng_state()},
    }
    back = load_state(encode(state))
    assert torch.equal(back["model"]["b.weight"], w) and back["optimizer"][1]["step"].item() == 2
    assert torch.equal(back["rng"]["cpu"], torch.get_rng_state())
    buffer = io.BytesIO()
    torch.save({"model": {"w": w}, "optimizer": {}}, buffer)
    with pytest.raises(ValueError, match="not a training state"):
        load_state(buffer.getvalue())
    with pytest.raises(ValueError, match="key 'other/x'"):
        decode(_with_key("other/x"))


def _with_key(key: str) -> bytes:
    from safetensors.torch import save

    return save({key: torch.zeros(1)})


# -- across chunks: an epoch's images once, its crops and flips drawn afresh (a review, 2026-12-06) --


def _chunks(dataset, cls, n_chunks: int):
    """The first ``n_chunks`` chunks of one run of ``cls``'s stream, in order, as committed."""
    pipe, out = cls(dataset, BS, "cpu", SEED), []
    for c in range(n_chunks):
        steps = timed_checks.chunk_steps(SPECS["smoke"], N, BS, c)
        while len(out) < steps.stop:
            out += list(pipe)
        batches = out[steps.start : steps.stop]
        kept = {
            "x": torch.cat([x for x, _ in batches]),
            "y": torch.cat([y for _, y in batches]),
            "sizes": torch.tensor([len(y) for _, y in batches]),
        }
        yield c, kept, steps


def _judged(run, cls, epochs: int = 2) -> list[str]:
    dataset, judge, reference = run
    ledger, problems = timed_checks.EpochLedger(N), []
    for _, kept, steps in _chunks(dataset, cls, epochs * SPECS["smoke"].chunks_per_epoch):
        problems += timed_checks.judge(judge, kept, steps, BS, reference, ledger)
    return problems


class ReplayedEpoch:
    """The naive pipeline's first epoch, augmented once and replayed reshuffled: cheap later epochs."""

    def __init__(self, dataset, batch_size, device, seed):
        self.inner, self.bs, self.first = (
            TorchvisionPipeline(dataset, batch_size, device, seed),
            batch_size,
            None,
        )
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        if self.first is None:
            self.first = list(self.inner)
            yield from self.first
            return
        x, y = torch.cat([x for x, _ in self.first]), torch.cat([y for _, y in self.first])
        perm = torch.randperm(len(y), generator=self.gen)
        for i in range(0, len(y), self.bs):
            yield x[perm[i : i + self.bs]], y[perm[i : i + self.bs]]


class HalfAnEpochTwice:
    """Each batch unique, each chunk unique, but an epoch's second half repeats its first half."""

    def __init__(self, dataset, batch_size, device, seed):
        self.inner = TorchvisionPipeline(dataset, batch_size, device, seed)

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        batches = list(self.inner)
        half = len(batches) // 2
        yield from batches[:half] + batches[: len(batches) - half - 1] + batches[-1:]


class TenShiftedCopies(NoAugment):
    """Ten pre-shifted copies of the set, one drawn per image: at most ten crop offsets."""

    SHIFTS = [(i, 3 * i % 9) for i in range(9)] + [(4, 4)]

    def __init__(self, dataset, batch_size, device, seed):
        super().__init__(dataset, batch_size, device, seed)  # labels, batch size, generator
        images = torch.from_numpy(np.asarray(dataset.data))  # N x 32 x 32 x 3 uint8
        padded = torch.nn.functional.pad(images.permute(0, 3, 1, 2), (4, 4, 4, 4))
        self.copies = torch.stack(
            [padded[:, :, dy : dy + 32, dx : dx + 32] for dy, dx in self.SHIFTS]
        )

    def __iter__(self):
        perm = torch.randperm(len(self.y), generator=self.gen)
        pick = torch.randint(0, len(self.SHIFTS), (len(self.y),), generator=self.gen)
        flip = torch.rand(len(self.y), generator=self.gen) < 0.5
        for i in range(0, len(self.y), self.bs):
            idx = perm[i : i + self.bs]
            x = self.copies[pick[idx], idx]
            x = torch.where(flip[idx, None, None, None], x.flip(3), x)
            yield normalize(x.permute(0, 2, 3, 1).contiguous()), self.y[idx]


def test_two_epochs_of_the_naive_pipeline_pass_the_ledger(run):
    assert _judged(run, TorchvisionPipeline) == []


def test_an_augmented_epoch_replayed_is_named(run):
    problems = _judged(run, ReplayedEpoch)
    assert any("same crop and flip as in epoch 1" in p for p in problems), problems


def test_an_image_twice_across_the_chunks_of_one_epoch_is_named(run):
    problems = _judged(run, HalfAnEpochTwice, epochs=1)
    assert any("came twice in epoch 1: shown in an earlier chunk" in p for p in problems), problems


def test_a_few_pre_shifted_copies_are_not_random_crops(run):
    problems = _judged(run, TenShiftedCopies, epochs=1)
    assert any("distinct crop offsets (random crops give" in p for p in problems), problems
