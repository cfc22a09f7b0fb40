"""Knowledge distillation loss against a hand computation, and teacher isolation."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from effkit.distill import Distiller, kd_loss, teacher_logits

STUDENT = [[1.0, 2.0, 0.5], [0.2, -1.0, 3.0]]
TEACHER = [[2.0, 1.0, 0.0], [0.0, 0.5, 2.5]]
LABELS = [1, 2]


def softmax(row, temperature=1.0):
    exps = [math.exp(v / temperature) for v in row]
    return [e / sum(exps) for e in exps]


def hand_kl(temperature):
    """KL(p_teacher || p_student) at temperature T, averaged over rows (batchmean)."""
    total = 0.0
    for s_row, t_row in zip(STUDENT, TEACHER, strict=True):
        p_s, p_t = softmax(s_row, temperature), softmax(t_row, temperature)
        total += sum(t * math.log(t / s) for t, s in zip(p_t, p_s, strict=True))
    return total / len(STUDENT)


def hand_ce():
    return sum(-math.log(softmax(row)[y]) for row, y in zip(STUDENT, LABELS, strict=True)) / 2


def tensors():
    return (
        torch.tensor(STUDENT, dtype=torch.float64, requires_grad=True),
        torch.tensor(TEACHER, dtype=torch.float64),
        torch.tensor(LABELS),
    )


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_matches_hand_computation(temperature, alpha):
    student, teacher, labels = tensors()
    got = kd_loss(student, teacher, labels, temperature=temperature, alpha=alpha)
    expected = alpha * temperature**2 * hand_kl(temperature) + (1 - alpha) * hand_ce()
    assert got.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_alpha_extremes_are_pure_terms():
    student, teacher, labels = tensors()
    assert kd_loss(student, teacher, labels, 3.0, alpha=1.0).item() == pytest.approx(
        9.0 * hand_kl(3.0), rel=1e-12
    )
    assert kd_loss(student, teacher, labels, 3.0, alpha=0.0).item() == pytest.approx(
        hand_ce(), rel=1e-12
    )
    # A worked number, so a mistake shared by the code and the helpers above still shows.
    # Row 1 at T=1: p_t = softmax(2, 1, 0) = (.665, .245, .090), p_s = softmax(1, 2, .5) =
    # (.231, .629, .140); KL = .665 ln(.665/.231) + .245 ln(.245/.629) + .090 ln(.090/.140)
    # = .432. Row 2 likewise gives .122, so batchmean = (.432 + .122) / 2 = .277.
    student, teacher, labels = tensors()
    assert kd_loss(student, teacher, labels, 1.0, alpha=1.0).item() == pytest.approx(
        0.2771, abs=5e-4
    )


def test_soft_gradient_has_the_t_squared_compensation():
    # d/ds [T^2 KL(p_t || softmax(s/T))] = T (softmax(s/T) - p_t) / N: grows with T, it does
    # not vanish as 1/T the way it would without the T^2 factor.
    temperature = 5.0
    student, teacher, labels = tensors()
    kd_loss(student, teacher, labels, temperature=temperature, alpha=1.0).backward()
    expected = [
        [
            temperature * (s - t) / len(STUDENT)
            for s, t in zip(softmax(s_row, temperature), softmax(t_row, temperature), strict=True)
        ]
        for s_row, t_row in zip(STUDENT, TEACHER, strict=True)
    ]
    torch.testing.assert_close(student.grad, torch.tensor(expected, dtype=torch.float64))


def test_sequence_logits_count_every_position():
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 5, 7), torch.randn(2, 5, 7)
    labels = torch.randint(7, (2, 5))
    flat = kd_loss(student.reshape(10, 7), teacher.reshape(10, 7), labels.reshape(10))
    torch.testing.assert_close(kd_loss(student, teacher, labels), flat)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be a finite number > 0"),
        ({"temperature": -2.0}, "temperature must be a finite number > 0"),
        ({"temperature": float("nan")}, "temperature must be a finite number > 0"),
        ({"alpha": -0.1}, r"alpha must be in \[0, 1\]"),
        ({"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
    ],
)
def test_invalid_hyperparameters(kwargs, message):
    student, teacher, labels = tensors()
    with pytest.raises(ValueError, match=message):
        kd_loss(student, teacher, labels, **kwargs)
    with pytest.raises(ValueError, match=message):
        Distiller(nn.Linear(2, 2), **kwargs)


def test_shape_mismatches():
    student, teacher, labels = tensors()
    with pytest.raises(ValueError, match=r"same shape, got \(2, 3\) and \(2, 4\)"):
        kd_loss(student, torch.zeros(2, 4), labels)
    with pytest.raises(ValueError, match=r"labels must have shape \(2,\).*got \(2, 1\)"):
        kd_loss(student, teacher, labels[:, None])
    with pytest.raises(ValueError, match="logits must have shape"):
        kd_loss(student[0], teacher[0], labels[0])


def make_teacher():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))


def test_teacher_gets_no_gradient_and_stays_in_eval():
    teacher, student = make_teacher().train(), nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(3, (8,))

    first = teacher_logits(teacher, x)
    assert not teacher.training and not first.requires_grad
    torch.testing.assert_close(teacher_logits(teacher, x), first, rtol=0, atol=0)  # no dropout

    kd_loss(student(x), first, y).backward()
    assert student.weight.grad is not None
    assert all(p.grad is None for p in teacher.parameters())

    # Even teacher logits computed *with* autograd must not leak gradient into the teacher.
    kd_loss(student(x), teacher(x), y).backward()
    assert all(p.grad is None for p in teacher.parameters())


def test_distiller_freezes_teacher_and_unwraps_hf_style_outputs():
    class HFStyleTeacher(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = make_teacher()

        def forward(self, input_ids, attention_mask):
            return SimpleNamespace(logits=self.body(input_ids * attention_mask))

    teacher = HFStyleTeacher().train()
    distiller = Distiller(teacher, temperature=2.0, alpha=0.7)
    assert not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())

    student = nn.Linear(4, 3)
    batch = {"input_ids": torch.randn(5, 4), "attention_mask": torch.ones(5, 4)}
    labels = torch.randint(3, (5,))
    teacher.train()  # e.g. a parent module's .train() flipped it: teacher_logits fixes it
    loss = distiller.loss(student(batch["input_ids"]), labels, batch)
    expected = kd_loss(
        student(batch["input_ids"]), teacher.body(batch["input_ids"]), labels, 2.0, 0.7
    )
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert student.weight.grad is not None
    assert all(p.grad is None for p in teacher.parameters())


def test_teacher_returning_a_tuple_is_rejected():
    class TupleTeacher(nn.Module):
        def forward(self, x):
            return (x, x)

    with pytest.raises(TypeError, match="expected a tensor of logits"):
        teacher_logits(TupleTeacher(), torch.zeros(1, 2))


def test_layer_map_keeps_every_other_layer():
    from effkit.distill import layer_map

    assert layer_map(6, 3) == [0, 2, 4] and layer_map(12, 6) == [0, 2, 4, 6, 8, 10]
    assert layer_map(4, 1) == [0] and layer_map(4, 4) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="a student needs 1 to 4 layers"):
        layer_map(4, 5)


def test_student_from_teacher_copies_every_other_layer_and_leaves_the_teacher_alone(
    tiny_bert_config,
):
    from transformers import BertForSequenceClassification

    from effkit.distill import student_from_teacher

    torch.manual_seed(0)
    config = tiny_bert_config(layers=4)
    teacher = BertForSequenceClassification(config).eval().requires_grad_(False)
    student = student_from_teacher(teacher, 2)
    assert len(student.bert.encoder.layer) == 2 and student.config.num_hidden_layers == 2
    assert teacher.config.num_hidden_layers == 4 and len(teacher.bert.encoder.layer) == 4
    for kept, source in zip(
        student.bert.encoder.layer, (teacher.bert.encoder.layer[i] for i in (0, 2)), strict=True
    ):
        for a, b in zip(kept.parameters(), source.parameters(), strict=True):
            assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()  # copied, not shared
    ids = torch.randint(0, 50, (3, 8))
    student.train()
    student(input_ids=ids, labels=torch.tensor([0, 1, 0])).loss.backward()
    assert all(p.grad is not None for p in student.parameters() if p.requires_grad)
    assert all(p.grad is None and not p.requires_grad for p in teacher.parameters())
    with pytest.raises(TypeError, match="encoder.layer"):
        student_from_teacher(nn.Linear(2, 2), 1)
