"""Tokenizers for the BERT workload: a pretrained one by name, or a WordPiece trained and cached.

`load_pretrained_tokenizer` loads a hub or local tokenizer; `trained_wordpiece(texts, vocab_size)` trains a
BERT-style WordPiece on the training text for from-scratch models, caches it by a hash of text, size and
``_VERSION`` (bump it when the training code changes), and wraps it as a ``transformers`` fast tokenizer.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from effkit.workloads.bert.data import cache_root

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_VERSION = "wordpiece-v1"  # bump when the training recipe below changes: it is part of the key


def tokenizer_cache_dir(texts: list[str], vocab_size: int, root: str | Path | None = None) -> Path:
    """Where the tokenizer for (texts, vocab_size) is cached."""
    digest = hashlib.sha256(f"{_VERSION}|{vocab_size}|".encode())
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    root = Path(root) if root is not None else cache_root() / "tokenizers"
    return root / f"{_VERSION}-{vocab_size}-{digest.hexdigest()[:16]}"


def _train_wordpiece(texts: list[str], vocab_size: int):
    """Train a ``tokenizers.Tokenizer`` with BERT's normalizer, pre-tokenizer and template."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    # Set after training: the template needs the ids the trainer just assigned.
    tok.post_processor = processors.BertProcessing(
        ("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]"))
    )
    return tok


def _wrap(tok):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def _load_cached(path: Path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def trained_wordpiece(texts: list[str], vocab_size: int, root: str | Path | None = None):
    """A WordPiece tokenizer trained on ``texts``, loaded from the disk cache when present."""
    if not texts:
        raise ValueError("cannot train a tokenizer on an empty list of texts")
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size must be > {len(SPECIAL_TOKENS)}, got {vocab_size}")
    path = tokenizer_cache_dir(texts, vocab_size, root)
    if (path / "tokenizer.json").is_file():
        return _load_cached(path)
    tokenizer = _wrap(_train_wordpiece(texts, vocab_size))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tok-", dir=path.parent))
    tokenizer.save_pretrained(str(tmp))
    try:
        tmp.rename(path)  # atomic: a concurrent build sees either nothing or a whole tokenizer
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def load_pretrained_tokenizer(name_or_path: str):
    """A pretrained tokenizer from the hub or a local folder (raises OSError when unavailable)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)
