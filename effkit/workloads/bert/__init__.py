"""BERT fine-tuning on SST-2 (GLUE sentiment): a naive and an optimized recipe.

**What it does.** ``build(recipe, profile)`` returns a ``Trainer`` (see
:mod:`effkit.workloads.common`) that trains ``transformers``' ``BertForSequenceClassification`` on
SST-2: pretrained ``bert-base-uncased`` on GPUs where its weights exist, else the packaged
all-MiniLM-L6-v2 (the ``cpu`` profile's choice; :mod:`effkit.workloads.bert.pretrained`), else a
small from-scratch BERT with a WordPiece tokenizer trained on SST-2 (``smoke``, and a loud note
wherever pretrained weights were wanted). ``build(..., model=...)`` picks other weights.
``prepare_data(profile)`` makes sure the data exists (GLUE TSVs from a folder or the hub, or
synthetic ones in the same format for ``smoke``).

**When to use it.** The course's text workload: lessons on padding, bucketing, tokenization,
mixed precision (``build("naive", ..., precision=..., train_step=...)``) and batch-size scaling.

**Expected gain.** On the course's 2-core AMX CPU, ``cpu`` profile: see the numbers in
``benchmarks/results``; most of it comes from dynamic padding (SST-2 averages ~11 tokens, the
naive recipe pads to 128) and bf16.

**Pitfalls.** Compare recipes by time-to-target *and* final accuracy: a larger batch that is faster
per sample but loses accuracy is not a win. The naive recipe's DataLoader workers compete with
the model for cores on small machines; that is part of the baseline on purpose.
"""

from effkit.workloads.bert.data import (
    Sst2Split,
    download_sst2_from_hub,
    load_sst2,
    make_synthetic_sst2,
    read_sst2_tsv,
)
from effkit.workloads.bert.profiles import PROFILES, BertProfile, prepare_data
from effkit.workloads.bert.recipes import HOOKS, RECIPES, build
from effkit.workloads.bert.tokenizer import trained_wordpiece
from effkit.workloads.bert.trainer import MAX_GRAD_NORM, BertTrainer, default_train_step

# Steps between evaluations for each recipe: the same number of *samples* for both.
DEFAULT_EVAL_EVERY = {
    name: {
        "naive": max(1, p.eval_every_samples // p.naive_batch),
        "optimized": max(1, p.eval_every_samples // p.optimized_batch),
    }
    for name, p in PROFILES.items()
}

__all__ = [
    "DEFAULT_EVAL_EVERY",
    "HOOKS",
    "MAX_GRAD_NORM",
    "PROFILES",
    "RECIPES",
    "BertProfile",
    "BertTrainer",
    "Sst2Split",
    "build",
    "default_train_step",
    "download_sst2_from_hub",
    "load_sst2",
    "make_synthetic_sst2",
    "prepare_data",
    "read_sst2_tsv",
    "trained_wordpiece",
]
