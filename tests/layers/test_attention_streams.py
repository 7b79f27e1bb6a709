"""The attention hooks later families build on: memory, a second query stream, added score terms.

Each is checked against the same attention written out in NumPy from the
layer's own weights (drawn large so the softmax is far from uniform).
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers import MultiHeadSelfAttention, TransformerEncoderBlock

HIDDEN, HEADS = 16, 4
HEAD = HIDDEN // HEADS
RNG = np.random.default_rng(0)


def _attention():
    keras.utils.set_random_seed(0)
    layer = MultiHeadSelfAttention(HEADS)
    layer.build((None, None, HIDDEN))
    for variable in layer.weights:
        variable.assign(RNG.normal(0, 0.5, variable.shape).astype("float32"))
    return layer


def _project(dense, x):
    return x @ dense.kernel.numpy() + dense.bias.numpy()


def _heads(x):
    return x.reshape(x.shape[0], x.shape[1], HEADS, HEAD)


def _reference(layer, queries, answers, extra_scores=0.0, keep=None):
    q = _heads(_project(layer.query_dense, queries))
    k = _heads(_project(layer.key_dense, answers))
    v = _heads(_project(layer.value_dense, answers))
    scores = (np.einsum("bqnd,bknd->bnqk", q, k) + extra_scores) / math.sqrt(HEAD)
    if keep is not None:
        scores = np.where(keep[:, None], scores, -1e9)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bnqk,bknd->bqnd", probs, v).reshape(queries.shape[0], queries.shape[1], HIDDEN)
    return _project(layer.output_dense, context)


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_plain_attention_matches_the_reference():
    layer, x = _attention(), RNG.normal(size=(2, 5, HIDDEN)).astype("float32")
    np.testing.assert_allclose(_numpy(layer(x)), _reference(layer, x, x), atol=1e-4)


def test_memory_is_attended_but_not_updated():
    layer = _attention()
    x, memory = RNG.normal(size=(2, 5, HIDDEN)).astype("float32"), RNG.normal(size=(2, 3, HIDDEN)).astype("float32")
    keep = RNG.random((2, 5, 8)) < 0.7
    keep[..., 3] = True  # every query sees at least one key
    ours = _numpy(layer(x, keep, memory=memory))
    assert ours.shape == (2, 5, HIDDEN)
    np.testing.assert_allclose(ours, _reference(layer, x, np.concatenate([memory, x], 1), keep=keep), atol=1e-4)


def test_query_stream_asks_and_content_stream_answers():
    layer = _attention()
    h, g = RNG.normal(size=(2, 6, HIDDEN)).astype("float32"), RNG.normal(size=(2, 4, HIDDEN)).astype("float32")
    ours = _numpy(layer(h, queries=g))
    assert ours.shape == (2, 4, HIDDEN)
    np.testing.assert_allclose(ours, _reference(layer, g, h), atol=1e-4)


def test_score_terms_are_added_before_scaling():
    layer = _attention()
    x = RNG.normal(size=(2, 5, HIDDEN)).astype("float32")
    bias = RNG.normal(size=(HEADS, HEAD)).astype("float32")
    relative = RNG.normal(size=(2, HEADS, 5, 5)).astype("float32")
    terms = [lambda q, k: ops.einsum("nd,bknd->bnk", bias, k)[:, :, None, :],  # a content bias
             lambda q, k: relative]
    k = _heads(_project(layer.key_dense, x))
    extra = np.einsum("nd,bknd->bnk", bias, k)[:, :, None, :] + relative
    np.testing.assert_allclose(_numpy(layer(x, score_terms=terms)), _reference(layer, x, x, extra), atol=1e-4)
    hidden = np.zeros((2, HEADS, 5, 5), "float32")
    hidden[..., 1] = -1e9
    keep = np.ones((2, 5, 5), bool)
    keep[..., 1] = False
    np.testing.assert_allclose(_numpy(layer(x, score_terms=[lambda q, k: hidden])), _numpy(layer(x, keep)), atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_block_updates_the_query_stream_row_by_row(norm_first):
    block = TransformerEncoderBlock(HEADS, 32, dropout=0.0, attention_dropout=0.0, norm_first=norm_first)
    h, g = RNG.normal(size=(1, 6, HIDDEN)).astype("float32"), RNG.normal(size=(1, 4, HIDDEN)).astype("float32")
    block(h)
    for variable in block.weights:  # large enough that every row visibly moves the others
        variable.assign(RNG.normal(0, 0.5, variable.shape).astype("float32"))
    np.testing.assert_allclose(_numpy(block(h, queries=h)), _numpy(block(h)), atol=1e-5)
    out = _numpy(block(h, queries=g))
    assert out.shape == (1, 4, HIDDEN)
    changed = g.copy()
    changed[0, 2] += RNG.normal(size=HIDDEN)  # not a constant, which LayerNorm would remove
    moved = _numpy(block(h, queries=changed))
    np.testing.assert_allclose(np.delete(moved, 2, axis=1), np.delete(out, 2, axis=1), atol=1e-5)
    assert np.abs(moved[0, 2] - out[0, 2]).max() > 1e-3
    h2 = h.copy()
    h2[0, 5] += RNG.normal(size=HIDDEN)
    assert np.abs(_numpy(block(h2, queries=g)) - out).max() > 1e-3  # every query row reads the content stream
