"""The two BERT-on-SST-2 training recipes behind one ``Trainer``, and the pluggable train step.

``build("naive" | "optimized", profile)`` returns a :class:`BertTrainer`. naive: library defaults (fp32,
tokenizer in 2 DataLoader workers, rows padded to 128, batch 32, plain AdamW). optimized: tokenized once,
length-bucketed batches padded to their longest row (rounded up to 8 on a GPU only), bf16 where native, a
larger batch with sqrt LR scaling, fused AdamW. Hooks (``precision=``, ``train_step=``...) change one part for a lesson.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import torch

from effkit.amp import AmpPolicy, choose_precision
from effkit.measure import train_flops
from effkit.schedules import one_cycle, scale_lr
from effkit.seed import seed_everything
from effkit.workloads.bert import batching
from effkit.workloads.bert.data import load_sst2
from effkit.workloads.bert.pretrained import resolve_encoder
from effkit.workloads.bert.profiles import BertProfile, get_profile, prepare_data
from effkit.workloads.bert.tokenizer import load_pretrained_tokenizer, trained_wordpiece
from effkit.workloads.bert.trainer import MAX_GRAD_NORM, BertTrainer, default_train_step
from effkit.workloads.common import check_build_args

RECIPES = ("naive", "optimized")
HOOKS = (
    "precision",
    "train_step",
    "batch_size",
    "lr",
    "epochs",
    "max_train_samples",
    "stop_at_target",
    "eval_split",
    "compile",
    "model",
    "pad_multiple",
)


def _make_model(spec: BertProfile, train_texts: list[str], attn: str | None, model_name=None):
    """(model, tokenizer, note, lr, target): pretrained when available, else from scratch.

    ``model_name`` overrides the profile's first choice (a folder, a hub name, "packaged" or
    "scratch"; see :func:`effkit.workloads.bert.pretrained.resolve_encoder`). ``attn`` None
    leaves the attention implementation to the library's default."""
    from transformers import BertConfig, BertForSequenceClassification
    from transformers.utils import logging as hf_logging

    attn_kw = {} if attn is None else {"attn_implementation": attn}
    wanted = model_name if model_name is not None else spec.pretrained
    choice = resolve_encoder(wanted) if wanted is not None else None
    if choice is not None and choice.pretrained:
        lr, target = spec.lr_and_target(choice.kind)
        tokenizer = load_pretrained_tokenizer(choice.source)
        # "classifier newly initialized" and a loading bar on stderr are expected here, and any
        # stderr in an nbgrader test cell scores 0
        verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            # fp32 master weights whatever the file stores: transformers 5 loads a half-precision
            # checkpoint (the fp16 copy carried to a GPU machine) as fp16 by default, and AdamW
            # updates on fp16 weights lose small steps; autocast gives the speed instead
            model = BertForSequenceClassification.from_pretrained(
                choice.source, num_labels=2, dtype=torch.float32, **attn_kw
            )
        finally:
            hf_logging.set_verbosity(verbosity)
            if bar:
                hf_logging.enable_progress_bar()
        return model, tokenizer, choice.note, lr, target
    if choice is not None:  # a pretrained model was wanted and none exists: say it loudly
        print(
            f"note: {choice.note}; a {spec.layers}-layer x {spec.hidden} BERT with a "
            "WordPiece tokenizer trained on SST-2 instead: expect far lower accuracy.",
            flush=True,
        )
    lr, target = spec.lr_and_target("scratch")
    tokenizer = trained_wordpiece(train_texts, spec.vocab_size)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        intermediate_size=4 * spec.hidden,
        max_position_embeddings=max(spec.max_length, 128),
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        **attn_kw,
    )
    note = "from scratch" if choice is None else f"FROM SCRATCH ({choice.note})"
    return BertForSequenceClassification(config), tokenizer, note, lr, target


def recipe_model(spec: BertProfile, train_texts: list[str]):
    """(model, tokenizer, note): what the recipes train, pretrained where available (lesson 2 times
    the recipe's own tokenizer and step with it, not a stand-in)."""
    model, tokenizer, note, _, _ = _make_model(spec, train_texts, None)
    return model, tokenizer, note


def _adamw(model, lr: float, weight_decay: float, fused: bool) -> torch.optim.AdamW:
    # No weight decay on biases and LayerNorm gains (the usual BERT fine-tuning groups).
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if fused:
        try:  # one kernel for the whole update instead of ~10 per parameter tensor
            return torch.optim.AdamW(groups, lr=lr, fused=True)
        except RuntimeError:  # no fused kernel for this device: fall back to the default
            pass
    return torch.optim.AdamW(groups, lr=lr)


