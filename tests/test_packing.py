"""Packing raw strings into encoder inputs, including literal mask tokens."""

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.corpus import read_corpus, default_corpus_paths
from keras_bertology.data.packing import pack_text, tokenize_keeping_mask
from keras_bertology.data.tokenizers import train_sentencepiece, train_wordpiece


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
