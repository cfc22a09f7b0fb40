"""Audited input pipelines: prove every epoch yielded every sample, once, with its label.

Wraps baseline and learner pipelines alike so "faster" can only mean the same work in less time.
The label tally checks the multiset per epoch, not image-label pairing (the tests cover that).
"""

from __future__ import annotations

import numpy as np
import torch

MAX_PROBLEMS = 8


class EpochAudit:
    def __init__(self, n_classes: int = 10):
        self.n_classes = n_classes
        self.epochs: list[dict] = []
        self.problems: list[str] = []
        self.expected_counts: list[int] = []
        self.n_samples = 0
        self.batches_per_epoch = 0
        self.nonfinite_at: str | None = None
        # Where the runtime asks for it (lesson 2), every batch of the current timed chunk, as the
        # trainer received it: committed with the chunk, so that the parent judges what the *timed*
        # run trained on (grader.assignments.lesson2.timed_checks) and replays it exactly.
        self.keep = False
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS and text not in self.problems:
            self.problems.append(text)

    def wrap(self, inner_cls):
        audit = self

        class AuditedPipeline:
            def __init__(self, dataset, batch_size, device, seed):
                self.inner = inner_cls(dataset, batch_size, device, seed)
                self.device = torch.device(device)
                self.name = getattr(inner_cls, "__name__", "pipeline")
                audit.n_samples = len(dataset.targets)
                counts = np.bincount(np.asarray(dataset.targets), minlength=audit.n_classes)
                audit.expected_counts = counts.tolist()
                audit.batches_per_epoch = len(self.inner)
                self.live = None

            def __len__(self) -> int:
                return len(self.inner)

            def __iter__(self):
                self.live = audit._epoch(self.inner, self.device)
                return self.live

        AuditedPipeline.__name__ = f"Audited{getattr(inner_cls, '__name__', 'Pipeline')}"
        return AuditedPipeline

    def _epoch(self, inner, device: torch.device):
        k = len(self.epochs) + 1
        record = {"epoch": k, "batches": 0, "samples": 0, "complete": False}
        self.epochs.append(record)
        bins = self.n_classes + 1  # the extra bin collects out-of-range labels
        counts = torch.zeros(bins, dtype=torch.int64, device=device)
        for batch in inner:
            b = record["batches"]
            if not self._check(batch, device, k, b):
                yield batch  # let the trainer fail in its own words; the problem is recorded
                record["batches"] += 1
                continue
            x, y = batch
            record["batches"] += 1
            record["samples"] += int(y.shape[0])
            if self.keep:  # a copy: a pipeline may reuse its output buffers (honest and fast)
                self.kept.append((x.detach().clone(), y.detach().clone()))
            counts.scatter_add_(0, y.reshape(-1).clamp(0, bins - 1), torch.ones_like(y.reshape(-1)))
            yield x, y
        record["complete"] = True
        record["label_counts"] = counts.tolist()

    def _check(self, batch, device: torch.device, epoch: int, b: int) -> bool:
        where = f"epoch {epoch}, batch {b}"
        if not (isinstance(batch, tuple | list) and len(batch) == 2):
            self.problem(f"{where}: expected a pair (x, y), got {type(batch).__name__}")
            return False
        x, y = batch
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            self.problem(f"{where}: expected tensors, got {type(x).__name__}, {type(y).__name__}")
            return False
        ok = True
        if x.dtype != torch.float32:
            self.problem(f"{where}: expected x.dtype float32, got {x.dtype}")
            ok = False
        if y.dtype != torch.int64:
            self.problem(f"{where}: expected y.dtype int64, got {y.dtype}")
            ok = False
        if x.dim() != 4 or tuple(x.shape[1:]) != (3, 32, 32) or y.shape != (x.shape[0],):
            self.problem(
                f"{where}: expected x B x 3 x 32 x 32 and y B, got {tuple(x.shape)} and {tuple(y.shape)}"
            )
            ok = False
        if x.device.type != device.type or y.device.type != device.type:
            self.problem(
                f"{where}: expected tensors on {device.type}, got {x.device} and {y.device}"
            )
            ok = False
        if ok and b == 0 and not bool(torch.isfinite(x).all()):
            self.nonfinite_at = self.nonfinite_at or where
            self.problem(f"{where}: x contains NaN or inf")
        return ok

    def take_kept(self) -> dict | None:
        """The current chunk's batches as plain CPU tensors (x and y concatenated, the batch
        sizes), and a fresh start for the next chunk; ``None`` where nothing is kept."""
        kept, self.kept = self.kept, []
        if not self.keep:
            return None
        if not kept:
            return {
                "x": torch.zeros(0, 3, 32, 32),
                "y": torch.zeros(0, dtype=torch.int64),
                "sizes": torch.zeros(0, dtype=torch.int64),
            }
        return {
            "x": torch.cat([x.to("cpu", torch.float32) for x, _ in kept]),
            "y": torch.cat([y.to("cpu", torch.int64) for _, y in kept]),
            "sizes": torch.tensor([int(y.shape[0]) for _, y in kept], dtype=torch.int64),
        }

    def finish(self, pipeline, expected_epochs: int) -> None:
        """Drain the last epoch (the trainer stops right after its last batch) and check all."""
        live = getattr(pipeline, "live", None)
        if live is not None:
            extra = 0
            for _ in live:
                extra += 1
                if extra > 2 * max(1, self.batches_per_epoch):
                    break
            if extra:
                self.problem(
                    f"epoch {len(self.epochs)} yielded {extra} more batch(es) than len() says"
                )
        if len(self.epochs) != expected_epochs:
            self.problem(
                f"the pipeline was iterated for {len(self.epochs)} epoch(s); the grader's "
                f"schedule needs exactly {expected_epochs} (was training skipped?)"
            )
        for rec in self.epochs:
            k, n = rec["epoch"], rec["samples"]
            if not rec["complete"]:
                self.problem(f"epoch {k} was never finished ({n} samples)")
                continue
            if n != self.n_samples or rec["batches"] != self.batches_per_epoch:
                self.problem(
                    f"epoch {k} yielded {n} samples in {rec['batches']} batches; expected every one "
                    f"of the {self.n_samples} samples once, in len() = {self.batches_per_epoch} batches"
                )
            elif rec["label_counts"][: self.n_classes] != self.expected_counts:
                self.problem(
                    f"epoch {k}: label counts {rec['label_counts'][: self.n_classes]} differ from the "
                    f"dataset's {self.expected_counts} (labels lost, duplicated or changed)"
                )

    def nan_hint(self) -> str:
        if self.nonfinite_at:
            return f"Your pipeline produced NaN/inf inputs ({self.nonfinite_at}): check the normalisation."
        return "Check the normalisation (mean/std, /255) of your batches."

    def report(self) -> dict:
        return {
            "epochs": len(self.epochs),
            "samples_per_epoch": [e["samples"] for e in self.epochs],
            "expected_samples": self.n_samples,
            "problems": list(self.problems),
        }
