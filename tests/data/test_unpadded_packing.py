"""Unpadded packing: several documents to a row, padding only at its tail, and a document computed as if it
were alone in its row (attention and positions never cross documents)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.instances import pack_documents
from keras_bertology.data.static_masking import documents_as_padding_mask
from keras_bertology.layers import document_positions, same_document_mask
from keras_bertology.models.bert.backbone import BertBackbone
from keras_bertology.models.modernbert.backbone import ModernBertBackbone
from keras_bertology.models.modernbert.pretrainer import ModernBertPretrainer

CLS, SEP, PAD = 1, 2, 0
SEQ_LEN = 24


def _documents(seed=0, count=40):
    """Documents of 1 to 4 sentences of 1 to 30 tokens (ids 5..99): many shorter and some longer than a row."""
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, 100, rng.integers(1, 31)).astype("int32") for _ in range(rng.integers(1, 5))]
            for _ in range(count)]


@pytest.fixture(scope="module")
def packed():
    documents = _documents()
    return documents, pack_documents(documents, SEQ_LEN, CLS, SEP, PAD)


def test_rows_hold_every_token_in_order_framed_per_piece_with_padding_only_at_the_tail(packed):
    documents, rows = packed
    tokens, numbers = rows["token_ids"], rows["document_ids"]
    assert tokens.shape == numbers.shape and tokens.shape[1] == SEQ_LEN
    real = numbers > 0
    assert (tokens[~real] == PAD).all() and (tokens[real] != PAD).all()
    assert all(not real[row, first:].any() for row, first in enumerate(real.sum(1)))  # a tail of padding only
    pieces, unpacked = [], []
    for row in range(len(tokens)):
        for number in range(1, numbers[row].max() + 1):
            piece = tokens[row][numbers[row] == number]
            assert piece[0] == CLS and piece[-1] == SEP and len(piece) >= 3
            assert ((numbers[row] == number).nonzero()[0] == np.arange(*(numbers[row] == number).nonzero()[0][[0, -1]]
                                                                      + [0, 1])).all()  # contiguous
            pieces.append(piece)
            unpacked.append(piece[1:-1])
    assert (np.concatenate(unpacked) == np.concatenate([np.concatenate(doc) for doc in documents])).all()
    waste = SEQ_LEN - real.sum(1)[:-1]
    assert (waste < 3).all()  # a row is left only when a token and its frame no longer fit
    assert real.mean() > 0.95


def test_masks_and_positions_stay_within_each_document():
    numbers = np.array([[1, 1, 1, 2, 2, 3, 0, 0]], "int32")
    mask = np.asarray(same_document_mask(numbers))[0]
    expected = (numbers[0][:, None] == numbers[0][None, :]) & (numbers[0][None, :] > 0)
    assert (mask == expected).all()
    assert np.asarray(document_positions(numbers)).tolist() == [[0, 1, 2, 0, 1, 0, 6, 7]]
    assert np.asarray(document_positions(np.array([[1, 1, 1, 0]]))).tolist() == [[0, 1, 2, 3]]  # one document


def _weighted(model, seed):
    """Random weights large enough that every layer bends (matrices of std 0.15 in 16 dimensions, norm
    scales and biases off their starting values)."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(1.0 if weight.ndim == 1 else 0.0, 0.15, weight.shape).astype("float32")
                       for weight in model.get_weights()])
    return model


BACKBONES = {
    "modernbert": lambda: ModernBertBackbone(vocab_size=100, num_layers=3, num_heads=2, hidden_size=16,
                                             intermediate_size=24, local_window=6, global_every=2,
                                             packed_documents=True),
    "roberta": lambda: BertBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=24,
                                    max_positions=SEQ_LEN, num_segments=0, use_pooler=False, dropout=0.0,
                                    attention_dropout=0.0, layer_norm_epsilon=1e-5, packed_documents=True),
}


