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
#    batches (the HF Trainer's `group_by_length`), of a token budget, of a full sort and of packing;
# 3. see why padding is harmless to the result (the attention mask) but not to the cost;
# 4. build packing without cross-contamination (a block-diagonal attention mask) and check that it
#    gives each sentence's own logits;
# 5. time training steps of the pretrained encoder in one interleaved run of five arms — pad to the
#    maximum, dynamic padding in random order, bucketed with and without the rounding to a multiple
#    of 8, and packed — in useful tokens per second, with each arm's padding;
# 6. measure what bucketing costs in accuracy: random order against bucketed, paired over seeds.
#
# **Run time**: about 3 min in `cpu` on a quiet 2-core machine (183 s recorded on an Intel Xeon VM
# with AMX, no GPU, 2026-12-06: the outputs in `docs/recorded/`; one thread, `OMP_NUM_THREADS=1`;
# the summary's last line gives your run's; an earlier version took 937 s on a 2-core AVX2-only AMD
# EPYC shared with other jobs). `smoke` is for tests only.
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
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithFlattening,
)
from transformers.trainer_pt_utils import LengthGroupedSampler

from effkit import lesson, lesson_setup
from effkit.arms import difference_verdict, lesson_arms, paired_difference, rows_half_width
from effkit.length_buckets import bucket_batches, padded_width, padding_share, sorted_padding_share
from effkit.measure import device_name
from effkit.packing import packed_inputs, packed_logits, packed_share
from effkit.workloads.bert.pretrained import resolve_encoder

# %%
STARTED = time.perf_counter()
PROFILE = lesson.profile()  # EFFKIT_PROFILE, else "gpu" with CUDA, else "cpu"
DEVICE = lesson.device()
DEVICE_NAME = device_name(DEVICE)
SIZES = {  # rounds: of the five-arm timing; acc_*: the accuracy comparison (eval_rows: held-out rows, None: all)
    "smoke": dict(layers=2, batch=8, seq=32, burst=1, rounds=6, max_rounds=6, turn_burst=1, pairs=6, acc_seeds=2,
                  acc_steps=2, acc_lr=3e-4, eval_rows=32),
    "cpu": dict(layers=None, batch=32, seq=64, burst=2, rounds=6, max_rounds=9, turn_burst=3, pairs=6, acc_seeds=5,
                acc_steps=20, acc_lr=3e-4, eval_rows=436),
    "gpu": dict(layers=None, batch=64, seq=128, burst=10, rounds=8, max_rounds=16, turn_burst=30, pairs=8,
                acc_seeds=8, acc_steps=300, acc_lr=1e-4, eval_rows=None),
}[PROFILE]
lesson_setup.quiet_transformers()  # the classifier head is new by design: no load report
ENCODER = resolve_encoder()
print(f"profile {PROFILE!r} on {DEVICE_NAME}; encoder: {ENCODER.note}")

