"""Input embeddings: token + absolute position + optional segment, then LayerNorm."""

import keras
from keras import ops

from keras_bertology.layers.dropout import HashedDropout


def token_table(vocab_size, width, initializer, dtype, name):
    """The token table a tied head projects states back onto: a `keras.layers.ReversibleEmbedding` whose
    reverse product computes in its compute dtype (bfloat16 under mixed precision, what torch's autocast
    computes for a tied head), wherever it is called. Keras' own choice follows the caller's autocast scope:
    the table (autocast off) is read in float32 inside a mixed-precision model's scope and in bfloat16
    outside one, so one head multiplied in float32 when training and in bfloat16 when serving."""
    table = keras.layers.ReversibleEmbedding(vocab_size, width, embeddings_initializer=initializer, dtype=dtype,
                                             name=name)
    table.reverse_dtype = table.compute_dtype
    return table


@keras.saving.register_keras_serializable(package="keras_bertology")
class TokenPositionSegmentEmbedding(keras.layers.Layer):
    """Sum of token, learned absolute position and segment embeddings.

    The token table is a `keras.layers.ReversibleEmbedding` exposed as
    `token_embedding`, so an output head can reuse it as a tied decoder.
    `num_segments=0` drops the segment table (RoBERTa has none worth keeping).
    After `share_disentangled(base)` each table adds the rows of `base`'s
    same table under stop_gradient (DeBERTa-v3's gradient-disentangled
    embedding sharing).

    Args:
        vocab_size: int, number of token ids.
        embedding_dim: int, width of every table.
        max_positions: int, longest sequence the position table covers; 0 for no absolute
            positions (models whose attention places the tokens, DeBERTa's).
        num_segments: int, number of segment (token type) ids; 0 for none.
        dropout: float, dropout after the LayerNorm.
        layer_norm_epsilon: float, or `None` to skip the LayerNorm (pre-LN stacks).
        layer_norm_bias: bool; False leaves the LayerNorm a scale and no bias (ModernBERT's).
        initializer_range: float, stddev of the truncated-normal initializer.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import TokenPositionSegmentEmbedding
        >>> layer = TokenPositionSegmentEmbedding(100, 16, max_positions=32)
        >>> tuple(layer(ops.ones((2, 8), "int32"), ops.zeros((2, 8), "int32")).shape)
        (2, 8, 16)
    """

    TABLES = ("token_embedding", "position_embedding", "segment_embedding")

    def __init__(
        self,
        vocab_size,
        embedding_dim,
        max_positions=512,
        num_segments=2,
        dropout=0.1,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        layer_norm_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.layer_norm_bias = layer_norm_bias
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.max_positions = max_positions
        self.num_segments = num_segments
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.token_embedding = token_table(vocab_size, embedding_dim, init, self.dtype_policy, "token_embedding")
        self.position_embedding = keras.layers.Embedding(
            max_positions, embedding_dim, embeddings_initializer=init,
            dtype=self.dtype_policy, name="position_embedding",
        ) if max_positions else None
        self.segment_embedding = None
        if num_segments:
            self.segment_embedding = keras.layers.Embedding(
                num_segments, embedding_dim, embeddings_initializer=init,
                dtype=self.dtype_policy, name="segment_embedding",
            )
        self.layer_norm = None
        if layer_norm_epsilon is not None:
            self.layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, center=layer_norm_bias, dtype=self.dtype_policy, name="layer_norm"
            )
        self.dropout_layer = HashedDropout(dropout, dtype=self.dtype_policy)
        self._base = None

    def build(self, token_ids_shape, segment_ids_shape=None, position_ids_shape=None):
        self.token_embedding.build(token_ids_shape)
        if self.position_embedding is not None:
            self.position_embedding.build((None,))
        if self.segment_embedding is not None:
            self.segment_embedding.build(token_ids_shape)
        if self.layer_norm is not None:
            self.layer_norm.build(tuple(token_ids_shape) + (self.embedding_dim,))
        self.built = True

    def call(self, token_ids, segment_ids=None, position_ids=None, training=None):
        """`position_ids` [B, L]: each token's row of the position table; 0, 1, ... when None."""
        embeddings = self._rows("token_embedding", token_ids)
        if self.position_embedding is not None:
            if position_ids is None:
                position_ids = ops.expand_dims(ops.arange(ops.shape(token_ids)[1], dtype="int32"), 0)
            embeddings = embeddings + self._rows("position_embedding", position_ids)
        if self.segment_embedding is not None:
            if segment_ids is None:
                segment_ids = ops.zeros_like(token_ids)
            embeddings = embeddings + self._rows("segment_embedding", segment_ids)
        if self.layer_norm is not None:
            embeddings = self.layer_norm(embeddings)
        return self.dropout_layer(embeddings, training=training)

    def _rows(self, table, ids):
        rows = getattr(self, table)(ids)
        if self._base is None:
            return rows
        shared = ops.take(getattr(self._base(), table).embeddings, ops.cast(ids, "int32"), axis=0)
        return rows + ops.cast(ops.stop_gradient(shared), rows.dtype)

    def share_disentangled(self, base):
        """Gradient-disentangled embedding sharing (DeBERTa-v3): from now on each table here reads
        stop_gradient(`base`'s same table) + its own, which this sets to zero: its own tables become
        the deltas that the losses through this layer train, while `base` learns from its own model
        only. `base` (a built layer of the same tables) is not tracked: its model owns its weights."""
        mine, theirs = self._table_shapes(), base._table_shapes()
        if mine != theirs:
            raise ValueError(f"embedding sharing needs tables of one shape; here {mine}, in the shared layer {theirs}")
        for table in mine:
            own = getattr(self, table).embeddings
            own.assign(ops.zeros(own.shape, own.dtype))
        self._base = lambda: base

    def _table_shapes(self):
        return {table: tuple(getattr(self, table).embeddings.shape) for table in self.TABLES
                if getattr(self, table) is not None}

    def merged_tables(self):
        """{table: weights} of the tables this layer computes with: own + the shared layer's (DeBERTa-v3
        folds them so that the discriminator serves alone)."""
        merged = {table: ops.convert_to_numpy(getattr(self, table).embeddings) for table in self._table_shapes()}
        if self._base is not None:
            for table in merged:
                merged[table] = merged[table] + ops.convert_to_numpy(getattr(self._base(), table).embeddings)
        return merged

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None, position_ids_shape=None):
        return tuple(token_ids_shape) + (self.embedding_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_dim=self.embedding_dim,
            max_positions=self.max_positions,
            num_segments=self.num_segments,
            dropout=self.dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
        )
        if not self.layer_norm_bias:
            config.update(layer_norm_bias=False)
        return config
