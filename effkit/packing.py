"""Sequence packing without cross-contamination, for a BERT-style classifier on any attention kernel.

`pack_rows` places sequences into rows of at most ``max_len`` tokens (first-fit decreasing);
`packed_inputs` concatenates them, restarts ``position_ids`` at every sequence and builds a
block-diagonal additive attention mask, so a token attends only to its own sequence (Krell et al.
2021, arXiv:2107.02027); `packed_logits` reads each sequence's own ``[CLS]`` through the model's
pooler and classifier, so a packed batch gives the logits of the sequences run one by one.

A dense block-diagonal mask still computes every row's ``width x width`` attention scores: what
packing saves here is the padding of projections and feed-forward. A variable-length kernel
(flash-attn's ``varlen``, which HF's ``DataCollatorWithFlattening`` feeds through
``position_ids``) also skips the masked-out score blocks; BERT in transformers has no such path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from effkit.length_buckets import padded_width


def pack_rows(lengths: Sequence[int], max_len: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into rows whose lengths sum to <= ``max_len``.

    First-fit decreasing: longest first, each into the first row with room. It is within 22% of
    the fewest rows possible (bin packing's classic bound), simple, and deterministic.
    """
    if any(n > max_len for n in lengths):
        raise ValueError(f"a sequence is longer than max_len={max_len}: truncate it first")
    if any(n < 1 for n in lengths):
        raise ValueError("every sequence needs at least one token")
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(max_len - lengths[i])
    return rows


def packed_share(
    lengths: Sequence[int], batches: Sequence[Sequence[int]], max_len: int, multiple: int = 1
) -> float:
    """Padding share when each batch's sequences are packed (`pack_rows`) into rows padded to the
    longest packed row, rounded up to ``multiple``: what `packed_inputs` computes on."""
    computed = real = 0
    for batch in batches:
        sizes = [int(lengths[i]) for i in batch]
        rows = pack_rows(sizes, max_len)
        computed += len(rows) * padded_width(max(sum(sizes[i] for i in r) for r in rows), multiple)
        real += sum(sizes)
    return 1.0 - real / computed if computed else 0.0


def packed_inputs(
    seqs: Sequence[Sequence[int]], max_len: int, pad_id: int = 0, multiple: int = 1
) -> dict[str, torch.Tensor]:
    """One packed batch of token-id lists: ``input_ids``, ``position_ids``, ``token_type_ids``,
    a ``(rows, 1, width, width)`` additive ``attention_mask`` and ``cls_at`` (row, column) of each
    sequence's first token, in the order of ``seqs``. Rows are padded to the longest packed row
    (rounded up to ``multiple``)."""
    rows = pack_rows([len(s) for s in seqs], max_len)
    width = padded_width(max(sum(len(seqs[i]) for i in row) for row in rows), multiple)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    # segment 0 is the padding at a row's end: it attends to itself only, so no softmax row is
    # empty (an all-masked row would be NaN with -inf) and no real token ever sees it.
    segment = torch.zeros((len(rows), width), dtype=torch.long)
    cls_at = torch.zeros((len(seqs), 2), dtype=torch.long)
    for r, row in enumerate(rows):
        col = 0
        for k, i in enumerate(row, start=1):
            n = len(seqs[i])
            ids[r, col : col + n] = torch.as_tensor(list(seqs[i]), dtype=torch.long)
            pos[r, col : col + n] = torch.arange(n)
            segment[r, col : col + n] = k
            cls_at[i] = torch.tensor([r, col])
            col += n
    same = segment[:, :, None] == segment[:, None, :]
    mask = torch.zeros(same.shape, dtype=torch.float32).masked_fill(
        ~same, torch.finfo(torch.float32).min
    )
    return {
        "input_ids": ids,
        "position_ids": pos,
        "token_type_ids": torch.zeros_like(ids),
        "attention_mask": mask[:, None],
        "cls_at": cls_at,
    }


def packed_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits per packed sequence from a BERT-style ``...ForSequenceClassification`` (a
    ``base_model`` with a ``pooler``, then ``dropout`` and ``classifier``), in the input order.

    The base model's own pooler reads each row's first token only; the pooler is applied again to
    every sequence's ``[CLS]`` position, which is what the unpacked model classifies from."""
    inputs = {k: v for k, v in batch.items() if k != "cls_at"}
    hidden = model.base_model(**inputs).last_hidden_state
    rows, cols = batch["cls_at"].unbind(1)
    pooled = model.base_model.pooler(hidden[rows, cols][:, None, :])
    return model.classifier(model.dropout(pooled))