tokenizer = AutoTokenizer.from_pretrained(ENCODER.source)
train, held_out = lesson_setup.sst2_splits(PROFILE, say=False)  # its own line below says more
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
# * **Packed** (`effkit.packing`, section 4): the random batches again, their sentences placed
#   end to end in as few rows of `max_length` as fit; rows are padded to the longest packed row
#   (rounded up to 8).
#
# Widths are rounded up to a multiple of 8 (`pad_to_multiple_of=8`, which transformers'
# `examples/pytorch/text-classification/run_glue.py` sets only when it trains in fp16; here it is on
# in every precision, to measure what it costs). NVIDIA's *Matrix Multiplication Background User's
# Guide* gives 8 elements (16 bytes) as the alignment at which fp16 matrix products use tensor cores
# efficiently, and says larger multiples (64 fp16 elements, 128 bytes, on A100) are more efficient
# still: 8 is the minimum, not the best. Which products does the width reach? In the linear layers the token dimension is batch x
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
    f"packed (rows of {SIZES['seq']})": packed_share(lengths, random_batches, SIZES["seq"], multiple=8),
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
# that the lesson's padding shares are those a GPU run rounding to 8 would pay (as `run_glue.py`
# does in fp16), and section 5 times it both ways.
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
# ## 4. Packing without cross-contamination
#
# Bucketing still pads each batch to its longest row (and to 8). **Packing** removes most of the
# padding: place several sentences end to end in one row of `max_length` tokens and keep them
# apart inside attention. Here (`effkit.packing`, following Krell et al. 2021) each step's sentences
# are placed first-fit decreasing into rows of at most `max_length` tokens; `position_ids` restart
# at 0 at every sentence, so each sees the position embeddings it would see alone; the attention
# mask is **block-diagonal** — a `(rows, 1, width, width)` mask that lets a token attend only to
# the tokens of its own sentence; and the classifier reads every sentence's own `[CLS]` position
# (the model's pooler, then its head), so a packed step computes the same loss as a padded one.
#
# What this implementation does *not* do: attention still computes every row's `width x width`
# scores and throws the off-block ones away, so it saves the padding of the projections and the
# feed-forward (most of BERT's FLOPs at these widths), not the off-block attention. A real
# implementation avoids both: Hugging Face's `DataCollatorWithFlattening` concatenates the whole
# batch into **one** row without any padding and returns `position_ids` that restart at every
# sequence (optionally the cumulative sequence lengths, `cu_seq_lens`); FlashAttention-2's
# variable-length kernel (`attn_implementation="flash_attention_2"`, a GPU, a model that supports
# it — mostly decoders such as Llama, Mistral, Qwen) then computes attention within each sequence
# only. Without such a kernel a flattened row would let sequences attend to each other — wrong
# results, not just a different speed. The blog post on this collator reports up to 2x training
# throughput on data of very mixed lengths; Krell et al. (2021) about 2x for BERT pre-training.
#
# First the check that matters: a packed batch must give each sentence the logits it gets in a
# padded batch (which section 3 showed equal to its logits alone), and must differ when sentences
# may attend to each other.

# %%
few = [ids[i] for i in range(B)]
pack = packed_inputs(few, SIZES["seq"], pad_id=tokenizer.pad_token_id, multiple=8)
dyn = tokenizer.pad([{"input_ids": x} for x in few], padding=True, return_tensors="pt")
leaky = dict(pack, attention_mask=torch.zeros_like(pack["attention_mask"]))  # every token sees its whole row
with torch.no_grad():
    packed_diff = float((packed_logits(probe_model, pack) - probe_model(**dyn).logits).abs().max())
    leaky_diff = float((packed_logits(probe_model, leaky) - probe_model(**dyn).logits).abs().max())
print(f"{len(few)} sentences ({sum(map(len, few))} tokens) -> {pack['input_ids'].shape[0]} packed rows of"
      f" {pack['input_ids'].shape[1]} tokens, against a padded batch of {dyn['input_ids'].shape[0]} x"
      f" {dyn['input_ids'].shape[1]}; largest logit difference packed vs padded: {packed_diff:.1e} with the"
      f" block-diagonal mask, {leaky_diff:.1e} when sentences may attend to each other")
flat = DataCollatorWithFlattening()([{"input_ids": ids[i]} for i in range(3)])
print("HF's DataCollatorWithFlattening: lengths", [len(ids[i]) for i in range(3)], "-> one row of",
      flat["input_ids"].shape[1], "tokens, position_ids", flat["position_ids"][0].tolist())

# %% [markdown]
# ## 5. What each buys: five arms, one interleaved run
#
# Every arm trains on the same number of sentences per step (the batch, `B`), with the same
# pretrained encoder, AdamW and lr 5e-5:
#
# | arm | order of the sentences | each step's rectangle |
# |---|---|---|
# | pad to max | random | `B` rows x `max_length` — what people write first |
# | dynamic | random (the same batches as pad to max) | `B` rows x the batch's longest row |
# | bucketed | `bucket_batches` (length-grouped, like `group_by_length`) | `B` rows x the batch's longest row |
# | packed | random (the same batches again) | as few rows of `max_length` as hold them |
#
# Bucketed runs twice: widths rounded up to a multiple of 8 (`/8`) and not (`exact`) — the rounding
# is a factor of its own, measured here rather than assumed, on the arm where it matters most:
# rounding a bucketed batch of 9-token rows up to 16 makes 7 of every 16 tokens padding, while
# rounding a random batch 50 wide up to 56 adds 6 of 56.
#
# **How it is timed.** One model and one optimizer serve every arm (a step's cost does not depend
# on the weights' values, and five copies would crowd a laptop's memory). Each arm runs a burst of
# steps once per round, in the order A B C D E, then E D C B A, ... (`effkit.arms.lesson_arms`):
# a machine that speeds up or slows down during the run hits every arm alike. One warm-up round is
# discarded. Each arm's figure is **useful tokens per second** — real tokens, padding not counted —
# so that arms that see different sentences (bucketed) or different numbers of rows (packed)
# compare fairly. Every ratio below is the median of per-round ratios from this one run, with an
# order-statistic interval whose real coverage is printed; each verdict says only what its interval
# supports (`effkit.lesson.lesson_verdict`).
#
# **Predict.** How many times the useful tokens per second of pad to max will the bucketed arm
# (`/8`) train at?

