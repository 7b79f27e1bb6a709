"""Attention through `keras.ops.dot_product_attention` (the fused kernel's route) equals it written out.

Every kind of softmax attention the families use is run twice on the same
weights and inputs: as it runs at inference (through the backend's
dot_product_attention on JAX; written out on TensorFlow, which has no fused
kernel) and with the probabilities written out step by step, the route
dropout takes. Outputs and input gradients agree to 1e-5 in float32. The
tests run on both backends (JAX_TESTS in the Makefile).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers import MultiHeadSelfAttention
from keras_bertology.layers.dot_product import fused_kernel_route
from keras_bertology.layers.low_rank_attention import LowRankSelfAttention

HIDDEN, HEADS, BATCH, LENGTH = 16, 4, 2, 13
RNG = np.random.default_rng(0)


def _layer(cls=MultiHeadSelfAttention, **options):
    keras.utils.set_random_seed(0)
    layer = cls(HEADS, **options)
    layer.build((None, LENGTH, HIDDEN))
    for variable in layer.weights:  # large weights: softmaxes far from uniform
        variable.assign(RNG.normal(0, 0.5, variable.shape).astype("float32"))
    return layer


def _inputs(length=LENGTH):
    return RNG.normal(size=(BATCH, length, HIDDEN)).astype("float32")


def _padding(length=LENGTH):
    keep = np.ones((BATCH, 1, length), bool)
    keep[1, :, length - 4:] = False
    return keep


def _packed_documents():
    """Two documents in the second row: each token sees only its own document's tokens."""
    document = np.zeros((BATCH, LENGTH), int)
    document[1, 6:] = 1
    return document[:, :, None] == document[:, None, :]


def _kinds():
    """name -> (layer, call keyword arguments) for every kind of softmax attention the families use."""
    memory, stream = _inputs(5), _inputs(7)
    t5_bias = RNG.normal(size=(1, HEADS, LENGTH, LENGTH)).astype("float32")
    content_bias = RNG.normal(size=(HEADS, HIDDEN // HEADS)).astype("float32")
    stream_mask = RNG.random((BATCH, 7, LENGTH)) < 0.6
    stream_mask[..., 0] = True
    return {
        "plain": (_layer(), {}),
        "padded": (_layer(), {"attention_mask": _padding()}),
        "packed documents": (_layer(), {"attention_mask": _packed_documents()}),
        "a row of padding alone": (_layer(), {"attention_mask": _padding() & np.array([True, False])[:, None, None]}),
        "causal": (_layer(causal=True), {"attention_mask": _padding()}),
        "causal with memory": (_layer(causal=True), {"memory": memory}),
        "relative bias tensor (T5)": (_layer(score_scale=1.0, use_bias=False), {"score_terms": (t5_bias,)}),
        "score terms of the heads": (_layer(), {"score_terms": (
            lambda q, k: ops.expand_dims(ops.einsum("nd,bknd->bnk", content_bias, k), 2),)}),
        "query stream": (_layer(), {"queries": stream, "attention_mask": stream_mask}),
        "sliding window, banded": (_layer(window=8), {"attention_mask": _padding()}),
        "sliding window, in blocks": (_layer(window=4), {"attention_mask": _padding()}),
        "sliding window in blocks, packed": (_layer(window=4), {"attention_mask": _packed_documents()}),
        "low rank": (_layer(LowRankSelfAttention, projected_length=5, max_length=LENGTH),
                     {"attention_mask": _padding()}),
    }


KINDS = _kinds()


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of ops.dot_product_attention."""
    count = []
    fused = ops.dot_product_attention

    def counted(*args, **kwargs):
        count.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", counted)
    return count


def _written_out(monkeypatch):
    """Every attention layer writes its probabilities out, as with dropout, applying none."""
    monkeypatch.setattr(MultiHeadSelfAttention, "_probability_dropout", lambda self, training: (lambda probs: probs))


def _gradient(layer, x, kwargs):
    """d sum(output * weights) / d x: a gradient of every output element, each weighted differently."""
    weights = np.random.default_rng(1).normal(size=layer(x, **kwargs).shape).astype("float32")
    if keras.backend.backend() == "jax":
        import jax

        return np.asarray(jax.jit(jax.grad(lambda inputs: ops.sum(layer(inputs, **kwargs) * weights)))(x))
    import tensorflow as tf

    inputs = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        total = tf.reduce_sum(layer(inputs, **kwargs) * weights)
    return tape.gradient(total, inputs).numpy()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_through_the_fused_route_equals_it_written_out(kind, calls, monkeypatch):
    layer, kwargs = KINDS[kind]
    x = _inputs()
    fused, fused_gradient = ops.convert_to_numpy(layer(x, **kwargs)), _gradient(layer, x, kwargs)
    assert bool(calls) == fused_kernel_route(), "the inference route took the other way"
    _written_out(monkeypatch)
    calls.clear()
    written, written_gradient = ops.convert_to_numpy(layer(x, **kwargs)), _gradient(layer, x, kwargs)
    assert not calls
    np.testing.assert_allclose(fused, written, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fused_gradient, written_gradient, rtol=1e-5, atol=1e-5)


def _numpy_attention(layer, queries, answers, keep):
    """Dense attention from the layer's weights in NumPy: softmax(q k / sqrt(D)) v over the kept keys."""
    def project(dense, x):
        return (x @ dense.kernel.numpy() + dense.bias.numpy()).reshape(x.shape[0], x.shape[1], HEADS, -1)

    q, k, v = project(layer.query_dense, queries), project(layer.key_dense, answers), project(layer.value_dense, answers)
    scores = np.where(keep[:, None], np.einsum("bqnd,bknd->bnqk", q, k) / np.sqrt(q.shape[-1]), -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    context = np.einsum("bnqk,bknd->bqnd", probs / probs.sum(-1, keepdims=True), v)
    return context.reshape(queries.shape[0], queries.shape[1], HIDDEN) @ layer.output_dense.kernel.numpy() \
        + layer.output_dense.bias.numpy()


@pytest.mark.parametrize("memory_length", [0, 5])
def test_a_causal_query_sees_the_memory_and_the_positions_up_to_its_own(memory_length):
    """The kernel's causal order is top-left; with a memory before the queries it must shift by its length."""
    layer, x, memory = _layer(causal=True), _inputs(), _inputs(memory_length)
    keys = np.arange(memory_length + LENGTH)
    keep = np.broadcast_to(keys[None, :] <= np.arange(LENGTH)[:, None] + memory_length,
                           (BATCH, LENGTH, memory_length + LENGTH))
    ours = layer(x, memory=memory) if memory_length else layer(x)
    np.testing.assert_allclose(ops.convert_to_numpy(ours),
                               _numpy_attention(layer, x, np.concatenate([memory, x], 1), keep), rtol=1e-5, atol=1e-5)


def test_a_query_that_sees_no_key_attends_to_every_key():
    """Its output is meaningless (a padding row), but hidden scores alone give cuDNN's kernel a NaN gradient."""
    layer, x = _layer(), _inputs()
    hidden = np.zeros((BATCH, 1, LENGTH), bool)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x, attention_mask=hidden)), ops.convert_to_numpy(layer(x)),
                               rtol=1e-5, atol=1e-5)
