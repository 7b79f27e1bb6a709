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


def sinusoidal_relative_positions(query_length, key_length, hidden_size, clamp_len=-1, bi_data=False):
    """[directions, key_length + query_length, hidden_size] encodings of the distances key_length,
    key_length - 1, ..., 1 - query_length (XLNet's bidirectional order).

    `clamp_len` > 0 caps |distance|. One direction, or with `bi_data` two: the
    forward distances for the first half of a batch and the negated ones for
    the second half (the backward streams read the text reversed). There is
    no batch axis: every row of a half shares the encodings, so projecting
    them costs R x H^2 per direction, not per row.
    """
    distances = ops.arange(key_length, -query_length, -1, dtype="float32")
    frequencies = 1.0 / ops.power(10000.0, ops.arange(0, hidden_size, 2, dtype="float32") / hidden_size)

    def encode(distance):
        if clamp_len > 0:
            distance = ops.clip(distance, -clamp_len, clamp_len)
        angles = ops.expand_dims(distance, -1) * frequencies
        return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)

    directions = [distances, -distances] if bi_data else [distances]
    return ops.stack([encode(direction) for direction in directions])


def by_direction(query, key_positions):
    """[B, Q, N, D] queries against [S, R, N, D] encodings (S = 1, or 2 for bi_data: the first
    half of the batch forward, the second backward) -> [B, N, Q, R]."""
    if key_positions.shape[0] == 1:
        return ops.einsum("bqnd,rnd->bnqr", query, key_positions[0])
    batch = ops.shape(query)[0]
    halves = ops.reshape(query, (2, batch // 2, *ops.shape(query)[1:]))
    scores = ops.einsum("sbqnd,srnd->sbnqr", halves, key_positions)
    return ops.reshape(scores, (batch, *ops.shape(scores)[2:]))


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

    Weights: `position_kernel` [H, N, D] (XLNet's `r`, Transformer-XL's `r_net`)
    and, with `segments`, `segment_embedding` [2, N, D] (`seg_embed`: same,
    different; Transformer-XL has no segments). The biases are passed in, so
    that a model can share one set across layers (untie_r=False).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import MultiHeadSelfAttention, RelativeAttentionTerms
        >>> from keras_bertology.layers.relative_attention import sinusoidal_relative_positions
        >>> terms = RelativeAttentionTerms(num_heads=2, head_dim=4)
        >>> terms.build(8)
        >>> key_positions = terms.project_positions(sinusoidal_relative_positions(5, 5, 8))
        >>> biases = [ops.zeros((2, 4))] * 3
        >>> attention = MultiHeadSelfAttention(num_heads=2, use_bias=False)
        >>> x = ops.ones((1, 5, 8))
        >>> tuple(attention(x, score_terms=terms.score_terms(key_positions, biases)).shape)
        (1, 5, 8)
    """

    def __init__(self, num_heads, head_dim, initializer_range=0.02, segments=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.initializer_range = initializer_range
        self.segments = segments

    def build(self, hidden_size):
        hidden_size = hidden_size[-1] if isinstance(hidden_size, (tuple, list)) else hidden_size
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.position_kernel = self.add_weight(
            shape=(hidden_size, self.num_heads, self.head_dim), initializer=init, name="position_kernel")
        if self.segments:
            self.segment_embedding = self.add_weight(
                shape=(2, self.num_heads, self.head_dim), initializer=init, name="segment_embedding")
        self.built = True

    def project_positions(self, positions):
        """[S, R, H] relative encodings -> [S, R, N, D] position keys, once per layer for both streams."""
        dtype = self.compute_dtype
        return ops.einsum("srh,hnd->srnd", ops.cast(positions, dtype), ops.cast(self.position_kernel, dtype))

    def score_terms(self, key_positions, biases, different_segment=None, query_positions=None):
        """The content-bias, position and (with `different_segment` [B, Lq, Lk]) segment terms.

        Args:
            key_positions: [S, Lk + L, N, D] from `project_positions`.
            biases: (content, position, segment) biases, [N, D] each (segment: None without segments).
            different_segment: optional [B, Lq, Lk] bool (`different_segments`, rows of the queries);
                only for terms built with `segments`.
            query_positions: optional [B, Lq] int: where each query sits in the L current
                positions, when the queries are not the L positions in order (XLNet's query
                stream asks only for its targets).
        """
        content_bias, position_bias, segment_bias = biases

        def content(query, key):
            return ops.expand_dims(ops.einsum("nd,bknd->bnk", ops.cast(content_bias, key.dtype), key), 2)

        def position(query, key):
            scores = by_direction(query + ops.cast(position_bias, query.dtype), key_positions)
            key_length = ops.shape(key)[1]
            if query_positions is None:
                return rel_shift(scores, key_length)
            # Column L - i + j holds the distance from the query at position i to key j.
            length = ops.shape(key_positions)[1] - key_length
            columns = (length - ops.cast(query_positions, "int32"))[:, :, None] + ops.arange(key_length)[None, None]
            columns = ops.broadcast_to(ops.expand_dims(columns, 1), (*ops.shape(scores)[:3], key_length))
            return ops.take_along_axis(scores, columns, axis=-1)

        def segment(query, key):
            both = ops.einsum("bqnd,snd->bnqs", query + ops.cast(segment_bias, query.dtype),
                              ops.cast(self.segment_embedding, query.dtype))
            return ops.where(ops.expand_dims(different_segment, 1), both[..., 1:], both[..., :1])

        return (content, position) if different_segment is None else (content, position, segment)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, head_dim=self.head_dim, initializer_range=self.initializer_range,
                      segments=self.segments)
        return config