# %%
GUESS_SPEEDUP = None  # your guess, e.g. 2.0


# %%
def collate(rows, width=None, multiple=8):
    """Rows padded to ``width`` (pad to max), else to their longest, rounded up to ``multiple``."""
    features = [{"input_ids": ids[i]} for i in rows]
    if width:
        enc = tokenizer.pad(features, padding="max_length", max_length=width, return_tensors="pt")
    else:
        enc = tokenizer.pad(features, padding=True, pad_to_multiple_of=multiple if multiple > 1 else None,
                            return_tensors="pt")
    labels = torch.tensor([train.labels[i] for i in rows])
    return {k: v.to(DEVICE) for k, v in enc.items()}, labels.to(DEVICE)


def loss_and_width(model, rows, how):
    """(loss, computed tokens) of one batch; ``how``: "max", "packed" or the multiple (8 or 1)."""
    if how == "packed":
        pack = packed_inputs([ids[i] for i in rows], SIZES["seq"], pad_id=tokenizer.pad_token_id, multiple=8)
        labels = torch.tensor([train.labels[i] for i in rows], device=DEVICE)
        logits = packed_logits(model, {k: v.to(DEVICE) for k, v in pack.items()})
        return F.cross_entropy(logits, labels), pack["input_ids"].numel()
    enc, labels = collate(rows, width=SIZES["seq"] if how == "max" else None, multiple=1 if how == "max" else how)
    return model(**enc, labels=labels).loss, enc["input_ids"].numel()


def epochs(sampler):
    for epoch in range(10_000):
        yield from sampler(epoch)


def random_sampler(seed):
    def draw(epoch):
        order = np.random.default_rng([seed, epoch, 1]).permutation(len(lengths))
        return [order[i:i + B].tolist() for i in range(0, len(order), B)]
    return draw


def bucketed_sampler(seed, **kwargs):
    return lambda epoch: bucket_batches(lengths, seed=seed, epoch=epoch, **(kwargs or {"batch_size": B}))


def new_model(seed):
    torch.manual_seed(seed)  # the same new classifier head for a given seed
    return AutoModelForSequenceClassification.from_pretrained(ENCODER.source, num_labels=2, **extra).to(DEVICE)


shared = new_model(0).train()
shared_opt = torch.optim.AdamW(shared.parameters(), lr=5e-5)
tally = {}  # arm -> [real tokens, computed tokens] over all its bursts


def burst(arm, sampler, how, steps=SIZES["burst"]):
    """One burst of training steps of ``arm`` on the shared model; returns the useful tokens."""
    feed = epochs(sampler)

    def run():
        useful = 0
        for _ in range(steps):
            rows = next(feed)
            loss, computed = loss_and_width(shared, rows, how)
            loss.backward()
            shared_opt.step()
            shared_opt.zero_grad(set_to_none=True)
            real = int(lengths[rows].sum())
            useful += real
            counts = tally.setdefault(arm, [0, 0])
            counts[0], counts[1] = counts[0] + real, counts[1] + computed
        return useful
    return run


PAD, DYN, BUC, BUC1, PACK = (f"pad to max ({SIZES['seq']})", "dynamic, /8", "bucketed, /8", "bucketed, exact",
                             "packed")
arms = {PAD: burst(PAD, random_sampler(1), "max"), DYN: burst(DYN, random_sampler(1), 8),
        BUC: burst(BUC, bucketed_sampler(0), 8), BUC1: burst(BUC1, bucketed_sampler(0), 1),
        PACK: burst(PACK, random_sampler(1), "packed")}
comparisons = [(PAD, DYN), (DYN, BUC), (PAD, BUC), (BUC, PACK), (BUC, BUC1)]
run = lesson_arms(f"training, batches of {B}", arms, comparisons, rounds=SIZES["rounds"],
                  max_rounds=SIZES["max_rounds"], settle=comparisons[:3], unit="useful tokens/s", dev=DEVICE)
