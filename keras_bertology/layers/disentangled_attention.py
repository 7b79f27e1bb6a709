"""DeBERTa's disentangled attention: content-to-content scores plus content-to-position (c2p) and
position-to-content (p2c) terms read from relative position embeddings that the layers share.

For a query i and a key j at distance d = i - j, with q, k the content heads and
pk, pq the heads of the relative embedding table (row r = `relative_index`):

    score(i, j) = (q_i . k_j + q_i . pk[r(i, j)] + k_j . pq[r(i, j)]) / sqrt(D (1 + number of terms))

r(i, j) = clamp(bucket(d) + span, 0, 2 span - 1), where bucket is the identity
(DeBERTa v1) or v2's log buckets, and span the table's half height. The table
is 2 span rows; both terms read the same row because the buckets are odd
(bucket(-d) = -bucket(d)), which turns the original's p2c index on -d, transposed,
into r(i, j).
"""

import collections
import math

import keras
import numpy as np
from keras import ops

from keras_bertology.layers.attention import MultiHeadSelfAttention
from keras_bertology.layers.dropout import HashedDropout

POSITION_TERMS = ("c2p", "p2c")


def log_bucket_positions(distances, position_buckets, max_position):
    """DeBERTa v2's bucket of each signed distance (an integer NumPy array): distances under
    position_buckets / 2 are kept, longer ones fall on a log scale reaching position_buckets - 1 at
    max_position - 1 (200 -> 169 and 511 -> 255 with 256 buckets up to 512). Computed in float32, as the
    reference does, so that the ceiling rounds where it rounds."""
    distances = np.asarray(distances, dtype=np.int64)
    mid = position_buckets // 2
    sign = np.sign(distances)
    absolute = np.where((distances < mid) & (distances > -mid), mid - 1, np.abs(distances))
    ratio = np.log(absolute.astype(np.float32) / np.float32(mid)) / np.log(np.float32((max_position - 1) / mid))
    log_position = np.ceil(ratio * np.float32(mid - 1)) + mid
    return np.where(absolute <= mid, distances, log_position * sign).astype(np.int64)


def relative_index_table(span, position_buckets=0, max_position=0):
    """(table, reach): the embedding row r of each distance d in [-reach, reach] at table[d + reach],
    reach being where the clamp saturates (r is monotone in d): a lookup clips distances to it."""
    if position_buckets > 0 and max_position - 1 <= position_buckets // 2:
        raise ValueError(f"log buckets need max_position - 1 > position_buckets / 2; got max_position "
                         f"{max_position} with {position_buckets} buckets")
    reach = span
    while True:
        distances = np.arange(-reach, reach + 1)
        if position_buckets > 0:
            distances = log_bucket_positions(distances, position_buckets, max_position)
        table = np.clip(distances + span, 0, 2 * span - 1).astype("int32")
        if table[0] == 0 and table[-1] == 2 * span - 1:
            return table, reach
        reach *= 2


def relative_index(query_length, key_length, table, reach):
    """[Lq, Lk] int32 rows r(i, j) of the relative table (see the module docstring)."""
    distances = ops.expand_dims(ops.arange(query_length), 1) - ops.expand_dims(ops.arange(key_length), 0)
    return ops.take(ops.convert_to_tensor(table), ops.clip(distances, -reach, reach) + reach)


class RelativeEmbeddings(collections.namedtuple("RelativeEmbeddings", ["table", "index"])):
    """What a stack hands each disentangled attention layer as a score term: the shared relative
    position table [2 span, H] and the [Lq, Lk] row index of each query/key pair (a named tuple, so
    that Keras' functional graphs see the tensors in it)."""


