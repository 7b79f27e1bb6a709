"""T5's relative position bias: a learned scalar per head and per bucket of the key's offset from the query.

Offsets below half the buckets (a quarter each way when bidirectional) get a
bucket of their own; longer ones share logarithmically wider buckets up to
`max_distance`, past which all fall in the last. A causal stack (T5's
decoder) sees no keys after the query and gives them bucket 0. The bias is
one [num_buckets, heads] table, held by the stack's first layer and added to
the scores of every layer.
"""

import keras
import numpy as np
from keras import ops


def position_buckets(offsets, bidirectional=True, num_buckets=32, max_distance=128):
    """Bucket of each key offset (key position - query position), int32 NumPy array like `offsets`.

    float32 at every step, in T5's order: where the log's rounding puts an
    offset on a boundary, the bucket is the original's.
    """
    offsets = np.asarray(offsets, np.int64)
    buckets = np.zeros(offsets.shape, np.int64)
    if bidirectional:
        num_buckets //= 2
        buckets += (offsets > 0) * num_buckets
        distance = np.abs(offsets)
    else:
        distance = -np.minimum(offsets, 0)
    max_exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        scaled = (np.log(distance.astype(np.float32) / np.float32(max_exact))
                  / np.float32(np.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact))
    large = np.minimum(max_exact + np.where(distance < max_exact, 0, scaled).astype(np.int64), num_buckets - 1)
    return (buckets + np.where(distance < max_exact, distance, large)).astype(np.int32)


@keras.saving.register_keras_serializable(package="keras_bertology")
class RelativePositionBias(keras.layers.Layer):
    """[1, heads, Lq, Lk] float32 bias of each query-key pair, a score term of `MultiHeadSelfAttention`.

    Called on the query heads [B, Lq, N, D] and key heads [B, Lk, N, D] (only
    their lengths are read), or as `bias(query_length, key_length, query_offset)`,
    `query_offset` the position of the first query (a decoder step after a
    cache of that many tokens).

    Args:
        num_heads: int.
        num_buckets: int, buckets of offsets (T5: 32).
        max_distance: int, the offset from which all share the last bucket (T5: 128).
        bidirectional: bool, keys after the query get buckets of their own (T5's encoder), else bucket 0.
        initializer_range: float, stddev of the normal initializer.

    Example:
        >>> from keras_bertology.layers import RelativePositionBias
        >>> bias = RelativePositionBias(num_heads=2, num_buckets=8, max_distance=16)
        >>> tuple(bias.bias(3, 5).shape)
        (1, 2, 3, 5)
    """

    def __init__(self, num_heads, num_buckets=32, max_distance=128, bidirectional=True, initializer_range=1.0,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.initializer_range = initializer_range
        # Every offset past the max distance shares its bucket with max_distance + 1: the table of offsets
        # -(max_distance + 1) ... max_distance + 1 serves any length.
        self._reach = max_distance + 1
        self._table = position_buckets(np.arange(-self._reach, self._reach + 1), bidirectional, num_buckets,
                                       max_distance)

    def build(self, *shapes):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.num_buckets, self.num_heads),
            initializer=keras.initializers.RandomNormal(stddev=self.initializer_range))
        self.built = True

    def bias(self, query_length, key_length, query_offset=0):
        if not self.built:
            self.build()
        queries = ops.expand_dims(ops.arange(query_length, dtype="int32") + query_offset, 1)
        keys = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
        offsets = ops.clip(keys - queries, -self._reach, self._reach) + self._reach
        buckets = ops.take(ops.convert_to_tensor(self._table), offsets, axis=0)
        values = ops.take(ops.cast(self.embeddings, "float32"), buckets, axis=0)  # [Lq, Lk, N]
        return ops.expand_dims(ops.transpose(values, (2, 0, 1)), 0)

    def call(self, query, key):
        return self.bias(ops.shape(query)[1], ops.shape(key)[1])

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, num_buckets=self.num_buckets, max_distance=self.max_distance,
                      bidirectional=self.bidirectional, initializer_range=self.initializer_range)
        return config