pad_of = {arm: 1 - real / computed for arm, (real, computed) in tally.items()}
print("padding share over each arm's steps in this run: " + "; ".join(f"{arm} {share:.1%}" for arm, share in pad_of.items()))
lesson.check_guess(GUESS_SPEEDUP, run.versus(PAD, BUC).ratio, "bucketed / pad-to-max, useful tokens per second",
                   "{:.2f}x")
computed_ratio = (1 - pad_of[BUC]) / (1 - pad_of[PAD])  # computed tokens per useful one, pad to max / bucketed
print(f"pad to max computed {computed_ratio:.1f}x the tokens per useful token that bucketing did")

# %%
fig, (ax_speed, ax_pad) = plt.subplots(1, 2, figsize=(12, 3.6), gridspec_kw={"width_ratios": [3, 2]})
lesson.plot_ab({arm.replace(", ", "\n"): run.versus(PAD, arm) for arm in arms if arm != PAD},
               f"Useful tokens/s vs {PAD}, one interleaved run\n({DEVICE_NAME}, {PROFILE} profile)", ax=ax_speed)
ax_pad.barh(list(pad_of)[::-1], [100 * s for s in list(pad_of.values())[::-1]], color="tab:gray")
ax_pad.set(xlabel="padding share of the timed steps (%)", title="What each arm computed on padding")
plt.tight_layout()
plt.show()

# %% [markdown]
# Read the verdicts pair by pair: pad to max → dynamic is what dynamic padding alone buys (the same
# batches, narrower rectangles); dynamic → bucketed is what grouping by length adds on top; bucketed
# → packed what packing adds. Set each speed-up beside the ratio of computed tokens printed above:
# costs that do not scale with the width (the optimizer step over 22.7 M parameters, the classifier
# head, Python) pull a speed-up below that ratio; attention, whose cost grows with the width
# squared, pushes it above. Packing computes full `max_length`-wide rows, so its attention costs
# more per useful token than a bucketed batch of short rows does, and this implementation computes
# the masked-out blocks too: whether it still beats bucketing on this machine is the verdict's to
# say, not the padding share's. The rounding to 8 has no tensor cores to feed on a CPU, so what it
# can change here is the padding it adds (the `/8` vs `exact` verdicts); on a GPU it is the
# trade-off the section 2 text describes. effkit's optimized BERT recipe pads exact widths on a CPU,
# where `benchmarks/bert_pad_multiple_ab.py` timed the recipe itself: exact widths 1.13x faster than
# rounded to 8, interval 1.09-1.16 (a 2-core Intel Xeon, one run, `benchmarks/results/bert-pad-multiple-ab-xeon-amx-2c.json`).
# On a GPU it rounds to 8 in every precision, which nobody has timed here yet
# (`default_pad_multiple` in `effkit/workloads/bert/recipes.py` says so); Hugging Face's
# `run_glue.py` rounds to 8 only when it trains in fp16 (section 2).

# %% [markdown]
# ## 6. What bucketing costs: accuracy, random order vs bucketed
#
# Batches of similar length are not i.i.d. draws: short reviews train together, and the gradient
# noise changes. Shuffling before grouping, sorting only within mega-batches and shuffling the batch
# order keep most of the randomness; whether accuracy moves is measured here. For each seed, two
# fine-tuning runs start from the same weights and the same new classifier head and take the same
# number of steps of `B` sentences, on the same pool of sentences drawn for that seed (each seen
# once): one cuts the pool into random batches, the other buckets it with `bucket_batches`. Both
# **pack** their batches (section 4: packing changes what a step costs, not what it computes), so
# the only difference left between them is which sentences share a step (and the step order); and
# packed, a random batch costs far less than padded (section 5 says how much), which is what lets
# this fit the `cpu` budget. AdamW at lr 3e-4 in `cpu` (six times the timing's 5e-5: runs this
# short must learn something), 1e-4 in `gpu`. Both runs of a seed are scored on the same held-out
# rows of GLUE's SST-2 dev set (in `cpu` 436 of its 872, drawn once, to save time). The difference
# bucketed − random is paired per seed; its median gets an order-statistic interval with its real
# coverage (`effkit.arms.paired_difference`), and `difference_verdict` words only what it allows.
#
# Two limits, said before the numbers. The runs are short — the share of an epoch they see is
# printed — so this is the accuracy *after the same number of steps*, not at the end of a full
# fine-tuning. And the interval spans the seeds' variation on these rows only: the rows are one
# sample of sentences, an error more seeds do not shrink (printed as `±`: McNemar's paired
# half-width, from the rows on which the two runs of a seed disagree; the largest over seeds).

