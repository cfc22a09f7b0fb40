# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 7 — Dynamic padding and length bucketing
#
# **Goal:** stop computing on padding. Sentences differ in length; a batch is a rectangle, so every
# row is padded to one width and the model computes on every position of it. We will:
#
# 1. look at SST-2's length distribution, in tokens;
# 2. measure the **padding share** — the share of computed tokens that are padding — of padding to
#    a fixed maximum, of dynamic padding (each batch to its own longest row), of length-grouped
#    batches (the HF Trainer's `group_by_length`), of a token budget, and of a full sort;
# 3. see why padding is harmless to the result (the attention mask) but not to the cost;
# 4. time training steps of the pretrained encoder, padded to the maximum against bucketed
#    (`effkit.lesson` A/B verdicts);
# 5. name the step beyond: packing sequences with per-sequence attention.
#
# **Run time** (measured on a 2-core AMD EPYC VM, no GPU, with other jobs running): about 2 min in
# `cpu` (112 s at load average 2.6; a run with longer *Your turn* bursts took 284 s at 2.9-3.9: the
# A/Bs add pairs while their intervals are wide; the summary's last line gives your run's), 13 s in
# `smoke`.
#
# **Profiles.** `EFFKIT_PROFILE`: `cpu` (default without a GPU), `gpu` (default with one), `smoke`
# (tests only: a 2-layer encoder on synthetic sentences; its numbers show the code runs, not what
# is true). The model is the packaged pretrained encoder (all-MiniLM-L6-v2, BERT 6 x 384;
# `effkit.workloads.bert.pretrained`). The quiz and the graded exercise are in `exercises/lesson7/`.

# %%
# %matplotlib inline
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithFlattening,
)
from transformers.trainer_pt_utils import LengthGroupedSampler

from effkit import lesson, lesson_setup
from effkit.length_buckets import bucket_batches, padded_width, padding_share, sorted_padding_share
from effkit.measure import device_name
from effkit.workloads.bert.pretrained import resolve_encoder

# %%
STARTED = time.perf_counter()
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
SIZES = {
    "smoke": dict(layers=2, batch=8, seq=32, burst=1, turn_burst=1, pairs=6),
    "cpu": dict(layers=None, batch=32, seq=64, burst=2, turn_burst=4, pairs=6),
    "gpu": dict(layers=None, batch=64, seq=128, burst=10, turn_burst=30, pairs=8),
}[PROFILE]
lesson_setup.quiet_transformers()  # the classifier head is new by design: no load report
ENCODER = resolve_encoder()
print(f"profile {PROFILE!r} on {DEVICE_NAME}; encoder: {ENCODER.note}")

tokenizer = AutoTokenizer.from_pretrained(ENCODER.source)
train, _ = lesson_setup.sst2_splits(PROFILE, say=False)  # its own line below says more
# token ids without padding, cut at the profile's maximum length (as a pad-to-max pipeline would)
ids = tokenizer(list(train.texts), truncation=True, max_length=SIZES["seq"])["input_ids"]
lengths = np.array([len(x) for x in ids])
print(f"SST-2: {len(ids):,} training rows ({'synthetic sentences: smoke' if PROFILE == 'smoke' else 'real GLUE data'});"
      f" tokens per row: mean {lengths.mean():.1f}, median {np.median(lengths):.0f}, max {lengths.max()}"
      f" (cut at {SIZES['seq']})")

# %% [markdown]
# ## 1. How long are the sentences?
#
# **Predict.** If every row is padded to the profile's `max_length` (printed above: 64 tokens in the
# `cpu` profile, a common setting for SST-2; 128 in `gpu`), what share of the computed tokens is
# padding, in percent?

# %%
GUESS_PAD_TO_MAX_SHARE = None  # your guess in percent, e.g. 50

# %%
pad_to_max_share = 1 - lengths.sum() / (len(lengths) * SIZES["seq"])
lesson.check_guess(GUESS_PAD_TO_MAX_SHARE, 100 * pad_to_max_share, f"padding share when padding to {SIZES['seq']} (%)",
                   "{:.1f}")
