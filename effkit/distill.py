"""Knowledge distillation (Hinton, Vinyals & Dean, 2015).

``loss = alpha * T**2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(student, labels)``:
`kd_loss` computes it, `teacher_logits` runs the teacher in eval mode without autograd, and
`student_from_teacher` starts a student from every other teacher layer (same width). Teacher and student
must share the label space.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Distiller", "kd_loss", "layer_map", "student_from_teacher", "teacher_logits"]


def _check_hyperparameters(temperature: float, alpha: float) -> None:
    if not (isinstance(temperature, int | float) and math.isfinite(temperature)) or not (
        temperature > 0
    ):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0):
        raise ValueError(
            f"alpha must be in [0, 1] (weight of the distillation term), got {alpha!r}"
        )


def kd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 4.0,
    alpha: float = 0.5,
) -> torch.Tensor:
    """Hinton distillation loss: ``alpha*T^2*KL(teacher_T || student_T) + (1-alpha)*CE``.

    Logits have shape ``(N, C)`` or ``(..., C)`` (e.g. ``(batch, seq, vocab)``; every position
    then counts as one sample: drop padded positions before calling). ``labels`` holds class
    indices with shape ``logits.shape[:-1]``. Both terms are means over samples (KL with
    "batchmean", the mathematically correct KL per sample).
    """
    _check_hyperparameters(temperature, alpha)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student and teacher logits must have the same shape, got "
            f"{tuple(student_logits.shape)} and {tuple(teacher_logits.shape)} "
            f"(same number of classes and same batch?)"
        )
    if student_logits.dim() < 2:
        raise ValueError(
            f"logits must have shape (N, C) or (..., C), got {tuple(student_logits.shape)}"
        )
    if labels.shape != student_logits.shape[:-1]:
        raise ValueError(
            f"labels must have shape {tuple(student_logits.shape[:-1])} (class indices, one "
            f"per row of logits), got {tuple(labels.shape)}"
        )
    num_classes = student_logits.shape[-1]
    student = student_logits.reshape(-1, num_classes)
    # detach(): even if the caller forgot no_grad, no gradient may flow into the teacher.
    teacher = teacher_logits.detach().reshape(-1, num_classes).to(student.dtype)
    # Compute the KL in log space (log_target=True): softmax then log would underflow to
    # -inf for very confident teachers.
    kl = F.kl_div(
        F.log_softmax(student / temperature, dim=-1),
        F.log_softmax(teacher / temperature, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    ce = F.cross_entropy(student, labels.reshape(-1))
    return alpha * temperature**2 * kl + (1.0 - alpha) * ce


def _call(model: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, dict):  # e.g. a Hugging Face batch: input_ids, attention_mask
        return model(**inputs)
    if isinstance(inputs, tuple | list):
        return model(*inputs)
    return model(inputs)


def teacher_logits(teacher: nn.Module, inputs: Any) -> torch.Tensor:
    """Run the teacher in eval mode without autograd and return detached logits.

    ``inputs`` is passed as ``teacher(**inputs)`` for a dict, ``teacher(*inputs)`` for a
    tuple/list, else ``teacher(inputs)``. Outputs with a ``.logits`` attribute (Hugging Face)
    are unwrapped. The teacher is put in eval mode and *left* in eval mode: a teacher is never
    trained, and restoring train mode would re-enable dropout for the next direct call.
    """
    teacher.eval()
    # no_grad rather than inference_mode: inference tensors cannot be saved for backward,
    # and kd_loss's backward needs the teacher's probabilities.
    with torch.no_grad():
        output = _call(teacher, inputs)
    logits = getattr(output, "logits", output)
    if not isinstance(logits, torch.Tensor):
        raise TypeError(
            f"teacher returned {type(output).__name__}; expected a tensor of logits or an "
            f"object with a .logits tensor"
        )
    return logits.detach()


class Distiller:
    """Bundle a frozen teacher with the distillation hyper-parameters.

    Example::

        distiller = Distiller(teacher, temperature=4.0, alpha=0.7)
        for x, y in loader:
            loss = distiller.loss(student(x), y, x)
            loss.backward()
            ...
    """

    def __init__(self, teacher: nn.Module, temperature: float = 4.0, alpha: float = 0.5):
        _check_hyperparameters(temperature, alpha)
        self.teacher = teacher
        self.temperature = temperature
        self.alpha = alpha
        # Freezing parameters also saves memory if someone runs the teacher outside no_grad.
        teacher.requires_grad_(False)
        teacher.eval()

    def loss(
        self, student_logits: torch.Tensor, labels: torch.Tensor, teacher_inputs: Any
    ) -> torch.Tensor:
        """Distillation loss of ``student_logits`` against the teacher run on the inputs."""
        return kd_loss(
            student_logits,
            teacher_logits(self.teacher, teacher_inputs),
            labels,
            temperature=self.temperature,
            alpha=self.alpha,
        )


def layer_map(teacher_layers: int, student_layers: int) -> list[int]:
    """Which teacher layers a shallower student keeps: evenly spaced from the first.

    ``layer_map(6, 3) == [0, 2, 4]`` (every other layer, as DistilBERT took from BERT-base);
    ``layer_map(4, 1) == [0]``.
    """
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"a student needs 1 to {teacher_layers} layers, got {student_layers}")
    return [round(i * teacher_layers / student_layers) for i in range(student_layers)]


def student_from_teacher(teacher: nn.Module, student_layers: int) -> nn.Module:
    """A Hugging Face BERT-style teacher cut to ``student_layers`` encoder layers (DistilBERT's layer choice).

    Deep-copies the teacher (embeddings, pooler and classifier head included) and keeps the
    layers ``layer_map`` picks from ``model.<base>.encoder.layer``; the config's
    ``num_hidden_layers`` is updated so the student saves and reloads as what it is.
    """
    student = copy.deepcopy(teacher)
    base = getattr(student, getattr(student, "base_model_prefix", ""), student)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(
            f"{type(teacher).__name__} has no encoder.layer list (a BERT-style model is needed)"
        )
    keep = layer_map(len(layers), student_layers)
    base.encoder.layer = nn.ModuleList(layers[i] for i in keep)
    for new_index, layer in enumerate(
        base.encoder.layer
    ):  # attention caches index layers by position
        attention = getattr(getattr(layer, "attention", None), "self", None)
        if attention is not None and hasattr(attention, "layer_idx"):
            attention.layer_idx = new_index
    student.config.num_hidden_layers = student_layers
    student.requires_grad_(True).train()
    return student
