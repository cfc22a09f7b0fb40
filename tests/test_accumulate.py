"""Gradient accumulation must reproduce the big-batch gradient exactly (float64)."""

from __future__ import annotations

import contextlib
import copy
import socket

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from effkit.accumulate import GradAccumulator, global_window_count, iter_windows, window_counts

EXACT = {"atol": 1e-10, "rtol": 0.0}
VOCAB, DIM, PAD = 13, 6, -100


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def token_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(VOCAB, DIM), nn.Linear(DIM, VOCAB)).double()


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def token_micro_batches(shapes, seed=1):
    """(tokens, labels) pairs; labels are PAD past each row's random length."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for rows, length in shapes:
        tokens = torch.randint(VOCAB, (rows, length), generator=g)
        labels = torch.randint(VOCAB, (rows, length), generator=g)
        lengths = torch.randint(1, length + 1, (rows,), generator=g)
        labels[torch.arange(length) >= lengths[:, None]] = PAD
        batches.append((tokens, labels))
    return batches


def token_loss_sum(model, tokens, labels):
    logits = model(tokens)
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), reduction="sum", ignore_index=PAD
    )


def sample_loss_sum(model, x, y):
    return F.cross_entropy(model(x), y, reduction="sum")


def pad_and_concat(batches):
    width = max(t.shape[1] for t, _ in batches)
    tokens = torch.cat([F.pad(t, (0, width - t.shape[1])) for t, _ in batches])
    labels = torch.cat([F.pad(y, (0, width - y.shape[1]), value=PAD) for _, y in batches])
    return tokens, labels


def valid_tokens(batches) -> int:
    return sum(int((labels != PAD).sum()) for _, labels in batches)


def accumulate(model, batches, loss_sum_fn, total, **kwargs):
    """One window through GradAccumulator; returns the accumulated grads (before step)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    acc = GradAccumulator(model, opt, accum_steps=len(batches), **kwargs)
    for i, batch in enumerate(batches):
        with acc.micro_step(is_last=i == len(batches) - 1):
            acc.backward(loss_sum_fn(model, *batch), total)
    return grads(model), acc


def test_sample_level_unequal_micro_batches_match_big_batch():
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randint(3, (n,)))
        for n in (5, 3, 8)
    ]

    big = mlp()
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    F.cross_entropy(big(x), y).backward()

    accumulated, _ = accumulate(mlp(), batches, sample_loss_sum, total=len(y))
    torch.testing.assert_close(accumulated, grads(big), **EXACT)

    naive = mlp()  # mean per micro-batch divided by k: over-weights the 3-sample batch
    for xb, yb in batches:
        (F.cross_entropy(naive(xb), yb) / len(batches)).backward()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(grads(naive), grads(big), **EXACT)


def test_token_level_padding_masks_match_big_batch():
    batches = token_micro_batches([(2, 7), (3, 4), (1, 9), (4, 5)])
    counts = [valid_tokens([b]) for b in batches]
    assert len(set(counts)) > 1, "micro-batches must differ in valid tokens for this test"

    big = token_model()
    tokens, labels = pad_and_concat(batches)
    F.cross_entropy(
        big(tokens).flatten(0, 1), labels.flatten(), ignore_index=PAD
    ).backward()  # mean over all valid tokens of the window

    accumulated, _ = accumulate(token_model(), batches, token_loss_sum, valid_tokens(batches))
    torch.testing.assert_close(accumulated, grads(big), **EXACT)

    naive = token_model()
    for tokens_i, labels_i in batches:
        loss = F.cross_entropy(naive(tokens_i).flatten(0, 1), labels_i.flatten(), ignore_index=PAD)
        (loss / len(batches)).backward()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(grads(naive), grads(big), **EXACT)


def test_last_partial_window_is_exact_over_a_whole_epoch():
    micro_batches = token_micro_batches([(2, 3 + i % 4) for i in range(10)], seed=3)
    assert [len(w) for w in iter_windows(micro_batches, 4)] == [4, 4, 2]

    model = token_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    acc = GradAccumulator(model, opt, accum_steps=4)
    for window in acc.windows(micro_batches):
        total = valid_tokens(window)
        for i, (tokens, labels) in enumerate(window):
            with acc.micro_step(is_last=i == len(window) - 1):
                acc.backward(token_loss_sum(model, tokens, labels), total)
        acc.step()
        assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none)

    reference = token_model()  # one big batch per window, plain SGD
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for start in (0, 4, 8):
        tokens, labels = pad_and_concat(micro_batches[start : start + 4])
        ref_opt.zero_grad()
        F.cross_entropy(
            reference(tokens).flatten(0, 1), labels.flatten(), ignore_index=PAD
        ).backward()
        ref_opt.step()
    torch.testing.assert_close(list(model.parameters()), list(reference.parameters()), **EXACT)