# %%
held_ids = tokenizer(list(held_out.texts), truncation=True, max_length=SIZES["seq"])["input_ids"]
held = np.random.default_rng(0).permutation(len(held_ids))[: SIZES["eval_rows"] or len(held_ids)]  # fixed rows
held = sorted(held.tolist(), key=lambda i: len(held_ids[i]))
held_labels = torch.tensor([held_out.labels[i] for i in held])


def right_after_steps(order, seed):
    """Per held-out row, whether the model fine-tuned ``acc_steps`` steps in ``order`` gets it right."""
    model = new_model(seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=SIZES["acc_lr"])
    # one pool of sentences per seed, the same for both orders: they differ only in who shares a step
    pool = np.random.default_rng([seed, 1]).permutation(len(lengths))[: SIZES["acc_steps"] * B]
    if order == "random":
        steps = [pool[i:i + B].tolist() for i in range(0, len(pool), B)]
    else:
        steps = [pool[b].tolist() for b in bucket_batches(lengths[pool], batch_size=B, seed=seed)]
    for rows in steps:
        loss, _ = loss_and_width(model, rows, "packed")  # same logits as padded (section 4), less cost
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    predicted = []
    with torch.no_grad():
        for start in range(0, len(held), 64):  # length-sorted rows: little padding to evaluate
            chunk = [{"input_ids": held_ids[i]} for i in held[start:start + 64]]
            enc = tokenizer.pad(chunk, padding=True, return_tensors="pt")
            predicted.append(model(**{k: v.to(DEVICE) for k, v in enc.items()}).logits.argmax(-1).cpu())
    return (torch.cat(predicted) == held_labels).tolist()


right = {"random": [], "bucketed": []}
for seed in tqdm(range(SIZES["acc_seeds"]), desc="fine-tuning, random and bucketed, per seed"):
    for order in right:
        right[order].append(right_after_steps(order, seed))
acc = {order: [sum(r) / len(r) for r in runs] for order, runs in right.items()}
print(f"accuracy on {len(held)} held-out rows after {SIZES['acc_steps']} steps of {B}"
      f" ({SIZES['acc_steps'] * B / len(lengths):.1%} of an epoch; {DEVICE_NAME}):")
for seed in range(SIZES["acc_seeds"]):
    print(f"  seed {seed}: random {acc['random'][seed]:.1%}, bucketed {acc['bucketed'][seed]:.1%}")
acc_diff = paired_difference(acc["random"], acc["bucketed"])
rows_error = max(rows_half_width(a, b) for a, b in zip(right["random"], right["bucketed"], strict=True))
acc_line = difference_verdict(acc_diff, "random order", "bucketed", rows_error=rows_error)
print(acc_line)

# %%
fig, ax = plt.subplots(figsize=(5, 3.4))
for seed in range(SIZES["acc_seeds"]):
    ax.plot([0, 1], [100 * acc["random"][seed], 100 * acc["bucketed"][seed]], "o-", color="tab:blue", alpha=0.6)
ax.set(xticks=[0, 1], xticklabels=["random order", "bucketed"], xlim=(-0.4, 1.4), ylabel="held-out accuracy (%)",
       title=f"Same seed, same steps ({SIZES['acc_steps']}): one line per seed\n({DEVICE_NAME}, {PROFILE} profile)")
plt.show()

# %% [markdown]
# ## Your turn
#
# Try the token budget instead of a row count: choose `MY_BUDGET` (tokens per batch, rows x padded
# width) and compare its training speed with bucketing by rows (both `/8`, on the shared model).
# Start at `budget`, the tokens of a median-width batch of B rows: about the same work per step, so
# a difference comes from the batches' shapes, not their size. Then try `2 * budget` and say how
# much of its gain is only a bigger batch (lesson 4: a bigger batch is not free in accuracy).
# Rows per step now vary, so the ratio is of useful tokens per second; which one would keep GPU
# memory steady? (Bursts are longer here: batch widths vary from step to step, and short bursts
# would leave the interval too wide.)