@keras.saving.register_keras_serializable(package="keras_bertology")
class DisentangledSelfAttention(MultiHeadSelfAttention):
    """`MultiHeadSelfAttention` plus DeBERTa's c2p and p2c terms (see the module docstring).

    The relative table arrives as a `RelativeEmbeddings` among `score_terms`;
    this layer projects it with its own key and query projections
    (`share_key`, DeBERTa v2/v3's share_att_key) or with position projections
    of its own, `position_key` and `position_query`.

    Args:
        position_terms: the terms among "c2p" and "p2c".
        share_key: bool, project the table with the content projections.
        position_key_bias: bool, a bias on `position_key` (v2: yes, v1: no).
        content_key_bias: bool, a bias on the content key projection (v2: yes, v1: no; its p2c
            term would see one).
        position_dropout: float, dropout on the table before projecting it.
        other args: `MultiHeadSelfAttention`'s; the default score scale is
            1 / sqrt(head width x (1 + len(position_terms))).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import DisentangledSelfAttention, RelativeEmbeddings
        >>> from keras_bertology.layers.disentangled_attention import relative_index, relative_index_table
        >>> table, reach = relative_index_table(span=4)
        >>> positions = RelativeEmbeddings(ops.ones((8, 8)), relative_index(5, 5, table, reach))
        >>> layer = DisentangledSelfAttention(num_heads=2)
        >>> tuple(layer(ops.ones((1, 5, 8)), score_terms=(positions,)).shape)
        (1, 5, 8)
    """

    def __init__(self, num_heads, position_terms=POSITION_TERMS, share_key=False, position_key_bias=True,
                 content_key_bias=True, position_dropout=0.0, **kwargs):
        super().__init__(num_heads, **kwargs)
        unknown = sorted(set(position_terms) - set(POSITION_TERMS))
        if unknown:
            raise ValueError(f"position_terms must be among {POSITION_TERMS}; got {unknown}")
        self.position_terms = tuple(position_terms)
        self.share_key = share_key
        self.position_key_bias = position_key_bias
        self.content_key_bias = content_key_bias
        self.position_dropout = position_dropout
        self.position_dropout_layer = HashedDropout(position_dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        super().build(input_shape)
        if self.score_scale is None:
            self._scale = 1.0 / math.sqrt(self._head_dim * (1 + len(self.position_terms)))
        inner, table_shape = self.num_heads * self._head_dim, (None, input_shape[-1])
        self.position_key = self.position_query = None
        if not self.share_key:
            if "c2p" in self.position_terms:
                self.position_key = self._position_dense(inner, self.position_key_bias, "position_key")
                self.position_key.build(table_shape)
            if "p2c" in self.position_terms:
                self.position_query = self._position_dense(inner, True, "position_query")
                self.position_query.build(table_shape)

    def _has_bias(self, projection):
        return super()._has_bias(projection) and (projection != "key" or self.content_key_bias)

    def _position_dense(self, units, use_bias, name):
        return keras.layers.Dense(units, use_bias=use_bias, dtype=self.dtype_policy, name=name,
                                  kernel_initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))

    def call(self, x, attention_mask=None, training=None, score_terms=(), **streams):
        tables = [term for term in score_terms if isinstance(term, RelativeEmbeddings)]
        if len(tables) != 1:
            raise ValueError("DisentangledSelfAttention needs one RelativeEmbeddings among score_terms")
        others = tuple(term for term in score_terms if not isinstance(term, RelativeEmbeddings))
        return super().call(x, attention_mask, training=training,
                            score_terms=others + self._position_terms(tables[0], training), **streams)

    def _position_terms(self, positions, training):
        """The c2p and p2c terms as callables of the content heads, [B, N, Lq, Lk] each."""
        table = self.position_dropout_layer(ops.cast(positions.table, self.compute_dtype), training=training)
        rows = ops.shape(table)[0]

        def heads(dense):
            return ops.reshape(dense(table), (rows, self.num_heads, self._head_dim))

        def gathered(full, index):  # full [B, N, L, 2 span] -> [B, N, L, Lk] at index [L, Lk]
            (batch, heads_, _, _), (length, keys) = ops.shape(full), ops.shape(index)
            return ops.take_along_axis(full, ops.broadcast_to(index, (batch, heads_, length, keys)), axis=-1)

        terms = ()
        if "c2p" in self.position_terms:
            position_key = heads(self.key_dense if self.share_key else self.position_key)
            terms += (lambda query, key: gathered(ops.einsum("bqnd,rnd->bnqr", query, position_key),
                                                  positions.index),)
        if "p2c" in self.position_terms:
            position_query = heads(self.query_dense if self.share_key else self.position_query)
            terms += (lambda query, key: ops.swapaxes(gathered(
                ops.einsum("bknd,rnd->bnkr", key, position_query), ops.transpose(positions.index)), -1, -2),)
        return terms

    def get_config(self):
        config = super().get_config()
        config.update(position_terms=list(self.position_terms), share_key=self.share_key,
                      position_key_bias=self.position_key_bias, content_key_bias=self.content_key_bias,
                      position_dropout=self.position_dropout)
        return config


@keras.saving.register_keras_serializable(package="keras_bertology")
class RelativePositionTable(keras.layers.Layer):
    """The relative position embeddings a DeBERTa stack shares: `call(states)` gives the table
    [2 span, H], LayerNorm-ed where the original norms it (v2's norm_rel_ebd), and the [L, L] row index
    of the states' positions (`relative_index`).

    Args:
        span: int, half the table's height: position_buckets when > 0, else max_relative_positions.
        hidden_size: int.
        position_buckets: int, v2's log buckets (0: none).
        max_position: int, v2's max_relative_positions, where the log buckets reach span - 1.
        layer_norm_epsilon: float, or None for no LayerNorm on the table.
        initializer_range: float.
    """

    def __init__(self, span, hidden_size, position_buckets=0, max_position=0, layer_norm_epsilon=None,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.span, self.hidden_size = span, hidden_size
        self.position_buckets, self.max_position = position_buckets, max_position
        self.layer_norm_epsilon, self.initializer_range = layer_norm_epsilon, initializer_range
        self._index_table, self._reach = relative_index_table(span, position_buckets, max_position)
        self.norm = None if layer_norm_epsilon is None else keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="norm")

    def build(self, states_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(2 * self.span, self.hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))
        if self.norm is not None:
            self.norm.build((2 * self.span, self.hidden_size))
        self.built = True

    def call(self, states):
        """Where the length is known when the graph is built (JAX, and TensorFlow batches of one shape),
        only the rows that length reaches: the layers project and score 2 L - 1 of v1's 1,024 rows at
        L = 128, not all of them."""
        first, end = self._rows_reached(states.shape[1])
        table = ops.cast(self.embeddings, self.compute_dtype)[first:end]
        if self.norm is not None:
            table = self.norm(table)
        length = ops.shape(states)[1]
        return table, relative_index(length, length, self._index_table - first, self._reach)

    def _rows_reached(self, length):
        """[first, end) of the table's rows that distances within `length` positions read (the index
        grows with the distance); all of them for a length unknown until run time."""
        if not isinstance(length, int):
            return 0, 2 * self.span
        near = min(length - 1, self._reach)
        return int(self._index_table[self._reach - near]), int(self._index_table[self._reach + near]) + 1

    def compute_output_spec(self, states):
        return (keras.KerasTensor((2 * self.span, self.hidden_size), dtype=self.compute_dtype),
                keras.KerasTensor((states.shape[1], states.shape[1]), dtype="int32"))

    def get_config(self):
        config = super().get_config()
        config.update(span=self.span, hidden_size=self.hidden_size, position_buckets=self.position_buckets,
                      max_position=self.max_position, layer_norm_epsilon=self.layer_norm_epsilon,
                      initializer_range=self.initializer_range)
        return config
