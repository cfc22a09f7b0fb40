"""Lesson 6's training task: the run the learner makes crash-safe, shared by worker and parent.

A resumed run equals the reference bit for bit only if it restores everything; that needs one
thread and deterministic kernels on both sides.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from effkit.schedules import warmup_cosine

VOCAB, DIM, HIDDEN, CLASSES, LENGTH = 20_000, 64, 64, 4, 12
N_TRAIN, N_VAL, BATCH = 192, 512, 16
MAX_EPOCHS, PATIENCE = 30, 2
LR, LABEL_NOISE, SIGNAL_TOKENS = 0.05, 0.3, 3


def _data(gen: torch.Generator, n: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    tokens = torch.randint(CLASSES * 50, VOCAB, (n, LENGTH), generator=gen)
    # A few tokens name the class (tokens 50*c .. 50*c+49); the rest is noise to memorise.
    signal = labels[:, None] * 50 + torch.randint(0, 50, (n, SIGNAL_TOKENS), generator=gen)
    tokens[:, :SIGNAL_TOKENS] = signal
    flip = torch.rand(n, generator=gen) < noise
    labels = torch.where(flip, torch.randint(0, CLASSES, (n,), generator=gen), labels)
    return tokens, labels


# The classifier's fp32 weights (the embedding is nearly all of it): a checkpoint holds at least
# these, in whatever format, so the save kill waits for a file of a good part of this size.
WEIGHT_BYTES = 4 * (VOCAB * DIM + DIM * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES)
# the validation set's generator: its own, so the training data need not exist in the worker
VAL_SEED = 7_919


class TrainData:
    """The training set of ``data_seed`` and its batch order: on the grader's side of the channel."""

    def __init__(self, data_seed: int) -> None:
        self.data_seed = data_seed
        self._x, self._y = _data(torch.Generator().manual_seed(data_seed), N_TRAIN, LABEL_NOISE)

    def batch(self, epoch: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        order = torch.randperm(
            N_TRAIN, generator=torch.Generator().manual_seed(self.data_seed * 1000 + epoch)
        )
        idx = order[index * BATCH : (index + 1) * BATCH]
        return self._x[idx], self._y[idx]


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, DIM, mode="mean")
        self.dropout = nn.Dropout(0.2)
        self.hidden = nn.Linear(DIM, HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(self.dropout(self.embed(tokens)))))


class Task:
    """The run to make crash-safe. Everything is rebuilt identically from ``seed`` on restart.

    ``source.batch(epoch, index) -> (x, y)``: where the training batches come from. The grader's
    worker gets them from the parent, which alone knows ``data_seed``: a restarted run can get only
    the batches from where it resumes, so it cannot re-train the epochs it lost in private (a shadow
    run). Without ``source`` the batches are made here from ``data_seed`` (default ``seed``)."""

    steps_per_epoch = N_TRAIN // BATCH
    max_epochs = MAX_EPOCHS
    patience = PATIENCE

    def __init__(
        self,
        seed: int,
        hook=None,
        max_epochs: int = MAX_EPOCHS,
        data_seed: int | None = None,
        source=None,
    ) -> None:
        self.seed = seed
        self.max_epochs = max_epochs  # the LR schedule keeps its MAX_EPOCHS length
        # an object, not a bound method: the grader's watch reads functions on the instance as planted
        self._source = source or TrainData(seed if data_seed is None else data_seed)
        self._val_x, self._val_y = _data(torch.Generator().manual_seed(seed + VAL_SEED), N_VAL, 0.0)
        torch.manual_seed(seed)  # the model's initial weights, then dropout's stream
        self.model = Classifier()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=0.9)
        self.scheduler = warmup_cosine(
            self.optimizer, MAX_EPOCHS * self.steps_per_epoch, self.steps_per_epoch
        )
        self._hook = hook
        self._at = (0, 0)

    def batches(self, epoch: int, start: int = 0):
        """Batches ``start, start + 1, ...`` of ``epoch``; the order depends on (data seed, epoch) only."""
        for index in range(start, self.steps_per_epoch):
            self._at = (epoch, index)
            yield self._source.batch(epoch, index)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One optimizer step (forward with dropout, backward, SGD, LR schedule)."""
        if self._hook is not None:
            self._hook(*self._at)
        self.model.train()
        loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach())

    def evaluate(self) -> float:
        """Validation loss (eval mode: no dropout, no RNG drawn)."""
        self.model.eval()
        with torch.no_grad():
            loss = float(F.cross_entropy(self.model(self._val_x), self._val_y))
        self.model.train()
        return loss


@contextlib.contextmanager
def single_thread():
    """One thread and deterministic kernels, as in the sandboxed worker; restored afterwards."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def reference_loop(task: Task) -> dict:
    """The canonical uninterrupted loop: evaluate every epoch, stop after ``patience`` epochs
    without a strictly lower validation loss. Returns best and last weights and the history."""
    best, best_loss, bad, losses = None, float("inf"), 0, []
    for epoch in range(task.max_epochs):
        for x, y in task.batches(epoch):
            task.train_step(x, y)
        loss = task.evaluate()
        losses.append(loss)
        if loss < best_loss:
            best, best_loss, bad = weights(task.model), loss, 0
        else:
            bad += 1
            if bad >= task.patience:
                break
    return {
        "task": task,
        "best": best,
        "last": weights(task.model),
        "losses": losses,
        "best_epoch": losses.index(best_loss),
        "epochs": len(losses),
        "stopped": bad >= task.patience,
    }


def reference_run(seed: int, max_epochs: int = MAX_EPOCHS, data_seed: int | None = None) -> dict:
    """`reference_loop` on a fresh task, one thread, deterministic kernels (as in the worker)."""
    with single_thread():
        out = reference_loop(Task(seed, max_epochs=max_epochs, data_seed=data_seed))
    del out["task"]
    return out
