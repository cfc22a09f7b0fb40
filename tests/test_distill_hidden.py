"""Hidden-state distillation (DistilBERT's cosine loss) against hand computations and its gradient."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from effkit.distill_hidden import hidden_cosine_loss, teacher_outputs, width_projection


def states(seed=0, shape=(2, 3, 4)):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def test_zero_for_identical_or_rescaled_states_and_no_gradient_there():
    teacher = states(0)
    student = teacher.clone().requires_grad_(True)
    loss = hidden_cosine_loss(student, teacher)
    assert loss.item() == pytest.approx(0.0, abs=1e-12)
    loss.backward()
    torch.testing.assert_close(student.grad, torch.zeros_like(student), atol=1e-12, rtol=0)
    # Only the direction counts: a longer vector pointing the same way costs nothing.
    assert hidden_cosine_loss(3.0 * teacher, teacher).item() == pytest.approx(0.0, abs=1e-12)


def test_orthogonal_is_one_and_opposite_is_two():
    teacher = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert hidden_cosine_loss(torch.tensor([[0.0, 5.0], [3.0, 0.0]]), teacher).item() == 1.0
    assert hidden_cosine_loss(-teacher, teacher).item() == pytest.approx(2.0)


def test_matches_hand_computation_and_its_gradient():
    student, teacher = states(1).requires_grad_(True), states(2)
    s, t = student.detach(), teacher
    cos = (s * t).sum(-1) / (s.norm(dim=-1) * t.norm(dim=-1))
    n = cos.numel()
    loss = hidden_cosine_loss(student, teacher)
    assert loss.item() == pytest.approx(float((1 - cos).mean()), rel=1e-12)
    loss.backward()
    # d(1 - cos)/ds = -(t / (|s||t|) - cos * s / |s|^2), averaged over the n tokens.
    s_norm, t_norm = s.norm(dim=-1, keepdim=True), t.norm(dim=-1, keepdim=True)
    expected = -(t / (s_norm * t_norm) - cos[..., None] * s / s_norm**2) / n
    torch.testing.assert_close(student.grad, expected)


def test_a_gradient_step_turns_every_student_vector_towards_the_teacher():
    student, teacher = states(3).requires_grad_(True), states(4)
    hidden_cosine_loss(student, teacher).backward()
    grad = student.grad
    # Scale-free loss: the gradient is orthogonal to the student vector ...
    torch.testing.assert_close(
        (grad * student.detach()).sum(-1), torch.zeros(2, 3, dtype=torch.float64)
    )
    # ... and descending it raises each token's cosine with the teacher.
    before = nn.functional.cosine_similarity(student.detach(), teacher, dim=-1)
    after = nn.functional.cosine_similarity(student.detach() - 0.1 * grad, teacher, dim=-1)
    assert bool((after > before).all()), (before, after)


def test_padding_is_left_out():
    student, teacher = states(5).requires_grad_(True), states(6)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = hidden_cosine_loss(student, teacher, mask)
    real = mask.bool()
    by_hand = 1 - nn.functional.cosine_similarity(student[real], teacher[real], dim=-1)
    assert loss.item() == pytest.approx(by_hand.mean().item(), rel=1e-12)
    loss.backward()
    assert bool((student.grad[~real] == 0).all()) and bool((student.grad[real] != 0).any())
    garbage = student.detach().clone()
    garbage[~real] = -teacher[~real]  # the worst possible padded states change nothing
    assert hidden_cosine_loss(garbage, teacher, mask).item() == pytest.approx(loss.item())


def test_bad_masks_and_shapes_are_rejected():
    student, teacher = states(7), states(8)
    with pytest.raises(ValueError, match="no real token"):
        hidden_cosine_loss(student, teacher, torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(2, 3\)"):
        hidden_cosine_loss(student, teacher, torch.ones(2, 4))
    with pytest.raises(ValueError, match="same tokens"):
        hidden_cosine_loss(student, states(9, (2, 4, 4)))


def test_different_widths_need_a_projection_that_learns_with_the_student():
    assert width_projection(4, 4) is None
    with pytest.raises(ValueError, match="widths must be >= 1"):
        width_projection(0, 4)
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 3, 3, requires_grad=True), torch.randn(2, 3, 5)
    with pytest.raises(ValueError, match=r"widths differ \(3 vs 5\).*width_projection"):
        hidden_cosine_loss(student, teacher)
    projection = width_projection(3, 5)
    assert isinstance(projection, nn.Linear) and projection.bias is None
    assert tuple(projection.weight.shape) == (5, 3)
    teacher.requires_grad_(True)  # even a teacher state with autograd gets no gradient
    hidden_cosine_loss(student, teacher, projection=projection).backward()
    assert student.grad is not None and projection.weight.grad is not None
    assert teacher.grad is None


def test_teacher_outputs_and_a_student_that_learns_the_teachers_states(tiny_bert_config):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    teacher = BertForSequenceClassification(tiny_bert_config(layers=4)).train()
    ids = torch.randint(0, 50, (4, 8))
    mask = torch.ones(4, 8, dtype=torch.long)
    mask[:2, 5:] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    logits, hidden = teacher_outputs(teacher, batch)
    assert not teacher.training and not logits.requires_grad and not hidden.requires_grad
    with torch.no_grad():
        reference = teacher(**batch, output_hidden_states=True)
    torch.testing.assert_close(logits, reference.logits)
    torch.testing.assert_close(hidden, reference.hidden_states[-1])
    torch.testing.assert_close(
        teacher_outputs(teacher, batch, layer=0)[1], reference.hidden_states[0]
    )

    torch.manual_seed(1)  # a fresh 1-layer student: its states point elsewhere at first
    student = BertForSequenceClassification(
        tiny_bert_config(layers=1)
    ).eval()  # eval: no dropout noise
    opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        out = student(**batch, output_hidden_states=True)
        loss = hidden_cosine_loss(out.hidden_states[-1], hidden, mask)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(p.grad is None for p in teacher.parameters())
