"""Rotary positions, sliding windows and per-layer attention patterns: attention options any encoder takes."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers import (
    MultiHeadSelfAttention,
    TransformerEncoderBlock,
    merge_attention_masks,
    same_document_mask,
)
from keras_bertology.layers.attention import band_mask
from keras_bertology.layers.rotary import inverse_frequencies, rotate


def _numpy_rotate(x, positions, base):
    """The rotate-half rotation from its definition: pair k = (x[k], x[k + D/2]) turns by p * base^(-2k/D)."""
    half = x.shape[-1] // 2
    angles = positions[:, :, None, None] * base ** (-2.0 * np.arange(half) / x.shape[-1])
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * np.cos(angles) - second * np.sin(angles),
                           first * np.sin(angles) + second * np.cos(angles)], axis=-1)


def test_rotary_embedding_turns_each_pair_by_its_angle():
    rng = np.random.default_rng(0)
    heads = rng.normal(size=(2, 9, 3, 10)).astype("float32")
    positions = np.stack([np.arange(9), np.arange(9)[::-1] * 7]).astype("int32")
    got = np.asarray(rotate(ops.convert_to_tensor(heads), positions, 333.0))
    np.testing.assert_allclose(got, _numpy_rotate(heads.astype("float64"), positions, 333.0), atol=2e-5)
    np.testing.assert_allclose(inverse_frequencies(10, 333.0), 333.0 ** (-np.arange(0, 10, 2) / 10), rtol=1e-6)
    with pytest.raises(ValueError, match="even head width"):
        inverse_frequencies(7, 10000.0)


def test_rotary_scores_depend_on_the_distance_of_two_positions_only():
    rng = np.random.default_rng(1)
    query, key = rng.normal(size=(2, 1, 1, 1, 16)).astype("float32")
    scores = {}
    for start in (0, 5, 300):
        positions = np.array([[start, start + 4]], "int32")
        q = np.asarray(rotate(ops.convert_to_tensor(query), positions[:, :1], 10000.0))
        k = np.asarray(rotate(ops.convert_to_tensor(key), positions[:, 1:], 10000.0))
        scores[start] = float((q * k).sum())
    assert scores[0] == pytest.approx(scores[5], abs=1e-4) and scores[0] == pytest.approx(scores[300], abs=1e-4)
    moved = np.asarray(rotate(ops.convert_to_tensor(key), np.array([[5]], "int32"), 10000.0))
    assert abs(float((np.asarray(rotate(ops.convert_to_tensor(query), np.array([[0]], "int32"), 10000.0))
                      * moved).sum()) - scores[0]) > 1e-3  # another distance, another score


def test_the_band_holds_the_keys_within_half_the_window_on_each_side():
    band = np.asarray(band_mask(7, 4))
    expected = np.abs(np.arange(7)[:, None] - np.arange(7)[None, :]) <= 2
    assert (band == expected).all() and band[3].sum() == 5
    assert np.asarray(band_mask(7, 5)).sum() == expected.sum()  # an odd window rounds down, as transformers'


# (length, window): banded dense scores up to twice the window, blocks beyond (odd windows and lengths that
# leave a partial last block included).
SHAPES = [(7, 4), (11, 4), (37, 9), (40, 2)]


@pytest.mark.parametrize("rotary_base", [None, 500.0])
@pytest.mark.parametrize("length,window", SHAPES)
@pytest.mark.parametrize("documents", [False, True])
def test_a_windowed_layer_equals_dense_attention_under_the_band_mask(rotary_base, length, window, documents,
                                                                     monkeypatch):
    import keras_bertology.layers.attention as attention

    blocked = []
    original = attention.windowed_attention
    monkeypatch.setattr(attention, "windowed_attention", lambda *args, **kw: blocked.append(1) or original(*args, **kw))
    rng = np.random.default_rng(length)
    x = rng.normal(size=(2, length, 12)).astype("float32")
    padding = np.ones((2, length), "int32")
    padding[1, length - 3:] = 0
    mask = merge_attention_masks(padding)
    if documents:  # a [B, L, L] mask: two documents to a row
        mask = same_document_mask(padding * np.where(np.arange(length) < length // 3, 1, 2))
    windowed = MultiHeadSelfAttention(3, window=window, rotary_base=rotary_base)
    dense = MultiHeadSelfAttention(3, rotary_base=rotary_base)
    windowed.build(x.shape)
    dense.build(x.shape)
    dense.set_weights(windowed.get_weights())
    got = np.asarray(windowed(x, mask))
    expected = np.asarray(dense(x, ops.logical_and(mask, band_mask(length, window))))
    real = padding.astype(bool)
    np.testing.assert_allclose(got[real], expected[real], atol=1e-6)
    assert np.abs(got - np.asarray(dense(x, mask)))[real].max() > 1e-3  # the window changes what it sees
    assert bool(blocked) == (length > 2 * window)


def test_layers_take_the_global_options_every_nth_layer_from_the_first():
    options = dict(window=8, rotary_base=10.0, global_every=3, global_options=dict(window=None, rotary_base=99.0))
    layers = [MultiHeadSelfAttention.options_for_layer(options, index) for index in range(7)]
    assert [layer["window"] for layer in layers] == [None, 8, 8, None, 8, 8, None]
    assert [layer["rotary_base"] for layer in layers] == [99.0, 10.0, 10.0, 99.0, 10.0, 10.0, 99.0]
    assert all("global_every" not in layer for layer in layers)
    block = TransformerEncoderBlock(2, 16, norm_first=True, attention_options=layers[1])
    rebuilt = TransformerEncoderBlock.from_config(block.get_config())
    rebuilt(ops.ones((1, 5, 8)))
    assert (rebuilt.attention.window, rebuilt.attention.rotary_base) == (8, 10.0)


def test_a_first_block_without_attention_norm_feeds_its_input_to_the_attention():
    block = TransformerEncoderBlock(2, 16, norm_first=True, attention_input_norm=False,
                                    norm="unbiased_layer_norm", attention_bias=False, feed_forward_bias=False)
    x = np.random.default_rng(3).normal(size=(1, 5, 8)).astype("float32") * 3
    out = np.asarray(block(x, training=False))
    expected = x + np.asarray(block.attention(x))
    expected = expected + np.asarray(block.output_dense(block.intermediate_dense(block.output_norm(expected))))
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert block.attention_norm is None and len(block.output_norm.weights) == 1  # a scale, no bias
    with pytest.raises(ValueError, match="pre-LN"):
        TransformerEncoderBlock(2, 16, attention_input_norm=False)


@pytest.mark.skipif(keras.config.backend() != "tensorflow", reason="a graph whose length is known only when it "
                                                                     "runs: TensorFlow's served signatures")
@pytest.mark.parametrize("documents", [False, True])
def test_a_served_graph_of_unknown_length_computes_the_window_in_blocks(documents, monkeypatch):
    import tensorflow as tf

    import keras_bertology.layers.attention as attention

    blocked = []
    original = attention.windowed_attention
    monkeypatch.setattr(attention, "windowed_attention", lambda *args, **kw: blocked.append(1) or original(*args, **kw))
    windowed, dense = MultiHeadSelfAttention(3, window=8, rotary_base=100.0), MultiHeadSelfAttention(3, rotary_base=100.0)
    windowed.build((None, None, 12))
    dense.build((None, None, 12))
    dense.set_weights(windowed.get_weights())
    masks = same_document_mask if documents else merge_attention_masks

    @tf.function(input_signature=[tf.TensorSpec([None, None, 12]), tf.TensorSpec([None, None], tf.int32)])
    def served(x, padding):
        return windowed(x, masks(padding))

    for length in (5, 37, 100):  # shorter than the window, a partial last block, several blocks
        rng = np.random.default_rng(length)
        x = rng.normal(size=(2, length, 12)).astype("float32")
        padding = np.ones((2, length), "int32")
        padding[1, length - 3:] = 0
        if documents:
            padding = padding * np.where(np.arange(length) < length // 3, 1, 2)
        got = served(x, padding).numpy()
        expected = np.asarray(dense(x, ops.logical_and(masks(padding), band_mask(length, 8))))
        real = padding > 0
        np.testing.assert_allclose(got[real], expected[real], atol=1e-6)
    assert blocked  # traced once, in blocks
