"""The core every softmax attention shares: softmax(q kᵀ + bias, masked) v.

It goes through `keras.ops.dot_product_attention`, which picks a fused kernel
where the backend has one (cuDNN's flash attention under JAX on a GPU, in
bf16 or fp16), so the [B, N, Lq, Lk] scores are never written to memory
there. Dropout on the probabilities needs them written out, so with dropout
the same sum is computed step by step here, softmax in float32; so is it on
TensorFlow, which has no fused kernel and whose op writes out the same sum
with three more passes over the scores (a SavedModel's and an ONNX export's
graph would carry them).
"""

import keras
from keras import ops

# Score given to hidden keys; the softmax runs in float32, where exp() of it is 0.
MASKED_SCORE = -1e9


def as_score_mask(mask):
    """A [Lq, Lk] or [B, Lq, Lk] mask (1 / True: may attend) as a bool mask for [B, N, Lq, Lk] scores."""
    return _four_axes(ops.expand_dims(ops.cast(mask, "bool"), axis=-3))


def _four_axes(x):
    """`x` with leading axes of size 1 up to four."""
    while len(x.shape) < 4:
        x = ops.expand_dims(x, axis=0)
    return x


def seen_or_all(mask):
    """`mask` where each query that sees no key sees every key: a row of hidden scores only has a
    meaningless output, but cuDNN's fused kernel gives it a NaN gradient, which training spreads."""
    return ops.logical_or(mask, ops.logical_not(ops.any(mask, axis=-1, keepdims=True)))


def attend(query, key, value, bias=None, mask=None, is_causal=False, dropout=None):
    """Attention of already scaled queries over keys and values.

    Args:
        query: [B, Lq, N, D] heads, multiplied by the score scale.
        key, value: [B, Lk, N, D] heads.
        bias: None, or added to the scores, broadcastable to [B, N, Lq, Lk].
        mask: None, or bool broadcastable to [B, N, Lq, Lk] (`as_score_mask`); True: may attend.
        is_causal: query i sees keys 0 .. i only (Lq == Lk, no memory before the queries).
        dropout: None, or a callable applied to the [B, N, Lq, Lk] probabilities: then they are written out
            (as they are on TensorFlow, `fused_kernel_route`).

    Returns:
        [B, Lq, N, D] context. A query that sees no key (a padding position, a block past the text) attends
        to every key instead (`seen_or_all`).
    """
    if mask is not None:
        mask = seen_or_all(mask)
    if dropout is None and fused_kernel_route():
        rows = (ops.shape(query)[1], ops.shape(key)[1])
        return ops.dot_product_attention(query, key, value, bias=_every_row(bias, rows), mask=_every_row(mask, rows),
                                         scale=1.0, is_causal=is_causal)
    scores = ops.cast(ops.einsum("bqnd,bknd->bnqk", query, key), "float32")
    if bias is not None:
        scores = scores + ops.cast(bias, "float32")
    if is_causal:
        order = ops.expand_dims(ops.arange(ops.shape(key)[1]), 0) <= ops.expand_dims(ops.arange(ops.shape(query)[1]), 1)
        mask = order if mask is None else ops.logical_and(mask, order)
    if mask is not None:
        scores = ops.where(mask, scores, MASKED_SCORE)
    probs = ops.cast(ops.softmax(scores, axis=-1), query.dtype)
    return ops.einsum("bnqk,bknd->bqnd", probs if dropout is None else dropout(probs), value)


def fused_kernel_route():
    """Whether attention without dropout goes through `ops.dot_product_attention`: on every backend but
    TensorFlow, where the op is the written-out sum itself."""
    return keras.config.backend() != "tensorflow"


def _every_row(x, rows):
    """`x` ([..., 1 or Lq, 1 or Lk]) broadcast over its last two axes to `rows` (Lq, Lk): cuDNN's kernel takes a
    bias (a mask becomes one) only with a row for every query and a column for every key."""
    if x is None:
        return None
    x = _four_axes(x)
    return ops.broadcast_to(x, (*ops.shape(x)[:2], *rows))
