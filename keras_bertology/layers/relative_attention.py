"""Transformer-XL relative attention as score terms of `MultiHeadSelfAttention`.

Transformer-XL and XLNet score a query i against a key j as

    (q_i + u) k_j  +  rel_shift((q_i + v) W_r R)_ij  [+ (q_i + s) e_{seg(i) != seg(j)}]

with R the sinusoidal encodings of the relative distances, u, v, s learned
biases (r_w_bias, r_r_bias, r_s_bias: per layer, or shared when not untied),
W_r a per-layer projection of R, and e the per-layer pair of segment vectors
(same / different segment). `MultiHeadSelfAttention` already computes q k and
adds `score_terms`; `RelativeAttentionTerms` supplies the other three.
"""

import keras
from keras import ops


def sinusoidal_relative_positions(query_length, key_length, hidden_size, clamp_len=-1, bi_data=False,
                                  batch_size=1):
    """[batch_size, key_length + query_length, hidden_size] encodings of the distances key_length,
    key_length - 1, ..., 1 - query_length (XLNet's bidirectional order).

    `clamp_len` > 0 caps |distance|. With `bi_data` the first half of the batch
    gets the forward distances and the second half the negated ones (the
    backward streams read the text reversed); `batch_size` must then be even.
    """
    distances = ops.arange(key_length, -query_length, -1, dtype="float32")
    frequencies = 1.0 / ops.power(10000.0, ops.arange(0, hidden_size, 2, dtype="float32") / hidden_size)

    def encode(distance):
        if clamp_len > 0:
            distance = ops.clip(distance, -clamp_len, clamp_len)
        angles = ops.expand_dims(distance, -1) * frequencies
        return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)

    forward = ops.expand_dims(encode(distances), 0)
    if not bi_data:
        return ops.broadcast_to(forward, (batch_size, *ops.shape(forward)[1:]))
    half = batch_size // 2
    backward = ops.expand_dims(encode(-distances), 0)
    return ops.concatenate([ops.broadcast_to(forward, (half, *ops.shape(forward)[1:])),
                            ops.broadcast_to(backward, (half, *ops.shape(backward)[1:]))], axis=0)


def rel_shift(scores, key_length):
    """[B, N, Q, Q + K] scores against the distances K ... 1 - Q -> [B, N, Q, K] scores against keys:
    entry (i, j) takes column Q - i + j, the distance from query i (after K - Q memory keys) to key j.

    The reshape trick of Transformer-XL: no gather, just a view that drops one row.
    """
    batch, heads, queries, distances = (ops.shape(scores)[i] for i in range(4))
    shifted = ops.reshape(scores, (batch, heads, distances, queries))[:, :, 1:, :]
    shifted = ops.reshape(shifted, (batch, heads, queries, distances - 1))
    return shifted[:, :, :, :key_length]


def different_segments(segment_ids, memory_length=0):
    """[B, L, M + L] bool: whether query i and key j lie in different segments; the M memory
    keys count as segment 0, as in XLNet."""
    segment_ids = ops.cast(segment_ids, "int32")
    keys = segment_ids
    if memory_length:
        keys = ops.concatenate([ops.zeros((ops.shape(segment_ids)[0], memory_length), "int32"), keys], axis=1)
    return ops.not_equal(ops.expand_dims(segment_ids, 2), ops.expand_dims(keys, 1))


@keras.saving.register_keras_serializable(package="keras_bertology")
class RelativeAttentionTerms(keras.layers.Layer):
    """One layer's relative-position projection W_r and segment vectors, turned into score terms.

    Weights: `position_kernel` [H, N, D] (XLNet's `r`) and `segment_embedding`
    [2, N, D] (`seg_embed`: same, different). The biases are passed in, so
    that a model can share one set across layers (XLNet with untie_r=False).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import MultiHeadSelfAttention, RelativeAttentionTerms
        >>> from keras_bertology.layers.relative_attention import sinusoidal_relative_positions
        >>> terms = RelativeAttentionTerms(num_heads=2, head_dim=4)
        >>> terms.build(8)
        >>> positions = sinusoidal_relative_positions(5, 5, 8)
        >>> biases = [ops.zeros((2, 4))] * 3
        >>> attention = MultiHeadSelfAttention(num_heads=2, use_bias=False)
        >>> x = ops.ones((1, 5, 8))
        >>> tuple(attention(x, score_terms=terms.score_terms(positions, biases)).shape)
        (1, 5, 8)
    """

    def __init__(self, num_heads, head_dim, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.initializer_range = initializer_range

    def build(self, hidden_size):
        hidden_size = hidden_size[-1] if isinstance(hidden_size, (tuple, list)) else hidden_size
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.position_kernel = self.add_weight(
            shape=(hidden_size, self.num_heads, self.head_dim), initializer=init, name="position_kernel")
        self.segment_embedding = self.add_weight(
            shape=(2, self.num_heads, self.head_dim), initializer=init, name="segment_embedding")
        self.built = True

    def score_terms(self, positions, biases, different_segment=None):
        """The content-bias, position and (with `different_segment` [B, L, Lk]) segment terms.

        Args:
            positions: [B, Lk + L, H] from `sinusoidal_relative_positions`.
            biases: (content, position, segment) biases, [N, D] each.
            different_segment: optional [B, L, Lk] bool from `different_segments`.
        """
        content_bias, position_bias, segment_bias = biases
        dtype = self.compute_dtype
        key_positions = ops.einsum("brh,hnd->brnd", ops.cast(positions, dtype), ops.cast(self.position_kernel, dtype))

        def content(query, key):
            return ops.expand_dims(ops.einsum("nd,bknd->bnk", ops.cast(content_bias, key.dtype), key), 2)

        def position(query, key):
            scores = ops.einsum("bqnd,brnd->bnqr", query + ops.cast(position_bias, query.dtype), key_positions)
            return rel_shift(scores, ops.shape(key)[1])

        def segment(query, key):
            both = ops.einsum("bqnd,snd->bnqs", query + ops.cast(segment_bias, query.dtype),
                              ops.cast(self.segment_embedding, query.dtype))
            return ops.where(ops.expand_dims(different_segment, 1), both[..., 1:], both[..., :1])

        return (content, position) if different_segment is None else (content, position, segment)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, head_dim=self.head_dim, initializer_range=self.initializer_range)
        return config
