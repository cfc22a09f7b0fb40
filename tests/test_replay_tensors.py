"""An exact replay compared tensor by tensor (issue 52 §1, lesson 3): a step whose backward stops short
of some layers on some steps must not pass because the whole update's cosine is the large tensors'.

A model whose embedding dominates the update trains a chunk under AdamW with clipping, as lesson 3's
recipe does: once honestly, once with one layer's weight getting no gradient every other step (a
cheaper backward). The replay is the honest chunk from the same start (exact on a CPU). The whole
update passes the scored replay's bound, and so does the layer's direction (Adam normalises each
step); the layer's own size does not. Fast: no grading.
"""

import functools

import torch
from torch import nn

from grader.assignments.lesson3.checks import SPECS
from grader.timed.replay import KEPT_COSINE, KEPT_SIZE_BAND, TENSOR_SIZE_BAND
from grader.timed.updates import compare, tensors_apart, tensors_differ, update

REPLAY_COSINE = SPECS["smoke"].replay_cosine  # lesson 3's CPU specs (GradingSpec.replay_cosine)
# each tensor's floor (GradingSpec.replay_tensor_cosine): lower, the size band unchanged
TENSOR_COSINE = SPECS["smoke"].replay_tensor_cosine
LAYERS = 48  # one of them skipped: a small share of the whole update, as one layer of a deep model


@functools.cache
def _chunk(skip: str | None, steps: int = 8) -> tuple[dict, dict]:
    torch.manual_seed(0)
    layers = [m for _ in range(LAYERS) for m in (nn.Linear(64, 64), nn.Tanh())]
    model = nn.Sequential(nn.Embedding(2000, 64), *layers, nn.Linear(64, 4))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1)
    for step in range(steps):
        tokens = torch.randint(0, 2000, (64,), generator=data)
        labels = torch.randint(0, 4, (64,), generator=data)
        for name, p in model.named_parameters():
            p.requires_grad_(not (skip and name == skip and step % 4 == 3))  # 1 step in 4
        loss = nn.functional.cross_entropy(model(tokens), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return start, {k: v.clone() for k, v in model.state_dict().items()}


def test_a_layer_trained_every_other_step_passes_the_whole_update_and_fails_its_own():
    start, replay = _chunk(None)
    _, honest = _chunk(None, steps=8)  # run again (another cache key): the same chunk, bit for bit
    _, partial = _chunk("3.weight")  # the second hidden layer: a backward stopped above it
    whole, _ = compare(update(start, partial), update(start, replay))
    assert whole >= REPLAY_COSINE  # the whole-update bound alone let it through
    apart = tensors_apart(start, partial, replay)
    for each in (
        REPLAY_COSINE,
        TENSOR_COSINE,
    ):  # caught by its size, whatever the direction's floor
        differ = tensors_differ(apart, each, TENSOR_SIZE_BAND)
        assert [d.split(" ")[0] for d in differ] == ["3.weight"], differ
    # an honest native-bf16 outlier (Zen 4: one attention tensor at 0.9589, size 0.95x) passes the tensor floor
    assert tensors_differ([("w", 0.9589, 0.9507)], TENSOR_COSINE, TENSOR_SIZE_BAND) == []
    # the honest chunk matches its replay tensor by tensor, under the kept-batch bounds too
    for least, band in ((REPLAY_COSINE, TENSOR_SIZE_BAND), (KEPT_COSINE, KEPT_SIZE_BAND)):
        assert tensors_differ(tensors_apart(start, honest, replay), least, band) == []


def test_small_tensors_and_tensors_the_replay_left_still_are_not_judged_alone():
    start, replay = _chunk(None)
    names = [k for k, _, _ in tensors_apart(start, replay, replay)]
    assert "1.bias" not in names and f"{2 * LAYERS + 1}.weight" not in names  # 64, 256 values
    assert len(names) == 1 + LAYERS and "0.weight" in names
