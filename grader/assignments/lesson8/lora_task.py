"""Lesson 8, grader side: seeded layers and models for the LoRA checks, and the grader's own fine-tuning task.

The task needs negation, so a frozen encoder with a trained head cannot solve it. Without the
packaged pretrained encoder the recipe cell cannot be graded: LoRA on random weights teaches nothing.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
import warnings

import torch
from torch import nn

POS = (
    "good great excellent wonderful superb delightful brilliant charming enjoyable moving lovely fine "
    "pleasant solid clever funny beautiful fresh smart warm"
).split()
NEG = (
    "bad awful terrible boring dull poor weak clumsy tedious bland lousy stupid ugly messy silly flat "
    "lazy sloppy stale cold"
).split()
NOUN = "movie film story plot cast script ending acting show picture".split()
TEMPLATES = (
    "the {n} was {neg}{a} .",
    "this {n} is {neg}{a} .",
    "a {neg}{a} {n} .",
    "i found the {n} {neg}{a} .",
)
MAX_LEN, BATCH, STEPS, FULL_LR, HELD_OUT = 12, 16, 80, 5e-5, 1000
TARGET_CHOICES = (
    ("query", "value"),
    ("key", "value"),
    ("query", "dense"),
    ("value", "intermediate.dense"),
)


# -- seeded builders (worker and parent) --------------------------------------------------------
def draw_layer(seed: int) -> tuple[nn.Linear, torch.Tensor, torch.Tensor, int, float]:
    """(base layer, input x, loss weights w, rank r, alpha) drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    rnd = random.Random(seed)
    fan_in, fan_out, r = rnd.choice((24, 40, 48)), rnd.choice((16, 32, 56)), rnd.choice((2, 4, 8))
    alpha = float(rnd.choice((4, 16, 32)))
    torch.manual_seed(seed)
    base = nn.Linear(fan_in, fan_out)
    x = torch.randn(5, 7, fan_in, generator=g)
    w = torch.randn(5, 7, fan_out, generator=g)
    return base, x, w, r, alpha


def draw_adapters(
    seed: int, fan_in: int, fan_out: int, r: int
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(r, fan_in, generator=g) * 0.3, torch.randn(fan_out, r, generator=g) * 0.3


def tiny_bert(seed: int):
    """A small random BERT (2 layers, width 32) and a batch of token ids, from ``seed``."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(seed)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, 97, (3, 10), generator=torch.Generator().manual_seed(seed + 2))
    return model, ids


@contextlib.contextmanager
def _quiet():
    """peft asks transformers a deprecated question (``is_gradient_checkpointing``): not the learner's concern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


# -- references (parent) ------------------------------------------------------------------------
class _Holder(nn.Module):
    def __init__(self, base: nn.Linear):
        super().__init__()
        self.layer = base

    def forward(self, x):
        return self.layer(x)


def peft_layer_reference(seed: int) -> dict[str, torch.Tensor]:
    """peft's LoRA on the seeded base with the seeded A and B: output, grad A, grad B, merged weight."""
    from peft import LoraConfig, get_peft_model

    base, x, w, r, alpha = draw_layer(seed)
    a, b = draw_adapters(seed, base.in_features, base.out_features, r)
    with _quiet():
        model = get_peft_model(
            _Holder(base), LoraConfig(r=r, lora_alpha=alpha, target_modules=["layer"])
        )
    lora = model.base_model.model.layer
    with torch.no_grad():
        lora.lora_A["default"].weight.copy_(a)
        lora.lora_B["default"].weight.copy_(b)
    y = model(x)
    (y * w).sum().backward()
    out = {
        "y": y.detach(),
        "grad_a": lora.lora_A["default"].weight.grad.clone(),
        "grad_b": lora.lora_B["default"].weight.grad.clone(),
    }
    merged = model.merge_and_unload().layer
    out["merged_w"], out["merged_b"] = merged.weight.detach().clone(), merged.bias.detach().clone()
    return out


def peft_trainable(seed: int, targets: list[str], r: int, alpha: float) -> tuple[int, int]:
    """(parameters peft trains, modules it adapts) for ``targets`` on the seeded tiny BERT."""
    from peft import LoraConfig, get_peft_model

    model, _ = tiny_bert(seed)
    with _quiet():
        peft_model = get_peft_model(
            model, LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets))
        )
    adapted = sum(1 for n, _ in peft_model.named_modules() if n.endswith("lora_A"))
    return peft_model.get_nb_trainable_parameters()[0], adapted