fig, ax = plt.subplots(figsize=(8, 3))
ax.hist(lengths, bins=range(0, SIZES["seq"] + 2), color="tab:blue")
ax.axvline(SIZES["seq"], color="tab:red", ls="--", label=f"pad to max ({SIZES['seq']})")
ax.axvline(np.median(lengths), color="black", ls=":", label=f"median ({np.median(lengths):.0f})")
ax.set(xlabel="tokens per training row (with [CLS] and [SEP])", ylabel="rows",
       title=f"SST-2 train: length distribution ({PROFILE} profile)")
ax.legend()
plt.show()

# %% [markdown]
# ## 2. Padding share, sampler by sampler
#
# * **Pad to max**: every row to `max_length` (`tokenizer(..., padding="max_length")`).
# * **Dynamic padding**: random batches, each padded to its own longest row
#   (`DataCollatorWithPadding`, the Trainer's default collator).
# * **Length-grouped**: transformers' `LengthGroupedSampler` (what `group_by_length=True` uses):
#   random mega-batches of 50 batches, each sorted by length, then sliced.
# * **Bucketed** (`effkit.length_buckets.bucket_batches`): the same idea, plus a shuffled batch
#   order, re-drawn per `(seed, epoch)`.
# * **Token budget**: bucketed, but each batch holds as many rows as fit `rows x width <= budget`:
#   many short rows or a few long ones, so the tokens per step stay steady.
# * **Full sort**: the optimum for padding — and not a sampler: the same batches every epoch.
#
# Widths are rounded up to a multiple of 8 (`pad_to_multiple_of=8`, Hugging Face's usual setting).
# On GPUs, tensor cores compute fp16/bf16 matrix products fastest when every dimension is a multiple
# of 8. Which products does the width reach? In the linear layers the token dimension is batch x
# width, already a multiple of 8 whenever the batch is, and the hidden sizes (384, 1536) are too; the
# width itself is a matrix side only in attention (queries x keys, then x values). So the rounding
# can help attention's matmuls, and it always costs padding: measure it before keeping it.

# %%
B = SIZES["batch"]
budget = B * padded_width(np.median(lengths))  # tokens per batch: a median-width batch of B rows
rng = np.random.default_rng(0)
order = rng.permutation(len(lengths))
random_batches = [order[i:i + B] for i in range(0, len(order), B)]
grouped = list(LengthGroupedSampler(B, lengths=lengths.tolist(), generator=torch.Generator().manual_seed(0)))
grouped_batches = [grouped[i:i + B] for i in range(0, len(grouped), B)]
samplers = {
    f"pad to max ({SIZES['seq']})": pad_to_max_share,
    "dynamic padding (random)": padding_share(lengths, random_batches),
    "length-grouped (HF)": padding_share(lengths, grouped_batches),
    "bucketed (effkit)": padding_share(lengths, bucketed := bucket_batches(lengths, batch_size=B, seed=0)),
    f"token budget ({budget})": padding_share(lengths, bucket_batches(lengths, max_tokens=budget, seed=0)),
    "full sort (optimum)": sorted_padding_share(lengths, B),
}
for name, share in samplers.items():
    print(f"{name:28} {share:6.1%} of computed tokens are padding")
unrounded = padding_share(lengths, bucketed, multiple=1)
print(f"bucketed without the rounding to 8: {unrounded:.1%}, so the rounding adds "
      f"{100 * (samplers['bucketed (effkit)'] - unrounded):.1f} of its {100 * samplers['bucketed (effkit)']:.1f} points")
fig, ax = plt.subplots(figsize=(8, 3))
ax.barh(list(samplers)[::-1], [100 * s for s in list(samplers.values())[::-1]], color="tab:gray")
ax.set(xlabel="padding share (%)", title=f"Padding share, batches of {B} ({PROFILE} profile)")
plt.show()