def test_window_counts_and_windows():
    assert window_counts([3, 5, 2, 4, 1], accum_steps=2) == [8, 6, 1]
    assert window_counts([3, 5], accum_steps=1) == [3, 5]
    assert list(iter_windows(range(5), 5)) == [[0, 1, 2, 3, 4]]
    assert list(iter_windows([], 3)) == []


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_invalid_accum_steps(bad):
    model = mlp()
    with pytest.raises(ValueError, match=r"accum_steps must be an integer >= 1.*got"):
        GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), accum_steps=bad)
    with pytest.raises(ValueError, match="accum_steps"):
        list(iter_windows([1, 2], bad))


def test_accum_steps_one_is_a_plain_training_step():
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.randint(3, (6,))
    model, plain = mlp(), mlp()
    acc = GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.3), accum_steps=1)
    with acc.micro_step(is_last=True):
        acc.backward(F.cross_entropy(model(x), y, reduction="sum"), len(y))
    acc.step()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.3)
    F.cross_entropy(plain(x), y).backward()
    plain_opt.step()
    torch.testing.assert_close(list(model.parameters()), list(plain.parameters()), **EXACT)


def test_misuse_is_reported():
    model = mlp()
    x, y = torch.randn(4, 4, dtype=torch.float64), torch.randint(3, (4,))
    acc = GradAccumulator(model, torch.optim.SGD(model.parameters(), lr=0.1), accum_steps=2)
    with pytest.raises(RuntimeError, match="before any backward"):
        acc.step()
    acc.backward(F.cross_entropy(model(x), y, reduction="sum"), 8)
    with pytest.raises(ValueError, match="window_count changed within a window"):
        acc.backward(F.cross_entropy(model(x), y, reduction="sum"), 4)  # per-batch count: bug
    acc.backward(F.cross_entropy(model(x), y, reduction="sum"), 8)
    with pytest.raises(RuntimeError, match="call step"):
        acc.backward(F.cross_entropy(model(x), y, reduction="sum"), 8)
    with pytest.raises(ValueError, match="window_count must be > 0"):
        GradAccumulator(model, acc.optimizer, 2).backward(model(x).sum(), 0)
    with pytest.raises(ValueError, match="max_grad_norm"):
        GradAccumulator(model, acc.optimizer, 2, max_grad_norm=0.0)


def test_clipping_happens_after_unscaling():
    # float32: GradScaler handles fp16/fp32 gradients. A big scale makes the order visible:
    # clipping the *scaled* gradients would return a norm 4096x too large and shrink the
    # update 4096x.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    reference = copy.deepcopy(model)
    x, y = torch.randn(12, 4), torch.randint(3, (12,))
    F.cross_entropy(reference(x), y).backward()
    true_grads = grads(reference)
    true_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in true_grads]))
    max_norm = 0.25 * true_norm.item()

    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=4096.0)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    acc = GradAccumulator(model, opt, accum_steps=2, scaler=scaler, max_grad_norm=max_norm)
    for xb, yb in ((x[:5], y[:5]), (x[5:], y[5:])):
        acc.backward(F.cross_entropy(model(xb), yb, reduction="sum"), len(y))
    grad_norm = acc.step()

    torch.testing.assert_close(grad_norm, true_norm, rtol=1e-5, atol=0)
    expected_update = [-g * max_norm / (true_norm + 1e-6) for g in true_grads]
    updates = [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]
    torch.testing.assert_close(updates, expected_update, rtol=1e-4, atol=1e-7)
    assert scaler.get_scale() == 4096.0  # no overflow: the step was taken, not skipped


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gloo_group():
    dist = torch.distributed
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_skips_sync_except_on_last_micro_step(gloo_group):
    batches = token_micro_batches([(2, 5), (3, 4), (1, 6), (2, 3)])
    ddp = nn.parallel.DistributedDataParallel(token_model())
    entered = []
    original_no_sync = ddp.no_sync

    @contextlib.contextmanager
    def counting_no_sync():
        entered.append(len(entered))
        with original_no_sync():
            yield

    ddp.no_sync = counting_no_sync
    count = global_window_count(valid_tokens(batches))
    assert count == valid_tokens(batches)  # world_size 1: global mean == local mean
    accumulated, acc = accumulate(ddp, batches, token_loss_sum, count)
    assert len(entered) == 3  # micro-steps 0, 1, 2 of 4

    plain, _ = accumulate(token_model(), batches, token_loss_sum, valid_tokens(batches))
    torch.testing.assert_close(accumulated, plain, **EXACT)
    acc.step()

    # Forgetting is_last=True means gradients were never all-reduced: refuse to step.
    tokens, labels = batches[0]
    with acc.micro_step(is_last=False):
        acc.backward(token_loss_sum(ddp, tokens, labels), 10)
    with pytest.raises(RuntimeError, match="never all-reduced"):
        acc.step()