# -- the grader's fine-tuning task (parent only) ------------------------------------------------
def _sentences(rng: random.Random, n: int) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    for _ in range(n):
        positive, negated = rng.random() < 0.5, rng.random() < 0.5
        adjective = rng.choice(POS if positive else NEG)
        texts.append(
            rng.choice(TEMPLATES).format(
                n=rng.choice(NOUN), a=adjective, neg="not " if negated else ""
            )
        )
        labels.append(int(positive != negated))
    return texts, labels


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from transformers import AutoTokenizer

    from effkit.workloads.bert.pretrained import encoder_dir

    return AutoTokenizer.from_pretrained(encoder_dir())


def _encode(texts, labels):
    enc = _tokenizer()(
        texts, padding="max_length", truncation=True, max_length=MAX_LEN, return_tensors="pt"
    )
    return enc, torch.tensor(labels)


def _model(seed: int):
    import transformers
    from transformers import AutoModelForSequenceClassification

    from effkit.workloads.bert.pretrained import encoder_dir

    transformers.logging.set_verbosity_error()  # the head is new by design: no load report
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_pretrained(encoder_dir(), num_labels=2)


def state_bytes(optimizer: torch.optim.Optimizer, params) -> int:
    """Gradient + optimizer-state bytes, counted from the tensors themselves after a step."""
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    states = sum(
        v.numel() * v.element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v) and v.dim() > 0
    )
    return grads + states


def finetune(
    seed: int, recipe: dict | None, memory_limit: int | None = None, memory_floor: int = 0
) -> dict:
    """Train the packaged encoder on the grader's task: fully (``recipe=None``) or with peft's LoRA.

    Returns accuracy on held-out sentences, gradient + AdamW state bytes (measured after the first
    step), trainable parameters and seconds. With ``memory_limit`` a run over it stops after that
    first step (``"over": True``), and so does one under ``memory_floor`` (``"under": True``)."""
    from peft import LoraConfig, get_peft_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _model(seed)
        lr = FULL_LR
        if recipe is not None:
            cfg = LoraConfig(
                task_type="SEQ_CLS",
                r=recipe["r"],
                lora_alpha=recipe["lora_alpha"],
                target_modules=recipe["target_modules"],
                lora_dropout=0.0,
                modules_to_save=recipe.get("modules_to_save") or None,
            )
            with _quiet():
                model, lr = get_peft_model(model, cfg), recipe["lr"]
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=lr)
        rng, start, measured = random.Random(seed), time.perf_counter(), None
        model.train()
        for _ in range(STEPS):
            enc, y = _encode(*_sentences(rng, BATCH))
            model(**enc, labels=y).loss.backward()
            optimizer.step()
            if measured is None:
                measured = state_bytes(optimizer, params)
                over = memory_limit is not None and measured > memory_limit
                if over or measured < memory_floor:
                    return {
                        "bytes": measured,
                        "over": over,
                        "under": not over,
                        "trainable": sum(p.numel() for p in params),
                    }
            optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - start
        model.eval()
        enc, y = _encode(*_sentences(random.Random(seed ^ 0x5EED), HELD_OUT))
        with torch.no_grad():
            acc = float((model(**enc).logits.argmax(-1) == y).float().mean())
        return {
            "acc": acc,
            "bytes": measured,
            "over": False,
            "seconds": seconds,
            "trainable": sum(p.numel() for p in params),
        }
    finally:
        torch.set_num_threads(threads)


@functools.lru_cache(maxsize=4)
def full_finetune(seed: int) -> dict:
    """The grader's own full fine-tuning on task ``seed`` (cached: the baseline of every recipe on it)."""
    return finetune(seed, None)