# %% [markdown]
# How much of what is left under bucketing is the rounding to 8 is the last line above: with a
# median of about 10 tokens on real SST-2 (printed above), a width rounded up to 16 is a lot of
# padding for short rows. A CPU has no tensor cores for the rounding to feed; it is kept here so
# that the lesson's padding shares are those a GPU run with the usual setting would pay.
#
# The picture of it, on the first batches of each sampler (blue: real tokens, grey: padding):

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
shown = (("random batches, dynamic padding", random_batches),
         ("bucketed batches", bucket_batches(lengths, batch_size=B, seed=0)))
for ax, (title, batches) in zip(axes, shown, strict=True):
    y = 0
    for batch in batches[:3]:
        width = padded_width(lengths[batch].max())
        for i in list(batch)[:8]:
            ax.barh(y, lengths[i], color="tab:blue")
            ax.barh(y, width - lengths[i], left=lengths[i], color="lightgray")
            y += 1
        y += 1
    ax.set(title=title, xlabel="tokens (8 rows of each of 3 batches)")
    ax.set_yticks([])
plt.show()

# %% [markdown]
# ## 3. Padding changes the cost, not the result: the attention mask
#
# The tokenizer returns an `attention_mask` (1 for real tokens, 0 for padding). BERT turns it into
# an additive mask of large negative numbers on the padded *keys*, so no real token attends to
# padding, and the classifier reads the `[CLS]` position: the logits of a padded row equal the
# unpadded row's. With `attn_implementation="sdpa"` (transformers' default for BERT) attention runs
# in `torch.nn.functional.scaled_dot_product_attention`; a mask is one more input to it, and on a
# GPU it can rule out the fastest (flash) kernel. Either way the padded positions are still
# **computed** — projections, feed-forward, attention over them — and then thrown away.

# %%
torch.manual_seed(0)
extra = {} if SIZES["layers"] is None else {"num_hidden_layers": SIZES["layers"]}
probe_model = AutoModelForSequenceClassification.from_pretrained(ENCODER.source, num_labels=2, **extra).eval()
one = tokenizer([train.texts[0]], return_tensors="pt")
padded = tokenizer([train.texts[0]], padding="max_length", max_length=SIZES["seq"], return_tensors="pt")
with torch.no_grad():
    alone = probe_model(**one).logits
    masked = probe_model(**padded).logits
    unmasked = probe_model(input_ids=padded["input_ids"]).logits  # no mask: padding is attended to
mask_diff, nomask_diff = float((alone - masked).abs().max()), float((alone - unmasked).abs().max())
print(f"attention: {probe_model.config._attn_implementation}; one row of {one['input_ids'].shape[1]} tokens alone vs"
      f" padded to {SIZES['seq']}: largest logit difference {mask_diff:.1e} with the mask, {nomask_diff:.1e} without")

# %% [markdown]
# ## 4. What it buys: training steps, padded to the maximum vs bucketed
#
# Both arms fine-tune the same pretrained encoder (AdamW, lr 5e-5) on the same number of rows per
# step: A on random batches padded to `max_length`, B on bucketed batches padded to their own
# longest row (rounded to 8). Bursts of steps are interleaved and timed by `effkit.lesson.ab`.
#
# **Predict.** How much faster (samples per second) will the bucketed arm train?

# %%
GUESS_SPEEDUP = None  # your guess, e.g. 2.0


# %%
def collate(rows, pad_to_max):
    features = [{"input_ids": ids[i]} for i in rows]
    if pad_to_max:
        enc = tokenizer.pad(features, padding="max_length", max_length=SIZES["seq"], return_tensors="pt")
    else:
        enc = tokenizer.pad(features, padding=True, pad_to_multiple_of=8, return_tensors="pt")
    labels = torch.tensor([train.labels[i] for i in rows])
    return {k: v.to(DEVICE) for k, v in enc.items()}, labels.to(DEVICE)


def epochs(sampler):
    for epoch in range(10_000):
        yield from sampler(epoch)


def random_sampler(epoch):
    order = np.random.default_rng([1, epoch]).permutation(len(lengths))
    return [order[i:i + B].tolist() for i in range(0, len(order), B)]


