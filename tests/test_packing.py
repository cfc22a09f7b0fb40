"""effkit.packing: rows within the length, every sequence once, and no attention across sequences."""

import pytest
import torch

from effkit.packing import pack_rows, packed_inputs, packed_logits, packed_share


def test_rows_hold_every_sequence_once_within_the_length():
    lengths = [9, 3, 14, 7, 7, 2, 16, 5, 1, 11]
    rows = pack_rows(lengths, 16)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 16 for row in rows)
    # 75 tokens need at least 5 rows of 16; first-fit decreasing finds 5 here
    assert len(rows) == 5


def test_packed_share_counts_the_rows_it_computes():
    lengths = [9, 3, 14, 7, 7, 2, 16, 5, 1, 11]
    # one batch of all ten: 5 rows of width 16 hold 75 real tokens
    assert packed_share(lengths, [range(10)], 16) == pytest.approx(1 - 75 / 80)
    batch = packed_inputs([[1] * n for n in lengths], max_len=16)
    assert batch["input_ids"].numel() == 80  # what packed_inputs computes on is what it counts
    # rounding a 3-token row up to 8 pads 5 of 8
    assert packed_share([3], [[0]], 16, multiple=8) == pytest.approx(5 / 8)


def test_a_sequence_longer_than_a_row_is_refused():
    with pytest.raises(ValueError, match="longer than max_len"):
        pack_rows([3, 20], 16)


def test_positions_restart_and_the_mask_is_block_diagonal():
    batch = packed_inputs([[5, 6, 7], [8, 9], [10, 11, 12, 13]], max_len=8, multiple=8)
    assert batch["input_ids"].shape == (2, 8)
    for (r, c), seq in zip(
        batch["cls_at"].tolist(), [[5, 6, 7], [8, 9], [10, 11, 12, 13]], strict=True
    ):
        n = len(seq)
        assert batch["input_ids"][r, c : c + n].tolist() == seq
        assert batch["position_ids"][r, c : c + n].tolist() == list(range(n))
    seen = batch["attention_mask"][:, 0] == 0  # True: may attend
    r, c = batch["cls_at"][0].tolist()
    assert seen[r, c].sum() == 3  # the first sequence's [CLS] sees its own 3 tokens only
    assert seen.any(-1).all(), "every query, padding included, attends to something"


def test_packed_logits_equal_each_sequence_alone(tiny_bert_config):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = tiny_bert_config()
    config.initializer_range = 0.5  # weights large enough that mixing sequences shows in the logits
    model = transformers.BertForSequenceClassification(config).eval()
    seqs = [[2, 7, 9, 3], [2, 11, 3], [2, 5, 6, 8, 12, 3], [2, 4, 3]]
    batch = packed_inputs(seqs, max_len=16)
    assert batch["input_ids"].shape[0] == 1  # all four share one row
    with torch.no_grad():
        packed = packed_logits(model, batch)
        alone = torch.cat([model(input_ids=torch.tensor([s])).logits for s in seqs])
        # the same row with a plain padding mask: sequences attend to each other
        leaky = dict(batch, attention_mask=torch.zeros_like(batch["attention_mask"]))
        crossed = packed_logits(model, leaky)
    assert torch.allclose(packed, alone, atol=1e-5), (packed - alone).abs().max()
    assert (crossed - alone).abs().max() > 1e-2, "the check must see cross-contamination"