# %%
MY_BUDGET = budget  # your turn: tokens per batch
mine_ab = lesson.ab(f"training: bucketed by {B} rows vs a budget of {MY_BUDGET} tokens",
                    burst("your turn: rows", bucketed_sampler(0), 8, steps=SIZES["turn_burst"]),
                    burst("your turn: budget", bucketed_sampler(0, max_tokens=MY_BUDGET), 8, steps=SIZES["turn_burst"]),
                    pairs=SIZES["pairs"], a_label=f"{B} rows", b_label=f"{MY_BUDGET} tokens", unit="useful tokens/s",
                    dev=DEVICE)

# %% [markdown]
# ### In your own words
#
# Section 5 timed training on random batches padded to the maximum against bucketed batches.
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
print(f"* training, batches of {B}, useful tokens/s on {DEVICE_NAME} (medians, intervals covering each"
      f" {run.coverage:.0%}): " + "; ".join(f"{arm} {run.median(arm):,.0f} ({run.interval(arm)[0]:,.0f}-"
                                            f"{run.interval(arm)[1]:,.0f}), padding {pad_of[arm]:.0%}" for arm in arms))
for (a, b), said in run.verdicts.items():
    print(f"  - {b} vs {a}: {said}")
print(f"* packing: logits within {packed_diff:.0e} of the padded batch's (sentences attending to each other:"
      f" {leaky_diff:.0e})")
print(f"* your token budget ({MY_BUDGET}): {mine_ab.verdict}")
print(f"* accuracy cost of bucketing after {SIZES['acc_steps']} steps, {SIZES['acc_seeds']} seeds: {acc_line}")
print(f"* this run took {time.perf_counter() - STARTED:.0f} s in profile {PROFILE!r}")

# %% [markdown]
# ### Quiz and exercise
#
# The quiz and the graded exercise are in `exercises/lesson7/`: write a bucketing batch sampler
# (by rows or by a token budget), judged outside your notebook on length distributions the grader
# draws, then timed by the grader on its own encoder against random batches with dynamic padding.
#
# ### References
#
# * Hugging Face Transformers: [Trainer](https://huggingface.co/docs/transformers/main_classes/trainer)
#   ([`TrainingArguments.group_by_length`](https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments.group_by_length):
#   "group together samples of roughly the same length ... Only useful if applying dynamic padding";
#   `LengthGroupedSampler`),
#   [data collators](https://huggingface.co/docs/transformers/main_classes/data_collator)
#   (`DataCollatorWithPadding`, `pad_to_multiple_of`,
#   [`DataCollatorWithFlattening`](https://huggingface.co/docs/transformers/main_classes/data_collator#transformers.DataCollatorWithFlattening):
#   one row per batch, no padding, `position_ids` restarting per sequence), and the blog post
#   *Improving Hugging Face Training Efficiency Through Packing with Flash Attention 2* (2024),
#   [huggingface.co/blog/packing-with-FA2](https://huggingface.co/blog/packing-with-FA2).
# * A. Kundu et al., *Enhancing Training Efficiency Using Packing with Flash Attention*, 2024,
#   [arXiv:2407.09105](https://arxiv.org/abs/2407.09105).
# * M. M. Krell, M. Kosec, S. P. Perez, A. Fitzgibbon, *Efficient Sequence Packing without
#   Cross-contamination: Accelerating Large Language Models without Impacting Performance*, 2021,
#   [arXiv:2107.02027](https://arxiv.org/abs/2107.02027) (packing algorithms, the block-diagonal
#   attention mask, per-sequence position ids and losses that section 4 follows).
# * NVIDIA, *Matrix Multiplication Background User's Guide* (tensor-core tile sizes: dimensions that
#   are multiples of 8 for fp16), [docs.nvidia.com](https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html).
# * PyTorch: [`scaled_dot_product_attention`](https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html).
# * R. Socher et al., *Recursive Deep Models for Semantic Compositionality Over a Sentiment
#   Treebank* (SST-2), 2013.
#
# ### What to try next
#
# * The `gpu` profile times `/8` against `exact` in fp32; wrap the steps in bf16 autocast, where
#   tensor cores run: does the rounding pay for its padding there, at this batch size?
# * Section 6 compares accuracy after the same few steps; compare it at the end of a full
#   fine-tuning (an epoch or more, `gpu` profile), where what bucketing changes may differ.
# * Give the packed arm a variable-length attention: on a GPU, a model with
#   `attn_implementation="flash_attention_2"` fed by `DataCollatorWithFlattening`, and set its
#   speed beside section 5's packing with a dense block-diagonal mask.