def trainer(sampler, pad_to_max, seed=0, steps=SIZES["burst"]):
    """A burst of training steps on its own copy of the encoder; returns the rows it saw."""
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(ENCODER.source, num_labels=2, **extra).to(DEVICE)
    opt, feed = torch.optim.AdamW(model.parameters(), lr=5e-5), epochs(sampler)
    model.train()

    def run():
        rows = 0
        for _ in range(steps):
            batch = next(feed)
            enc, y = collate(batch, pad_to_max)
            model(**enc, labels=y).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            rows += len(batch)
        return rows
    return run


bucketed_sampler = lambda epoch: bucket_batches(lengths, batch_size=B, seed=0, epoch=epoch)  # noqa: E731
step_ab = lesson.ab("training: pad to max vs bucketed", trainer(random_sampler, True), trainer(bucketed_sampler, False),
                    pairs=SIZES["pairs"], a_label="pad to max", b_label="bucketed", dev=DEVICE)
lesson.check_guess(GUESS_SPEEDUP, step_ab.ratio, "bucketed / pad-to-max training speed", "{:.2f}x")
token_ratio = (1 - samplers["bucketed (effkit)"]) / (1 - pad_to_max_share)  # computed tokens, pad-to-max / bucketed
print(f"pad to max computes {token_ratio:.1f}x the tokens bucketing does (same real tokens)")

# %% [markdown]
# Set the speed-up beside the ratio of computed tokens. Costs that do not scale with the width (the
# optimizer step over 22.7 M parameters, the classifier head, Python) pull the speed-up below that
# ratio; attention, whose cost grows with the width squared, pushes it above.
#
# **What bucketing costs.** Batches of similar length are not i.i.d. draws: short reviews train
# together, and the gradient noise changes. Shuffling before grouping, sorting only within
# mega-batches and shuffling the batch order keeps most of the randomness; whether accuracy moves
# is a question for several seeds of full fine-tuning runs (Δacc with an interval). **Not measured
# here**: on this 2-core CPU one fine-tuning run to a useful accuracy takes minutes, several seeds
# per arm do not fit the lesson's 5-minute budget. The graded exercise measures it on the grader's
# own small task instead (accuracy with your batches within 3 points of random batches').

# %% [markdown]
# ## 5. The step beyond: packing
#
# Bucketing still pads to the longest row of each batch (and to 8). **Packing** removes padding
# entirely: concatenate sequences into one long row and keep them apart inside attention.
# `DataCollatorWithFlattening` does the concatenation and resets `position_ids` at every sequence
# start; a model whose attention reads those boundaries (FlashAttention-2's variable-length kernel,
# `attn_implementation="flash_attention_2"`, on a GPU) then attends within each sequence only.
# Without such a kernel, a flattened row would let sequences attend to each other — wrong results,
# not just a different speed. The Hugging Face blog post on this collator lists decoder models
# (Llama, Mistral, Qwen, ...) and reports up to 2x training throughput on data of very mixed lengths;
# Krell et al. (2021) report about 2x for BERT pre-training from packing without cross-contamination.

# %%
flat = DataCollatorWithFlattening()([{"input_ids": ids[i]} for i in range(3)])
print("lengths", [len(ids[i]) for i in range(3)], "-> one row of", flat["input_ids"].shape[1], "tokens;")
print("position_ids restart at each sequence:", flat["position_ids"][0].tolist())

# %% [markdown]
# ## Your turn
#
# Try the token budget instead of a row count: choose `MY_BUDGET` (tokens per batch, rows x padded
# width) and compare its training speed with bucketing by rows. Rows per step now vary, so the
# ratio is of samples per second; which one would keep GPU memory steady? (Bursts are longer here:
# batch widths vary from step to step, and short bursts would leave the interval too wide.)

