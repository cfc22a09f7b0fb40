"""Behaviour probes for a mixed-precision train step: what lesson 3's checks observe, not its source.

Spies on the model, scaler and optimizer let a failure say what happened, and any correct
formulation passes. fp16 is simulated on the CPU: it tests the scaler's logic, not GPU numerics.
"""

from __future__ import annotations

import types

import torch

# choose_policy's cases, (DeviceCaps fields, what a failure calls the device), shared by the worker
# (probes.py) and the parent (checks.py), which computes each expected mode from effkit's own rule
# (choose_precision "auto"). The last two catch "bf16 if caps.bf16 else fp16 if caps.fp16 else off":
# fp16 is picked only on CUDA, where a GradScaler can keep its gradients in range.
POLICY_CASES = (
    (dict(type="cpu", name="Xeon with AMX", bf16=True), "a CPU with bf16"),
    (dict(type="cuda", name="NVIDIA A100", bf16=True, fp16=True), "an A100 (bf16 and fp16)"),
    (dict(type="cuda", name="Tesla T4", bf16=False, fp16=True), "a T4 (fp16 only)"),
    (dict(type="cpu", name="old CPU", bf16=False, fp16=False), "a CPU without bf16"),
    (
        dict(type="cpu", name="CPU with AVX512-FP16", bf16=False, fp16=True),
        "a CPU with fp16 but no bf16 (fp16 mixed precision only on CUDA)",
    ),
    (
        dict(type="mps", name="Apple GPU", bf16=False, fp16=True),
        "an Apple GPU, mps (fp16 mixed precision only on CUDA)",
    ),
)
# make_scaler's cases, (policy.device_type, policy.mode): the scaler must be for the policy's device.
# On a torch without CUDA, GradScaler("cuda", enabled=True) warns and disables itself, so the cuda
# cases check the device always and the enabled flag only where the worker has CUDA.
SCALER_CASES = (
    ("cpu", "bf16"),
    ("cpu", "off"),
    ("cpu", "fp16"),
    ("cuda", "bf16"),
    ("cuda", "fp16"),
)

INIT_SCALE = 2.0**12  # the spy scaler's loss scale: large, so scale mistakes are unmistakable
GAIN = 50.0  # the probe's loss is multiplied by this, so its gradient norm is far above 1.0
LR = 0.1


class ProbeModel(torch.nn.Module):
    """``model(input_ids=, attention_mask=, labels=)`` -> object with ``.loss`` and ``.logits``."""

    def __init__(self, seed: int = 0, vocab: int = 32, width: int = 16):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Embedding(vocab, width)
        self.mix = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, 2)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        self.seen: list[tuple[torch.dtype, bool]] = []  # (matmul output dtype, autocast on)
        self.poison = False  # True: the forward yields NaN, so every gradient is NaN

    def forward(self, input_ids, attention_mask=None, labels=None):
        h = self.embed(input_ids)
        if attention_mask is not None:
            h = h * attention_mask[..., None].to(h.dtype)
        h = self.mix(h)
        self.seen.append((h.dtype, torch.is_autocast_enabled("cpu")))
        if self.poison:
            h = h * float("inf") - h * float("inf")  # inf - inf = NaN everywhere
        logits = self.head(torch.tanh(h).mean(1))
        loss = GAIN * torch.nn.functional.cross_entropy(logits.float(), labels)
        return types.SimpleNamespace(loss=loss, logits=logits)


def probe_batch(seed: int = 0, n: int = 8, length: int = 12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(n, length, dtype=torch.int64)
    mask[n // 2 :, length // 2 :] = 0  # some padding, as in real batches
    return {
        "input_ids": torch.randint(1, 32, (n, length), generator=g),
        "attention_mask": mask,
        "labels": torch.randint(0, 2, (n,), generator=g),
    }


class SpyScaler(torch.amp.GradScaler):
    """An enabled CPU GradScaler that logs ``scale``, ``unscale_``, ``step`` and ``update`` calls."""

    def __init__(self, init_scale: float = INIT_SCALE):
        super().__init__("cpu", init_scale=init_scale)
        self.calls: list[str] = []

    def scale(self, outputs):
        self.calls.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer):
        self.calls.append("unscale_")
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self.calls.append("step")
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):
        self.calls.append("update")
        return super().update(new_scale)


class SpyOptimizer(torch.optim.SGD):
    """SGD that records the global gradient norm each time it actually steps."""

    def __init__(self, params, lr: float = LR):
        super().__init__(params, lr=lr)
        self.step_norms: list[float] = []

    def step(self, closure=None):
        grads = [
            p.grad.detach().float().reshape(-1)
            for g in self.param_groups
            for p in g["params"]
            if p.grad is not None
        ]
        self.step_norms.append(float(torch.cat(grads).norm()) if grads else 0.0)
        return super().step(closure)


# torch patches an optimizer class's ``step`` (profiling hooks) when its first instance is made:
# do it now, at import, so the grader's worker does not mistake that patch for tampering.
SpyOptimizer([torch.zeros(1, requires_grad=True)])


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def grads_cleared(model) -> bool:
    return all(p.grad is None or not bool(p.grad.any()) for p in model.parameters())
