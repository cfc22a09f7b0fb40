"""Hidden-state distillation: the student also matches the teacher's intermediate representations.

Logit distillation (`effkit.distill.kd_loss`) hands the student one distribution per example; on a
two-class task that is a single number. A transformer's hidden states say far more: one vector per
token. DistilBERT (Sanh et al. 2019, arXiv:1910.01108) adds a *cosine embedding loss* between the
student's and the teacher's last hidden states, ``1 - cos(h_s, h_t)`` per token, so the student's
vectors point the way the teacher's do (their length is left free).
`hidden_cosine_loss` is that loss, averaged over the real (not padded) tokens. When the student is
narrower than the teacher, its states go through a learned linear map first (TinyBERT's ``W_h``,
Jiao et al. 2020, arXiv:1909.10351): `width_projection` builds it, and it must be trained with the
student. `teacher_outputs` gets the teacher's logits and one layer's hidden states from a single
eval-mode forward, so both can be cached in one pass.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from effkit.distill import _call

__all__ = ["hidden_cosine_loss", "teacher_outputs", "width_projection"]


def width_projection(student_width: int, teacher_width: int) -> nn.Linear | None:
    """The map from the student's hidden width to the teacher's, or None when they match.

    With equal widths the states are compared as they are: a projection would only add parameters
    that can absorb the mismatch instead of the student. Otherwise a bias-free ``nn.Linear``, as
    TinyBERT's ``W_h``; give its parameters to the student's optimiser, and drop it after
    training: inference never uses it.
    """
    if student_width < 1 or teacher_width < 1:
        raise ValueError(f"widths must be >= 1, got {student_width} and {teacher_width}")
    if student_width == teacher_width:
        return None
    return nn.Linear(student_width, teacher_width, bias=False)


def hidden_cosine_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    projection: nn.Module | None = None,
) -> torch.Tensor:
    """DistilBERT's cosine loss: the mean over real tokens of ``1 - cos(student, teacher)``.

    States have shape ``(..., width)``, e.g. ``(batch, seq, width)``; ``attention_mask`` (1 for a
    real token, 0 for padding) has their shape without the width. Padding is left out: its states
    carry no meaning, and averaging them in would dilute the loss by the amount of padding. The
    loss is 0 when the states point the same way, 1 when orthogonal, 2 when opposite; only the
    student (and the projection) receive gradient.
    """
    if projection is not None:
        student_hidden = projection(student_hidden)
    if student_hidden.shape[:-1] != teacher_hidden.shape[:-1]:
        raise ValueError(
            f"student and teacher states must cover the same tokens, got shapes "
            f"{tuple(student_hidden.shape)} and {tuple(teacher_hidden.shape)}"
        )
    if student_hidden.shape[-1] != teacher_hidden.shape[-1]:
        raise ValueError(
            f"widths differ ({student_hidden.shape[-1]} vs {teacher_hidden.shape[-1]}): pass "
            f"projection=width_projection(student_width, teacher_width) and train it too"
        )
    # detach(): a cached or freshly computed teacher state is a target, never a trained value.
    teacher = teacher_hidden.detach().to(student_hidden.dtype)
    distance = 1.0 - F.cosine_similarity(student_hidden, teacher, dim=-1)
    if attention_mask is None:
        return distance.mean()
    if attention_mask.shape != distance.shape:
        raise ValueError(
            f"attention_mask must have shape {tuple(distance.shape)} (the states' without the "
            f"width), got {tuple(attention_mask.shape)}"
        )
    weights = attention_mask.to(distance.dtype)
    real = weights.sum()
    if real <= 0:
        raise ValueError("attention_mask marks no real token: nothing to distil")
    return (distance * weights).sum() / real


def teacher_outputs(
    teacher: nn.Module, inputs: dict[str, torch.Tensor] | Any, layer: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, hidden states of ``layer``) from one eval-mode, no-grad forward of a Hugging Face model.

    ``layer`` indexes ``hidden_states`` (0: the embeddings, -1: the last layer's output, which
    DistilBERT distils). As in `effkit.distill.teacher_logits`, the teacher is left in eval mode.
    """
    teacher.eval()
    with torch.no_grad():
        if isinstance(inputs, dict):
            output = _call(teacher, {**inputs, "output_hidden_states": True})
        else:
            output = teacher(inputs, output_hidden_states=True)
    logits, hidden = getattr(output, "logits", None), getattr(output, "hidden_states", None)
    if not isinstance(logits, torch.Tensor) or not hidden:
        raise TypeError(
            f"teacher returned {type(output).__name__}; expected an output with .logits and "
            f".hidden_states (a Hugging Face model)"
        )
    return logits.detach(), hidden[layer].detach()
