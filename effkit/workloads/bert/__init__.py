"""BERT fine-tuning on SST-2 (GLUE sentiment): a naive and an optimized recipe.

``build(recipe, profile)`` returns a ``Trainer`` (:mod:`effkit.workloads.common`) for
``BertForSequenceClassification``: bert-base where its weights exist, else the packaged all-MiniLM-L6-v2,
else a small from-scratch BERT (said in every output); ``prepare_data(profile)`` makes sure the data exists.
"""

from effkit.workloads.bert.data import (
    Sst2Split,
    download_sst2_from_hub,
    load_sst2,
    make_synthetic_sst2,
    read_sst2_tsv,
)
from effkit.workloads.bert.profiles import PROFILES, BertProfile, prepare_data
from effkit.workloads.bert.recipes import HOOKS, RECIPES, build, recipe_model
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
    "recipe_model",
    "trained_wordpiece",
]
