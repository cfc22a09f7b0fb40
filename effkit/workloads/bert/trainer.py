"""The BERT trainer (one recipe's model, optimizer, schedule and batches) and its train step.

:class:`BertTrainer` implements effkit's ``Trainer`` protocol; :func:`default_train_step` is the reference
step (autocast forward, scaled backward, unscale, clip, step). Lesson 3 passes its own ``train_step``.
With fp16, a step the scaler skipped (seen by the scale shrinking) does not advance the LR schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from effkit.amp import AmpPolicy
from effkit.workloads.bert import batching
from effkit.workloads.common import Work

MAX_GRAD_NORM = 1.0
TrainStep = Callable[..., float]


def default_train_step(
    model,
    batch: dict[str, torch.Tensor],
    optimizer,
    policy: AmpPolicy,
    scaler: torch.amp.GradScaler,
    max_grad_norm: float,
) -> float:
    """Reference step: autocast forward, scaled backward, unscale, clip, step, update, zero."""
    with policy.autocast():  # forward and loss only; backward runs in the forward's dtypes
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # clip the true gradients, not the loss-scaled ones
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)  # skips the update when fp16 gradients overflowed
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


class BertTrainer:
    """One recipe's model, optimizer, schedule and input pipeline (see effkit Trainer protocol)."""

    def __init__(
        self,
        *,
        recipe: str,
        model,
        device: torch.device,
        policy: AmpPolicy,
        optimizer,
        scheduler,
        batches: Iterator[dict],
        steps_per_epoch: int,
        total_steps: int,
        target: float,
        stop_at_target: bool,
        eval_every: int,
        eval_sets: dict[str, batching.EncodedCorpus],
        eval_split: str,
        train_step: TrainStep,
        settings: dict,
    ):
        self.recipe, self.model, self.device, self.policy = recipe, model, device, policy
        self.optimizer, self.scheduler, self._batches = optimizer, scheduler, batches
        self.scaler = policy.make_scaler()
        self.steps_per_epoch, self.total_steps = steps_per_epoch, total_steps
        self.target, self.stop_at_target, self.eval_every = target, stop_at_target, eval_every
        self.eval_sets, self.eval_split, self.train_step = eval_sets, eval_split, train_step
        self.settings = settings
        self.flops_per_sample: float | None = None
        self.train_model = None  # a torch.compile'd view of ``model`` for training, if any
        self.steps_done, self.last_loss = 0, float("nan")
        self._non_blocking = device.type == "cuda"

    def skip_batches(self, n: int) -> None:
        """Advance the data stream ``n`` batches without training (a replay starts mid-epoch)."""
        for _ in range(n):
            next(self._batches)

    def train_steps(self, n: int) -> Work:
        self.model.train()
        samples = tokens = 0
        for _ in range(n):
            batch = next(self._batches)
            samples += len(batch["labels"])
            tokens += int(batch["attention_mask"].sum())  # on the host: no device sync
            batch = {
                k: v.to(self.device, non_blocking=self._non_blocking) for k, v in batch.items()
            }
            scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
            # `is None`, never truthiness: a torch.compile'd module has no bool() (it calls len()).
            model = self.model if self.train_model is None else self.train_model
            self.last_loss = self.train_step(
                model, batch, self.optimizer, self.policy, self.scaler, MAX_GRAD_NORM
            )
            # A shrunken loss scale means the scaler skipped this optimizer step (inf/NaN grads):
            # the LR schedule must not advance for a step that did not happen.
            if scale is None or self.scaler.get_scale() >= scale:
                self.scheduler.step()
            self.steps_done += 1
        return Work(samples, tokens)

    def pause(self) -> None:
        """Stop the input pipeline's background workers (if any) while another run is timed."""
        getattr(self._batches, "pause", lambda: None)()

    def resume(self) -> None:
        """Restart them and wait for the first batch; call outside any timing."""
        getattr(self._batches, "resume", lambda: None)()

    @torch.inference_mode()
    def evaluate(self, split: str | None = None) -> float:
        """Accuracy on ``split`` (default: the profile's eval split), in [0, 1]."""
        corpus = self.eval_sets[split or self.eval_split]
        self.model.eval()
        correct = 0
        # Both recipes evaluate through the same cached, length-sorted pipeline: evaluation is
        # measurement, not part of the recipe, and padding does not change masked logits.
        for indices in batching.sorted_batches(corpus.lengths, 256):
            batch = batching.pad_batch(corpus, indices)
            with self.policy.autocast():
                logits = self.model(
                    input_ids=batch["input_ids"].to(self.device),
                    attention_mask=batch["attention_mask"].to(self.device),
                ).logits
            correct += int((logits.argmax(-1).cpu() == batch["labels"]).sum())
        self.model.train()
        return correct / len(corpus)

    def describe(self) -> dict:
        return dict(
            self.settings,
            recipe=self.recipe,
            precision=self.policy.mode,
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
            eval_every=self.eval_every,
            flops_per_sample=self.flops_per_sample,
        )