@pytest.mark.parametrize("family", sorted(BACKBONES))
def test_a_document_packed_with_others_computes_as_alone_in_a_padded_row(packed, family):
    _, rows = packed
    backbone = _weighted(BACKBONES[family](), seed=1)
    tokens, numbers = rows["token_ids"], rows["document_ids"]
    states = np.asarray(backbone({"token_ids": tokens, "padding_mask": numbers})["sequence_output"])
    compared = 0
    for row in range(len(tokens)):
        for number in range(1, numbers[row].max() + 1):
            where = numbers[row] == number
            alone, mask = np.full((1, SEQ_LEN), PAD, "int32"), np.zeros((1, SEQ_LEN), "int32")
            alone[0, :where.sum()], mask[0, :where.sum()] = tokens[row][where], 1
            single = np.asarray(backbone({"token_ids": alone, "padding_mask": mask})["sequence_output"])
            # Within the library's float32 parity bound, 1e-5: the sums run in other orders, by an amount that
            # depends on the processor's vector width (AVX2 alone: 3.3e-6 relative on one of 112 values), while
            # a document reading another's positions moves its states by tenths.
            np.testing.assert_allclose(states[row][where], single[0, :where.sum()], rtol=1e-5, atol=1e-5)
            compared += 1
    assert compared >= 40 and np.abs(states).max() > 1


def test_the_masked_lm_scores_a_documents_positions_as_when_it_is_alone(packed):
    _, rows = packed
    model = _weighted(ModernBertPretrainer(BACKBONES["modernbert"]()), seed=2)
    row = int(np.argmax(rows["document_ids"].max(1)))  # a row of several documents
    tokens, numbers = rows["token_ids"][row:row + 1], rows["document_ids"][row:row + 1]
    where = (numbers[0] == 2).nonzero()[0]
    positions = where[1:-1][None].astype("int32")
    packed_logits = np.asarray(model({"token_ids": tokens, "padding_mask": numbers,
                                      "mask_positions": positions})["mlm"])
    alone = np.full((1, SEQ_LEN), PAD, "int32")
    alone[0, :len(where)] = tokens[0][where]
    alone_logits = np.asarray(model({"token_ids": alone, "padding_mask": (alone != PAD).astype("int32"),
                                     "mask_positions": np.arange(1, len(where) - 1, dtype="int32")[None]})["mlm"])
    assert np.abs(packed_logits - alone_logits).max() <= 1e-5


def test_the_pipeline_feeds_the_numbered_documents_as_the_padding_mask(packed):
    _, rows = packed
    features = documents_as_padding_mask({"token_ids": rows["token_ids"], "padding_mask": rows["token_ids"] != PAD,
                                          "document_ids": rows["document_ids"]})
    assert "document_ids" not in features and (features["padding_mask"] == rows["document_ids"]).all()
    plain = {"token_ids": rows["token_ids"], "padding_mask": rows["token_ids"] != PAD}
    assert documents_as_padding_mask(plain) is plain


def test_static_masks_keep_each_rows_document_numbers_and_feed_them_as_the_mask(packed, tmp_path):
    from keras_bertology.data.pipeline import make_dataset
    from keras_bertology.data.static_masking import write_static_tfrecords

    _, rows = packed
    path = str(tmp_path / "static.tfrecord")
    mask_id = 3

    def masker(features, seed):  # hides the second token of every row
        features = dict(features)
        features["token_ids"] = tf.tensor_scatter_nd_update(
            features["token_ids"], tf.stack([tf.range(tf.shape(features["token_ids"])[0]),
                                             tf.ones_like(features["token_ids"][:, 0])], 1),
            tf.fill([tf.shape(features["token_ids"])[0]], mask_id))
        features["mask_positions"] = tf.ones_like(features["token_ids"][:, :1])
        return features

    write_static_tfrecords(rows, masker, 1, path, verbose=0)
    batch = next(iter(make_dataset(None, len(rows["token_ids"]), static_path=path, shuffle=False, repeat=False)))
    assert "document_ids" not in batch
    np.testing.assert_array_equal(batch["padding_mask"], rows["document_ids"])
    np.testing.assert_array_equal(batch["token_ids"][:, 1], mask_id)
    np.testing.assert_array_equal(batch["token_ids"][:, 2:], rows["token_ids"][:, 2:])


def test_unpadded_packing_is_refused_where_it_cannot_apply():
    from keras_bertology.errors import ConfigError
    from keras_bertology.pretraining.options import PretrainOptions

    with pytest.raises(ConfigError, match="does not apply to --model bert"):
        PretrainOptions(model="bert", preset="bert-tiny", packing="unpadded").validate()
    with pytest.raises(ValueError, match="causal"):
        BertBackbone(vocab_size=10, num_layers=1, num_heads=1, hidden_size=4, intermediate_size=4, causal=True,
                     packed_documents=True)
