"""Packing raw strings into encoder inputs, including literal mask tokens."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from keras_bertology.data.corpus import read_corpus, default_corpus_paths
from keras_bertology.data.packing import pack_segments, pack_text, tokenize_keeping_mask
from keras_bertology.tokenizers.sentencepiece import train_sentencepiece
from keras_bertology.tokenizers.wordpiece import train_wordpiece
from keras_bertology.models.xlnet.packing import pack_segments as pack_xlnet_segments


@pytest.fixture(scope="module", params=["wordpiece", "sentencepiece"])
def tokenizer(request):
    sentences = [s for doc in read_corpus(default_corpus_paths()[:2]) for s in doc]
    if request.param == "wordpiece":
        return train_wordpiece(sentences, 800)
    return train_sentencepiece(sentences, 800)


def _ids(tokenizer, text):
    return tokenizer.tokenize(tf.constant([text]))[0].numpy().tolist()


def test_literal_mask_token_becomes_the_mask_id(tokenizer):
    mask = tokenizer.vocabulary[tokenizer.mask_id]
    texts = [f"To be, or {mask} to be", f"{mask} is the question", "no mask here", f"{mask}{mask}"]
    got = tokenize_keeping_mask(tokenizer, tf.constant(texts)).to_list()
    m = tokenizer.mask_id
    assert got[0] == _ids(tokenizer, "To be, or ") + [m] + _ids(tokenizer, " to be")
    assert got[1] == [m] + _ids(tokenizer, " is the question")
    assert got[2] == _ids(tokenizer, "no mask here")
    assert got[3] == [m, m]


def test_pairs_are_packed_trimmed_and_padded(tokenizer):
    long_text = " ".join(["wherefore art thou"] * 40)
    packed = pack_text(tokenizer, 24, tf.constant([long_text, "short"]), tf.constant(["second", long_text]))
    ids = packed["token_ids"].numpy()
    segments = packed["segment_ids"].numpy()
    mask = packed["padding_mask"].numpy()
    assert ids.shape == (2, 24) and ids.dtype == np.int32
    for row in range(2):
        real = ids[row][mask[row] == 1]
        assert real[0] == tokenizer.cls_id and real[-1] == tokenizer.sep_id
        assert list(real).count(tokenizer.sep_id) == 2
        assert set(segments[row][mask[row] == 1]) == {0, 1}
    # The short segment is kept whole; the long one is cut to fit.
    assert mask[0].sum() == 24 and _ids(tokenizer, "second")[0] in ids[0]


def _trimmed_by_tensorflow_text(segments, budget):
    """The reference trimming: tensorflow_text's WaterfallTrimmer (one segment), ShrinkLongestTrimmer (two)."""
    trimmer = tf_text.ShrinkLongestTrimmer if len(segments) > 1 else tf_text.WaterfallTrimmer
    return trimmer(budget).trim(segments)


def _random_segments(rng, rows, count):
    """`count` ragged [rows, *] segments of random ids, lengths 0-24 (empty rows included)."""
    return [tf.RaggedTensor.from_row_lengths(tf.constant(rng.integers(5, 100, total), tf.int32), lengths)
            for lengths in (rng.integers(0, 25, rows) for _ in range(count)) for total in [int(lengths.sum())]]


def test_segments_are_trimmed_and_laid_out_as_tensorflow_text_does():
    """BERT's layout against tensorflow_text's trimmers, combine_segments and pad_model_inputs; XLNet's
    against the same trimming laid out by hand (A <sep> B <sep> <cls>, padded on the left)."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        rows, seq_len, count = int(rng.integers(1, 6)), int(rng.integers(8, 30)), int(rng.integers(1, 3))
        segments = _random_segments(rng, rows, count)
        cls_id, sep_id, pad_id = (2, 3, 0) if rng.random() < 0.5 else (-1, -1, -1)  # ids, or a label follower
        trimmed = _trimmed_by_tensorflow_text(segments, seq_len - count - 1)
        ids, segment_ids = tf_text.combine_segments(trimmed, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
        ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_len, pad_value=pad_id)
        segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length=seq_len, pad_value=0)
        bert = pack_segments(segments, seq_len, cls_id, sep_id, pad_id)
        for name, expected in (("token_ids", ids), ("segment_ids", segment_ids), ("padding_mask", mask)):
            assert bert[name].dtype == tf.int32 and bert[name].shape == (rows, seq_len)
            np.testing.assert_array_equal(bert[name].numpy(), expected.numpy(), err_msg=name)

        xlnet = pack_xlnet_segments(segments, seq_len, cls_id, sep_id, pad_id)
        for row in range(rows):
            tokens, kinds = [], []
            for index, segment in enumerate(trimmed):
                kept = segment[row].numpy().tolist()
                tokens += kept + [sep_id]
                kinds += [index] * (len(kept) + 1)
            tokens.append(cls_id)
            kinds.append(2)
            padding = seq_len - len(tokens)
            np.testing.assert_array_equal(xlnet["token_ids"][row], [pad_id] * padding + tokens)
            np.testing.assert_array_equal(xlnet["segment_ids"][row], [3] * padding + kinds)
            np.testing.assert_array_equal(xlnet["padding_mask"][row], [0] * padding + [1] * len(tokens))
