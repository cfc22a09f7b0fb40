"""Activation checkpointing: same gradients, and the expected drop in saved activations."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from effkit.act_checkpoint import (
    MATMUL_OPS,
    CountedSaveOnCpu,
    checkpoint_modules,
    is_checkpointed,
    peak_cuda_memory,
    run_segments,
    saved_activation_bytes,
    sqrt_segments,
    uncheckpoint_modules,
)
from effkit.checkpoint_plan import (
    CheckpointPlan,
    PlanError,
    apply_plan,
    plan_bytes,
    plan_for_budget,
)

TIGHT = {"atol": 1e-12, "rtol": 1e-12}


def block(d: int, dropout: float = 0.0) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Dropout(dropout), nn.LayerNorm(d))


def stack(n_blocks=8, d=16, dropout=0.0) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[block(d, dropout) for _ in range(n_blocks)]).double()


def grads_after_backward(model, x, seed=0) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # same dropout masks for both models
    model(x).pow(2).mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_sequential_gradients_match_plain_model(dropout):
    plain = stack(dropout=dropout)
    checkpointed = copy.deepcopy(plain)
    assert checkpoint_modules(checkpointed, lambda name, m: name.isdigit()) == 8
    assert all(is_checkpointed(checkpointed[i]) for i in range(8))
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True)
    expected = grads_after_backward(plain, x)
    # Non-trivial dropout check: with another seed the gradients differ.
    if dropout:
        other = grads_after_backward(plain, x, seed=1)
        assert not torch.allclose(other["0.0.weight"], expected["0.0.weight"])
    torch.testing.assert_close(grads_after_backward(checkpointed, x), expected, **TIGHT)


def test_wrapping_is_idempotent_nested_safe_and_keeps_state_dict():
    model = stack(n_blocks=3)
    keys = list(model.state_dict())
    # Blocks and the Linears inside them match: only the outer blocks get wrapped.
    assert checkpoint_modules(model, (nn.Sequential, nn.Linear)) == 1  # the root Sequential
    uncheckpoint_modules(model)
    selector = lambda name, m: isinstance(m, nn.Linear) or name in {"0", "1", "2"}  # noqa: E731
    assert checkpoint_modules(model, selector) == 3
    assert not any(is_checkpointed(m) for m in model.modules() if isinstance(m, nn.Linear))
    assert checkpoint_modules(model, selector) == 0  # already wrapped: no double wrapping
    assert list(model.state_dict()) == keys
    stack(n_blocks=3).load_state_dict(model.state_dict())  # strict load into a plain model
    assert uncheckpoint_modules(model) == 3
    assert not any(is_checkpointed(m) for m in model.modules())
    assert "forward" not in model[0].__dict__


def test_nothing_matched_and_bad_selector():
    with pytest.raises(ValueError, match=r"no submodule of Sequential matched.*Linear"):
        checkpoint_modules(stack(n_blocks=2), nn.Conv2d)
    with pytest.raises(TypeError, match="predicate"):
        checkpoint_modules(stack(n_blocks=2), "Linear")


def test_deepcopy_of_checkpointed_model_uses_its_own_weights():
    model = stack(n_blocks=2)
    checkpoint_modules(model, lambda name, m: name in {"0", "1"})
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(1.0)
    x = torch.randn(3, 16, dtype=torch.float64)
    uncheckpointed_clone = copy.deepcopy(clone)
    uncheckpoint_modules(uncheckpointed_clone)
    torch.testing.assert_close(clone(x), uncheckpointed_clone(x), **TIGHT)  # grad mode on
    assert not torch.allclose(clone(x), model(x))


def bert(num_layers=3):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return transformers.BertModel(config).double().eval(), transformers


def test_bert_layers_gradients_match():
    plain, transformers = bert()
    checkpointed = copy.deepcopy(plain)
    layer_type = transformers.models.bert.modeling_bert.BertLayer
    assert checkpoint_modules(checkpointed, layer_type) == 3
    assert list(checkpointed.state_dict()) == list(plain.state_dict())

    ids = torch.randint(100, (2, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # padding exercises the attention-mask argument through the wrapper

    def grads(model):
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=mask)
        (out.last_hidden_state.pow(2).mean() + out.pooler_output.sum()).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    expected = grads(plain)
    assert any("encoder.layer.0." in n for n in expected)
    got = grads(checkpointed)
    assert got.keys() == expected.keys()
    torch.testing.assert_close(got, expected, atol=1e-11, rtol=1e-9)

    # Checkpointing must actually be active: only layer inputs survive the forward.
    def forward_loss(model):
        return lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state.sum()

    assert saved_activation_bytes(forward_loss(checkpointed)) < 0.25 * saved_activation_bytes(
        forward_loss(plain)
    )


def mlp_blocks(n_blocks: int, d: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)) for _ in range(n_blocks)]
    ).double()


def test_saved_activation_bytes_drop_by_the_analytic_factor():
    # Block Linear -> GELU -> Linear saves three batch x d tensors for backward: the first
    # Linear's input, GELU's input and the second Linear's input (weights are not
    # activations). Checkpointed, a block saves only its input: exactly one third.
    n_blocks, batch, d = 6, 16, 32
    bytes_per_activation = batch * d * torch.finfo(torch.float64).bits // 8
    x = torch.randn(batch, d, dtype=torch.float64)

    plain = mlp_blocks(n_blocks, d)
    plain_bytes = saved_activation_bytes(lambda: plain(x).sum())
    checkpointed = mlp_blocks(n_blocks, d)
    checkpoint_modules(checkpointed, lambda name, m: name.isdigit())
    ckpt_bytes = saved_activation_bytes(lambda: checkpointed(x).sum())

    assert plain_bytes == pytest.approx(3 * n_blocks * bytes_per_activation, rel=0.01)
    assert ckpt_bytes == pytest.approx(n_blocks * bytes_per_activation, rel=0.01)
    assert ckpt_bytes / plain_bytes == pytest.approx(1 / 3, rel=0.01)


def test_saved_activation_bytes_frees_what_the_forward_saved():
    # An op that saves its own *output* (exp, gelu's tanh form, layer norm's statistics, SDPA)
    # ties that tensor to its graph node when a pack hook hands the tensor itself back: a
    # cycle inside autograd that Python's gc cannot see. The forward measured here is never
    # backpropagated, so every byte it saved would stay allocated for good (on an H100 the
    # lesson's planner ran out of 80 GB this way). Nothing the forward saved may outlive it.
    import weakref

    x = torch.randn(64, 64, requires_grad=True)
    outputs = []

    def forward():
        y = (x @ x).exp()  # exp saves its output
        outputs.append(weakref.ref(y))
        return y.sum()

    assert saved_activation_bytes(forward) > 0
    import gc

    gc.collect()
    assert outputs[0]() is None, "a saved output outlived the measured forward (reference cycle)"


def test_saved_activation_bytes_dedupes_shared_storage():
    x = torch.randn(8, 8, dtype=torch.float64, requires_grad=True)
    y = x * 2  # 512 bytes, saved below through two views of one storage

    def two_views():
        return (y[:4] * y[:4]).sum() + (y.t() * 3).sin().sum()

    # y[:4] twice (same storage), then y.t()*3 is a new 512-byte tensor saved by sin.
    assert saved_activation_bytes(two_views) == 512 + 512
    # Leaf tensors that require grad (parameters) are not activations.
    assert saved_activation_bytes(lambda: (x * x).sum()) == 0


@pytest.mark.parametrize("pin_memory", [False, True])
def test_counted_save_on_cpu_counts_each_save_at_its_size_and_keeps_gradients(pin_memory):
    x = torch.randn(8, 8, dtype=torch.float64, requires_grad=True)

    def loss():
        y = x * 2
        return (y[:4] * y[:4]).sum() + (y.t() * 3).sin().sum() + (x * x).sum()

    expected = torch.autograd.grad(loss(), x)[0]
    hooks = CountedSaveOnCpu(pin_memory=pin_memory)
    with hooks:
        out = loss()
    got = torch.autograd.grad(out, x)[0]  # the unpack hooks run here, after the `with`
    count = hooks.count
    # Unlike saved_activation_bytes, every save counts at its own size: the view y[:4] twice
    # (256 bytes each), sin's input (512), and the parameter-like leaf x twice (512 each).
    assert (count.tensors, count.packed_bytes, count.parameter_bytes) == (5, 2048, 1024)
    assert count.unpacked_bytes == count.packed_bytes
    # .cpu() of a CPU tensor is the tensor itself; pin_memory=True always copies.
    assert count.copied == (count.tensors if pin_memory else 0)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_peak_cuda_memory_on_cpu_runs_fn_and_returns_none():
    calls = []
    result = peak_cuda_memory(lambda: calls.append(1))
    if not torch.cuda.is_available():
        assert result is None
    assert calls == [1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_peak_cuda_memory_counts_temporary_allocations():
    def allocate():
        tmp = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        del tmp

    assert peak_cuda_memory(allocate) >= 64 * 2**20


def test_an_already_patched_forward_is_kept_and_restored():
    model = stack(n_blocks=2)
    calls = []
    original = model[1].forward

    def logging_forward(x):  # e.g. a hook library that replaced forward on the instance
        calls.append(x.shape)
        return original(x)

    model[1].forward = logging_forward
    checkpoint_modules(model, lambda name, m: name.isdigit())
    x = torch.randn(3, 16, dtype=torch.float64, requires_grad=True)
    model(x).sum().backward()
    assert len(calls) == 2  # forward + recompute in backward, both through the patch
    uncheckpoint_modules(model)
    assert model[1].forward is logging_forward


# -- selective checkpointing, sqrt(n) segments, plans ------------------------------------------


def test_selective_checkpointing_keeps_the_matmuls_and_matches_gradients(recwarn):
    # Linear -> GELU -> Linear, d -> d: a block keeps its input and both Linear outputs (the
    # second one is the next block's input: one storage, counted once), so n blocks keep
    # 2n + 1 batch x d tensors, between full checkpointing (n) and none (3n).
    n_blocks, batch, d = 6, 16, 32
    unit = batch * d * 8
    x = torch.randn(batch, d, dtype=torch.float64)
    plain = mlp_blocks(n_blocks, d)
    selective = mlp_blocks(n_blocks, d)
    assert checkpoint_modules(selective, lambda name, m: name.isdigit(), save_ops=MATMUL_OPS) == 6
    assert saved_activation_bytes(lambda: selective(x).sum()) == (2 * n_blocks + 1) * unit
    # Saving the pointwise op instead (GELU) keeps GELU's outputs and recomputes the matmuls.
    pointwise = mlp_blocks(n_blocks, d)
    checkpoint_modules(pointwise, lambda name, m: name.isdigit(), save_ops={"gelu"})
    assert saved_activation_bytes(lambda: pointwise(x).sum()) == (2 * n_blocks) * unit
    xg = x.clone().requires_grad_()
    expected = grads_after_backward(plain, xg)
    torch.testing.assert_close(grads_after_backward(selective, xg), expected, **TIGHT)
    torch.testing.assert_close(grads_after_backward(pointwise, xg), expected, **TIGHT)
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)], [
        str(w.message) for w in recwarn
    ]
    uncheckpoint_modules(selective)
    assert saved_activation_bytes(lambda: selective(x).sum()) == 3 * n_blocks * unit


@pytest.mark.parametrize(
    "n, expected", [(1, [1]), (4, [2, 2]), (9, [3, 3, 3]), (10, [4, 3, 3]), (16, [4] * 4)]
)
def test_sqrt_segments_cut_n_blocks_into_about_sqrt_n_contiguous_segments(n, expected):
    segments = sqrt_segments(n)
    assert [len(s) for s in segments] == expected
    assert [i for s in segments for i in s] == list(range(n))
    assert [len(s) for s in sqrt_segments(7, segments=2)] == [4, 3]
    with pytest.raises(ValueError):
        sqrt_segments(0)


def test_run_segments_keeps_only_segment_inputs_and_matches_gradients():
    n_blocks, batch, d = 9, 8, 16
    unit = batch * d * 8
    x = torch.randn(batch, d, dtype=torch.float64)
    blocks = mlp_blocks(n_blocks, d)
    segments = sqrt_segments(n_blocks)
    # The three segment inputs (the first one is x itself: data, not a parameter).
    assert saved_activation_bytes(lambda: run_segments(blocks, x, segments).sum()) == 3 * unit
    x.requires_grad_()
    blocks.zero_grad()
    run_segments(blocks, x, segments).pow(2).sum().backward()
    got = {n: p.grad.clone() for n, p in blocks.named_parameters()}
    blocks.zero_grad()
    blocks(x).pow(2).sum().backward()
    torch.testing.assert_close(got, {n: p.grad for n, p in blocks.named_parameters()}, **TIGHT)


def test_plans_travel_as_plain_data_and_bad_ones_say_why():
    plan = CheckpointPlan.from_data(
        {"blocks": [3, 1, 1], "save": ["mm", "addmm"]}, 4, frozenset({"mm", "addmm"})
    )
    assert plan == CheckpointPlan((1, 3), ("addmm", "mm"))
    assert CheckpointPlan.from_data(plan.to_data(), 4) == plan
    assert (
        CheckpointPlan.everything(3).describe(3)
        == "every block of 3 checkpointed, recomputed whole"
    )
    for bad, why in [
        ([1, 2], "a plan is a dict"),
        ({"blocks": [4]}, "blocks 0..3"),
        ({"blocks": [True]}, "ints"),
        ({"blocks": [0], "save": "mm"}, "list of op names"),
        ({"blocks": [0], "save": ["sin"]}, "never runs"),
        ({"blockz": []}, "a plan is"),
    ]:
        with pytest.raises(PlanError, match=why):
            CheckpointPlan.from_data(bad, 4, frozenset({"mm", "addmm"}))


def test_plan_for_budget_checkpoints_the_fewest_blocks_that_fit():
    n_blocks, batch, d = 6, 16, 32
    unit = batch * d * 8
    blocks = mlp_blocks(n_blocks, d)
    x = torch.randn(batch, d, dtype=torch.float64)
    assert plan_bytes(blocks, x, CheckpointPlan()) == 3 * n_blocks * unit
    assert plan_bytes(blocks, x, CheckpointPlan.everything(n_blocks)) == n_blocks * unit
    assert not any(is_checkpointed(m) for m in blocks.modules())  # measured on a copy
    # Each checkpointed block saves 2 units: a budget of 13 units needs 3 blocks.
    plan = plan_for_budget(blocks, x, 13 * unit)
    assert len(plan.blocks) == 3 and plan_bytes(blocks, x, plan) == 12 * unit
    assert plan_for_budget(blocks, x, 18 * unit) == CheckpointPlan()
    with pytest.raises(PlanError, match="even with every block"):
        plan_for_budget(blocks, x, 5 * unit)
    xg = x.clone().requires_grad_()
    expected = grads_after_backward(blocks, xg)
    apply_plan(blocks, plan)
    assert sum(is_checkpointed(m) for m in blocks.modules()) == 3
    torch.testing.assert_close(grads_after_backward(blocks, xg), expected, **TIGHT)


# Emulating torch < 2.12 on a newer torch calls checkpoint() without respect_saved_tensors_hooks, which
# newer torch warns about; the warning belongs to the emulation (effkit passes the keyword wherever it exists).
@pytest.mark.filterwarnings("ignore:A saved_tensors_hooks context:FutureWarning")
def test_a_selective_block_the_hooks_cannot_see_stops_the_count(monkeypatch):
    # Before torch 2.12, selective checkpointing keeps its tensors outside saved_tensors_hooks:
    # counting would silently report "checkpoint everything" bytes (seen on an H100 with torch
    # 2.11). The count must refuse instead, and still work for whole-block checkpointing.
    import effkit.act_checkpoint as ac

    monkeypatch.setattr(ac, "_ROUTE_SAC", False)
    x = torch.randn(8, 16, dtype=torch.float64)
    whole = mlp_blocks(3, 16)
    checkpoint_modules(whole, lambda name, m: name.isdigit())
    assert saved_activation_bytes(lambda: whole(x).sum()) > 0
    selective = mlp_blocks(3, 16)
    checkpoint_modules(selective, lambda name, m: name.isdigit(), save_ops=MATMUL_OPS)
    with pytest.raises(ac.UncountedSaves, match="cannot be counted"):
        saved_activation_bytes(lambda: selective(x).sum())
    assert ac._UNCOUNTED == []
