"""Lesson 13: the grader's own classifier, trained per grading, and the plain data the worker gets.

One layer's input, drawn per grading (a hidden layer or the head), carries planted "massive
activations", so that quantizing without measuring which layer is sensitive costs accuracy while
int8's speed-up stays real; weights cross as raw float32, never a pickle. The grader's baseline is
the planted fp32 model itself.
"""

from __future__ import annotations

import base64
import math

import torch
import torch.nn.functional as F
from torch import nn

# six hidden layers of 384: deep enough that keeping any one of them in fp32 leaves int8 a clear
# batch-1 gain (3 x 512 kept 1.23-1.39x, at the floor: grader/assignments/lesson13/README.md)
DIM, CLASSES, WIDTH, HIDDEN_LAYERS = 64, 8, 384, 6
MAX_BYTES = 8 << 20  # largest model file accepted (the fp32 model is ~3.1 MB; int8 ~0.8 MB)
N_TRAIN, N_CALIB, N_TEST = 8192, 512, 4096
EPOCHS, BATCH, LR = 4, 128, 1e-3
SENSITIVE = (1, HIDDEN_LAYERS)  # which Linear's input carries them (0 reads the features), drawn
PLANTED = (2, 6)  # how many massive-activation units, drawn per grading
SCALES = (2048.0, 4096.0)  # their constant value, drawn per grading (a power of two)


def draw_planting(rng) -> tuple[int, int, float, int]:
    """One grading's secrets from the parent's ``random.Random``: task seed, planted units, their value, layer."""
    return (
        rng.randrange(1 << 20),
        rng.randint(*PLANTED),
        rng.choice(SCALES),
        rng.randint(*SENSITIVE),  # the learner must measure which layer it is
    )


def draw(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    oracle = torch.randn(DIM, CLASSES, generator=g) / math.sqrt(DIM)
    x = torch.randn(N_TRAIN + N_CALIB + N_TEST, DIM, generator=g)
    y = (x @ oracle).argmax(1)
    a, b = N_TRAIN, N_TRAIN + N_CALIB
    return {
        "x": x[:a],
        "y": y[:a],
        "x_calib": x[a:b],
        "y_calib": y[a:b],
        "x_test": x[b:],
        "y_test": y[b:],
    }


def build(widths: list[int]) -> nn.Sequential:
    """An MLP with these layer widths (input first, classes last), ReLU between layers."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers += [nn.Linear(fan_in, fan_out)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
    return nn.Sequential(*layers)


def widths_of(net: nn.Sequential) -> list[int]:
    linears = [m for m in net if isinstance(m, nn.Linear)]
    return [linears[0].in_features] + [m.out_features for m in linears]


def train(seed: int) -> nn.Sequential:
    data = draw(seed)
    torch.manual_seed(seed + 1)
    net = build([DIM] + [WIDTH] * HIDDEN_LAYERS + [CLASSES])
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    g = torch.Generator().manual_seed(seed + 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.enable_grad():
            for _ in range(EPOCHS):
                for idx in torch.randperm(N_TRAIN, generator=g).split(BATCH):
                    opt.zero_grad()
                    F.cross_entropy(net(data["x"][idx]), data["y"][idx]).backward()
                    opt.step()
    finally:
        torch.set_num_threads(threads)
    return net.eval().requires_grad_(False)


def with_massive_activations(
    net: nn.Sequential, seed: int, count: int, scale: float, layer: int
) -> nn.Sequential:
    """The same function with ``count`` constant units of value ``scale`` feeding Linear ``layer``.

    Every hidden layer gains ``count`` outputs, so the widths do not say which layer it is; those
    feeding ``layer`` have zero weights and bias ``scale`` (after the ReLU, exactly ``scale``) and
    ``layer`` reads them through random weights whose sum its bias cancels; the others stay 0, unread.
    """
    linears = [m for m in net if isinstance(m, nn.Linear)]
    assert 1 <= layer < len(linears), layer
    g = torch.Generator().manual_seed(seed + 3)
    widths = widths_of(net)
    widths[1:-1] = [w + count for w in widths[1:-1]]
    out = build(widths)
    new = [m for m in out if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for dst, src in zip(new, linears, strict=True):
            dst.weight.zero_()
            dst.bias.zero_()
            dst.weight[: src.out_features, : src.in_features] = src.weight
            dst.bias[: src.out_features] = src.bias
        before, sensitive = new[layer - 1], new[layer]
        w, rows = linears[layer].in_features, linears[layer].out_features
        before.bias[w:] = scale
        sensitive.weight[:rows, w:] = torch.randn(rows, count, generator=g) * 0.5
        sensitive.bias[:rows] -= sensitive.weight[:rows, w:].sum(1) * scale  # cancels them
    return out.eval().requires_grad_(False)


def to_plain(net: nn.Module) -> dict:
    return {
        "widths": widths_of(net),
        "tensors": {
            k: {
                "shape": list(v.shape),
                "b64": base64.b64encode(v.detach().float().contiguous().numpy().tobytes()).decode(),
            }
            for k, v in net.state_dict().items()
        },
    }


def from_plain(plain: dict) -> nn.Sequential:
    net = build([int(w) for w in plain["widths"]])
    state = {}
    for k, t in plain["tensors"].items():
        raw = bytearray(base64.b64decode(t["b64"]))
        state[k] = torch.frombuffer(raw, dtype=torch.float32).reshape(t["shape"]).clone()
    net.load_state_dict(state, strict=True)
    return net.eval()


def tensor_plain(t: torch.Tensor) -> dict:
    return {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "b64": base64.b64encode(t.contiguous().numpy().tobytes()).decode(),
    }


def tensor_unplain(p: dict) -> torch.Tensor:
    dtype = {"float32": torch.float32, "int64": torch.int64}[p["dtype"]]
    return (
        torch.frombuffer(bytearray(base64.b64decode(p["b64"])), dtype=dtype)
        .reshape(p["shape"])
        .clone()
    )
