"""The loss over a tied vocabulary in chunks of positions equals the loss over all the logits at once.

`TokenScoresInChunks` against Keras' sparse cross-entropy and arg-max on `token_embedding(states,
reverse=True)`: per position, and in the gradients of a weighted sum with respect to the states and the
token table, within 1e-6 in float32, for chunks that divide the positions, leave a remainder, exceed them
and hold one position. The tests run on both backends (JAX_TESTS in the Makefile).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers.vocabulary_scores import TokenScoresInChunks

BATCH, LENGTH, WIDTH, VOCAB = 3, 7, 16, 301
RNG = np.random.default_rng(0)
STATES = RNG.normal(size=(BATCH, LENGTH, WIDTH)).astype("float32")
WEIGHTS = RNG.random((BATCH, LENGTH)).astype("float32")


def _table():
    table = keras.layers.ReversibleEmbedding(VOCAB, WIDTH, embeddings_initializer=keras.initializers.RandomNormal(
        stddev=0.5, seed=1))  # wide logits: softmaxes far from uniform
    table.build((None,))
    return table


def _targets(table):
    """Targets where a third of the positions hold the arg-max (accuracy neither 0 nor 1)."""
    targets = RNG.integers(0, VOCAB, (BATCH, LENGTH)).astype("int32")
    best = (STATES @ ops.convert_to_numpy(table.embeddings).T).argmax(axis=-1)
    return np.where(np.arange(LENGTH) % 3 == 0, best, targets).astype("int32")


def _plain_losses(table, states, targets):
    logits = ops.cast(table(states, reverse=True), "float32")
    return keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)


def _gradients(table, losses_of, states):
    """d sum(WEIGHTS * losses) / d (states, token table)."""
    if keras.backend.backend() == "jax":
        import jax

        def total(states, embeddings):
            with keras.StatelessScope(state_mapping=[(table.embeddings, embeddings)]):
                return ops.sum(losses_of(states) * WEIGHTS)

        grads = jax.grad(total, argnums=(0, 1))(states, table.embeddings.value)
        return [np.asarray(g) for g in grads]
    import tensorflow as tf

    states = tf.Variable(states)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(losses_of(states) * WEIGHTS)
    return [g.numpy() for g in tape.gradient(total, [states, table.embeddings.value])]


@pytest.mark.parametrize("chunk_size", [7, 5, 64, 1])
def test_scores_and_gradients_in_chunks_equal_those_of_all_the_logits(chunk_size):
    table = _table()
    targets = _targets(table)
    layer = TokenScoresInChunks(table, chunk_size)
    scores = ops.convert_to_numpy(layer(STATES, targets))
    assert scores.shape == (BATCH, LENGTH, 2)
    np.testing.assert_allclose(scores[..., 0], ops.convert_to_numpy(_plain_losses(table, STATES, targets)),
                               rtol=1e-6, atol=1e-6)
    logits = STATES @ ops.convert_to_numpy(table.embeddings).T
    np.testing.assert_array_equal(scores[..., 1], (logits.argmax(axis=-1) == targets).astype("float32"))
    assert 0 < scores[..., 1].mean() < 1
    chunked = _gradients(table, lambda states: layer(states, targets)[..., 0], STATES)
    plain = _gradients(table, lambda states: _plain_losses(table, states, targets), STATES)
    for ours, theirs in zip(chunked, plain, strict=True):
        assert np.abs(theirs).max() > 1e-3
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_a_chunk_of_no_positions_and_a_soft_capped_table_are_refused():
    with pytest.raises(ValueError, match="chunk_size must be at least 1"):
        TokenScoresInChunks(_table(), 0)
    capped = keras.layers.ReversibleEmbedding(VOCAB, WIDTH, logit_soft_cap=30.0)
    with pytest.raises(ValueError, match="soft cap"):
        TokenScoresInChunks(capped, 8)


def test_the_gradient_in_chunks_keeps_no_tensor_of_every_positions_logits():
    """XLA's memory plan of the gradient (deterministic, read on JAX): scored 16 positions at a time, 1,024
    positions x 4,001 tokens hold less than their float32 logits (16 MB); all at once, more than twice that."""
    if keras.backend.backend() != "jax":
        pytest.skip("XLA's memory analysis is read on the JAX backend (JAX_TESTS)")
    import jax

    positions, vocab = 1024, 4001
    table = keras.layers.ReversibleEmbedding(vocab, WIDTH)
    table.build((None,))
    states = RNG.normal(size=(1, positions, WIDTH)).astype("float32")
    targets = RNG.integers(0, vocab, (1, positions)).astype("int32")
    layer = TokenScoresInChunks(table, 16)

    def temporaries(losses_of):
        def total(states, embeddings):
            with keras.StatelessScope(state_mapping=[(table.embeddings, embeddings)]):
                return ops.sum(losses_of(states))

        compiled = jax.jit(jax.grad(total, argnums=(0, 1))).lower(states, table.embeddings.value).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    logits_bytes = positions * vocab * 4
    assert temporaries(lambda s: layer(s, targets)[..., 0]) < logits_bytes
    assert temporaries(lambda s: _plain_losses(table, s, targets)) > 2 * logits_bytes