# %%
MY_BUDGET = 2 * budget  # your turn: tokens per batch
budget_sampler = lambda epoch: bucket_batches(lengths, max_tokens=MY_BUDGET, seed=0, epoch=epoch)  # noqa: E731
mine_ab = lesson.ab(f"training: bucketed by {B} rows vs a budget of {MY_BUDGET} tokens",
                    trainer(bucketed_sampler, False, steps=SIZES["turn_burst"]),
                    trainer(budget_sampler, False, steps=SIZES["turn_burst"]), pairs=SIZES["pairs"],
                    a_label=f"{B} rows", b_label=f"{MY_BUDGET} tokens", dev=DEVICE)

# %% [markdown]
# ### In your own words
#
# Section 4 timed training on random batches padded to the maximum against bucketed batches.
# Explain in 2–3 sentences why bucketing by length reduces the padding the model computes on, why
# that padding costs time even though the attention mask keeps it out of the result, and what
# bucketing costs in randomness.
#
# Write your answer in `ANSWER` and run the cell: it lists which key points your answer mentions —
# a keyword self-check, not a grade.

# %%
ANSWER = """
"""
MENTIONED = lesson.check_answer(ANSWER, lesson_number=7)

# %% [markdown]
# ## Summary

# %% tags=["summary"]
print(lesson.summary_header(7, DEVICE_NAME, f"; encoder: {ENCODER.note}"))
print(f"* SST-2 train ({len(lengths):,} rows): mean {lengths.mean():.1f} tokens, median {np.median(lengths):.0f}")
print("* padding share: " + "; ".join(f"{name} {share:.1%}" for name, share in samplers.items()))
print(f"* attention mask: padded vs alone, logits within {mask_diff:.0e} (without the mask: {nomask_diff:.0e})")
print(f"* training, batches of {B}: {step_ab.verdict} (pad to max computes {token_ratio:.1f}x the tokens)")
print(f"* your token budget ({MY_BUDGET}): {mine_ab.verdict}")
print("* accuracy cost of bucketing (Δacc over seeds): not measured in this lesson (see section 4)")
print(f"* this run took {time.perf_counter() - STARTED:.0f} s in profile {PROFILE!r}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson7/`: write a bucketing batch sampler
# (by rows or by a token budget), judged outside your notebook on length distributions the grader
# draws, then timed by the grader on its own encoder against random batches padded to the maximum.
#
# ### References
#
# * Hugging Face Transformers: [Trainer](https://huggingface.co/docs/transformers/main_classes/trainer)
#   (`group_by_length`, `LengthGroupedSampler`),
#   [data collators](https://huggingface.co/docs/transformers/main_classes/data_collator)
#   (`DataCollatorWithPadding`, `pad_to_multiple_of`, `DataCollatorWithFlattening`), and the blog post
#   *Improving Hugging Face Training Efficiency Through Packing with Flash Attention 2* (2024),
#   [huggingface.co/blog/packing-with-FA2](https://huggingface.co/blog/packing-with-FA2).
# * A. Kundu et al., *Enhancing Training Efficiency Using Packing with Flash Attention*, 2024,
#   [arXiv:2407.09105](https://arxiv.org/abs/2407.09105).
# * M. M. Krell, M. Kosec, S. P. Perez, A. Fitzgibbon, *Efficient Sequence Packing without
#   Cross-contamination: Accelerating Large Language Models without Impacting Performance*, 2021,
#   [arXiv:2107.02027](https://arxiv.org/abs/2107.02027).
# * NVIDIA, *Matrix Multiplication Background User's Guide* (tensor-core tile sizes: dimensions that
#   are multiples of 8 for fp16), [docs.nvidia.com](https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html).
# * PyTorch: [`scaled_dot_product_attention`](https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html).
# * R. Socher et al., *Recursive Deep Models for Semantic Compositionality Over a Sentiment
#   Treebank* (SST-2), 2013.
#
# ### What to try next
#
# * On a GPU, time `pad_to_multiple_of=8` against `None` in bf16 autocast: does the rounding pay for
#   its padding there, at this batch size?
# * Measure Δacc of bucketing against random batches over 5 seeds of full fine-tuning (`gpu` profile).