class LoaderStream:
    """Endless batches from a DataLoader, epochs back to back, that can pause its workers.

    ``pause()`` drops the live iterator, which shuts the worker processes down (a benchmark must
    not let them prefetch on the cores another recipe is being timed on); ``resume()`` restarts
    them and waits until their prefetch queue is full, outside any timing. The next epoch starts
    after a pause.
    """

    def __init__(self, loader):
        self.loader, self._it, self._ready = loader, None, []

    def __iter__(self) -> LoaderStream:
        return self

    def __next__(self) -> dict:
        if self._ready:
            return self._ready.pop()
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:  # epochs run back to back
            self._it = iter(self.loader)
            return next(self._it)

    def pause(self) -> None:
        self._it = None

    def resume(self) -> None:
        # Wait until the workers have filled their prefetch queue, as they have in steady state
        # when the model is the bottleneck: a burst must not pay for the workers' start-up.
        if self._it is None and not self._ready:
            depth = max(1, self.loader.num_workers * (self.loader.prefetch_factor or 1))
            self._ready = [next(self) for _ in range(depth)][::-1]  # popped from the end


def _bucketed_stream(
    corpus, batch_size: int, seed: int, pin: bool, multiple: int
) -> Iterator[dict]:
    for epoch in range(2**62):
        rng = np.random.default_rng([seed, epoch])
        for indices in batching.bucket_batches(corpus.lengths, batch_size, rng):
            yield batching.pad_batch(corpus, indices, multiple=multiple, pin=pin)


def default_pad_multiple(device: torch.device) -> int:
    """Widths rounded up to 8 on a GPU in every precision (tile-friendly attention matmuls; not yet
    measured there; Hugging Face's ``run_glue.py`` rounds to 8 only when it trains in fp16), exact
    on a CPU, where lesson 7 and ``benchmarks/bert_pad_multiple_ab.py`` find the rounding only adds
    padding (it triples a bucketed batch's)."""
    return 8 if device.type == "cuda" else 1


def _train_flops_per_sample(model, length: int, vocab: int, device, policy: AmpPolicy) -> float:
    ids = torch.randint(5, vocab, (2, length), device=device)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": torch.zeros(2, dtype=torch.long, device=device),
    }

    def step():
        with policy.autocast():
            loss = model(**batch).loss
        loss.backward()

    flops = train_flops(step) / 2
    model.zero_grad(set_to_none=True)
    return flops


def _training_subset(train, limit: int | None) -> tuple[list[str], list[int]]:
    if not limit or limit >= len(train):
        return train.texts, train.labels
    # A fixed subset (seed 0, not the run's seed) so every recipe and seed sees the same data.
    keep = np.sort(np.random.default_rng(0).permutation(len(train))[:limit])
    return [train.texts[i] for i in keep], [train.labels[i] for i in keep]


def _naive_pipeline(texts, labels, tokenizer, spec: BertProfile, batch_size: int, generator):
    loader = torch.utils.data.DataLoader(
        batching.TextDataset(texts, labels),
        batch_size=batch_size,
        shuffle=True,
        num_workers=spec.naive_workers,
        generator=generator,
        pin_memory=False,
        collate_fn=batching.TokenizeAndPadCollate(tokenizer, spec.max_length),
    )
    info = {
        "tokenization": "in collate_fn, every batch",
        "workers": spec.naive_workers,
        "padding": f"static, max_length={spec.max_length}",
        "bucketing": None,
        "pin_memory": False,
        "mean_padded_length": float(spec.max_length),
    }
    return LoaderStream(loader), len(loader), info


def _optimized_pipeline(
    texts,
    labels,
    tokenizer,
    spec: BertProfile,
    batch_size: int,
    seed: int,
    device: torch.device,
    multiple: int,
):
    corpus = batching.encode_once(tokenizer, texts, labels, spec.max_length)
    pin = device.type == "cuda"
    epoch = batching.bucket_batches(corpus.lengths, batch_size, np.random.default_rng(seed))
    padded = [
        batching.padded_length(int(corpus.lengths[b].max()), multiple) * len(b) for b in epoch
    ]
    info = {
        "tokenization": "once, cached ids",
        "padding": f"dynamic, multiple of {multiple}" if multiple > 1 else "dynamic, exact widths",
        "bucketing": "sorted within 50-batch chunks",
        "workers": 0,
        "pin_memory": pin,
        "mean_padded_length": sum(padded) / len(corpus),
    }
    return _bucketed_stream(corpus, batch_size, seed, pin, multiple), len(epoch), info


def build(
    recipe: str, profile: str, *, data_dir=None, device=None, seed: int = 0, **hooks
) -> BertTrainer:
    """A ready-to-train ``BertTrainer`` for ``recipe`` ("naive"/"optimized") on ``profile``.

    Hooks: ``precision`` ("off" | "bf16" | "fp16" | "auto"; naive defaults to "off", optimized to
    "auto"), ``train_step`` (see :func:`default_train_step`), and overrides of ``batch_size``,
    ``lr`` (used as given, no rescaling), ``epochs``, ``max_train_samples``, ``stop_at_target``,
    ``eval_split``, ``compile`` (torch.compile the training forward; an ablation, off by default),
    ``model`` (the weights to start from: a folder, a hub name, "packaged" or "scratch"; default
    the profile's choice, falling back as :func:`~effkit.workloads.bert.pretrained.resolve_encoder`
    says), ``pad_multiple`` (the optimized recipe's width rounding; default
    :func:`default_pad_multiple`).
    """
    check_build_args("bert", recipe, RECIPES, hooks, HOOKS)
    spec = get_profile(profile)
    optimized = recipe == "optimized"
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    policy = choose_precision(device, hooks.get("precision", "auto" if optimized else "off"))
    eval_split = hooks.get("eval_split", spec.eval_split)
    if eval_split not in ("dev", "test"):
        raise ValueError(f"eval_split must be 'dev' or 'test', got {eval_split!r}")
    # The naive loader forks tokenizer workers; Rust-side threads do not survive a fork.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    splits = load_sst2(prepare_data(profile, data_dir))
    texts, labels = _training_subset(
        splits["train"], hooks.get("max_train_samples", spec.max_train_samples)
    )
    batch_size = hooks.get("batch_size", spec.optimized_batch if optimized else spec.naive_batch)
    epochs = hooks.get("epochs", spec.epochs)
    generator = seed_everything(seed)  # same initial weights for both recipes
    # The naive recipe keeps the library's default attention (what a user gets without asking);
    # the optimized one asks for SDPA explicitly so it never silently falls back.
    attn = "sdpa" if optimized else None
    model, tokenizer, source, base_lr, target = _make_model(
        spec, splits["train"].texts, attn, hooks.get("model")
    )
    model.to(device)
    lr = hooks.get("lr", scale_lr(base_lr, spec.naive_batch, batch_size, rule=spec.lr_rule))
    eval_sets = {
        s: batching.encode_once(tokenizer, splits[s].texts, splits[s].labels, spec.max_length)
        for s in ("dev", "test")
    }
    if optimized:
        multiple = hooks.get("pad_multiple", default_pad_multiple(device))
        if not (isinstance(multiple, int) and multiple >= 1):
            raise ValueError(f"pad_multiple must be a positive int, got {multiple!r}")
        batches, steps_per_epoch, pipeline = _optimized_pipeline(
            texts, labels, tokenizer, spec, batch_size, seed, device, multiple
        )
    else:
        batches, steps_per_epoch, pipeline = _naive_pipeline(
            texts, labels, tokenizer, spec, batch_size, generator
        )
    optimizer = _adamw(model, lr, spec.weight_decay, fused=optimized)
    total_steps = steps_per_epoch * epochs
    scheduler = one_cycle(optimizer, total_steps, max(1, round(spec.warmup_ratio * total_steps)))
    rule = (
        "given"
        if "lr" in hooks
        else f"{spec.lr_rule} rule from {base_lr:g} at batch {spec.naive_batch}"
    )
    settings = dict(
        pipeline,
        profile=profile,
        model=source,
        layers=model.config.num_hidden_layers,
        hidden=model.config.hidden_size,
        vocab=len(tokenizer),
        parameters=sum(p.numel() for p in model.parameters()),
        batch_size=batch_size,
        lr=lr,
        lr_rule=rule,
        warmup_ratio=spec.warmup_ratio,
        attention=model.config._attn_implementation,  # what actually runs, default or not
        fused_adamw=bool(optimizer.defaults.get("fused")),
        max_grad_norm=MAX_GRAD_NORM,
        train_samples=len(texts),
        epochs=epochs,
        eval_split=eval_split,
        eval_rows=len(eval_sets[eval_split]),
        seed=seed,
    )
    trainer = BertTrainer(
        recipe=recipe,
        model=model,
        device=device,
        policy=policy,
        optimizer=optimizer,
        scheduler=scheduler,
        batches=batches,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        target=target,
        stop_at_target=hooks.get("stop_at_target", optimized),
        eval_every=max(1, spec.eval_every_samples // batch_size),
        eval_sets=eval_sets,
        eval_split=eval_split,
        train_step=hooks.get("train_step", default_train_step),
        settings=settings,
    )
    trainer.tokenizer, trainer.train_texts, trainer.train_labels = tokenizer, texts, labels
    if hooks.get("compile"):
        # A dynamic-shape graph covers every width (exact on a CPU, multiples of 8 on a GPU) after
        # a compilation or two; evaluation keeps the eager model (no recompiling for eval mode).
        trainer.train_model = torch.compile(model, dynamic=True)
        trainer.settings["compile"] = "torch.compile(dynamic=True), training only"
    trainer.flops_per_sample = _train_flops_per_sample(
        model, round(pipeline["mean_padded_length"]), len(tokenizer), device, policy
    )
    return trainer
