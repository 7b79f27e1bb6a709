"""SpanBERT's span boundary objective head: predict a span's tokens from the tokens around it."""

import keras
from keras import ops

from keras_bertology.layers.activations import get_activation
from keras_bertology.layers.heads import decode_tokens, gather_positions


@keras.saving.register_keras_serializable(package="keras_bertology")
class SpanBoundaryHead(keras.layers.Layer):
    """Logits of each masked token from its span's external boundaries and its offset in the span.

    For a target at offset i of a span s..e: y = f([x_{s-1}; x_{e+1}; p_i]),
    f being two layers of Dense -> activation -> LayerNorm, then the decoder
    tied to the token embeddings plus an output bias. The head reads only the
    two boundary rows of the encoder output, never the rows inside the span.
    Offsets beyond the position table share its last row.

    Args:
        vocab_size: int.
        token_embedding: the backbone's `ReversibleEmbedding` to tie the decoder
            to (passed again on reload, not serialized).
        max_span_positions: int, rows of the relative position table.
        position_embedding_size: int, width of p_i (200 in SpanBERT).
        activation: str, a name from `layers.activations`.
        layer_norm_epsilon, initializer_range: float.
        loss_chunk_size: int; given `targets` [B, P], the head returns each target's (cross-entropy,
            1.0 where it is the arg-max) [B, P, 2] instead of logits, that many positions at a time
            (`layers.vocabulary_scores`), as `MaskedLMHead` does.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import SpanBoundaryHead
        >>> head = SpanBoundaryHead(vocab_size=50, max_span_positions=8, position_embedding_size=4)
        >>> hidden, slots = ops.ones((2, 10, 16)), ops.zeros((2, 3), "int32")
        >>> tuple(head(hidden, slots, slots + 4, slots).shape)
        (2, 3, 50)
    """

    def __init__(self, vocab_size, token_embedding=None, max_span_positions=32, position_embedding_size=200,
                 activation="gelu", layer_norm_epsilon=1e-12, initializer_range=0.02, loss_chunk_size=0, **kwargs):
        super().__init__(**kwargs)
        self.loss_chunk_size = loss_chunk_size
        self.vocab_size = vocab_size
        self.token_embedding = token_embedding
        self.max_span_positions = max_span_positions
        self.position_embedding_size = position_embedding_size
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range

    def build(self, hidden_shape, span_left_shape=None, span_right_shape=None, span_offset_shape=None,
              targets_shape=None):
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        hidden = hidden_shape[-1]
        width = self.token_embedding.output_dim if self.token_embedding is not None else hidden
        self.position_embedding = keras.layers.Embedding(
            self.max_span_positions, self.position_embedding_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="position_embedding")
        self.position_embedding.build(None)
        self.transforms, self.layer_norms = [], []
        inputs = 2 * hidden + self.position_embedding_size
        for index, units in enumerate((hidden, width)):
            dense = keras.layers.Dense(units, activation=get_activation(self.activation), kernel_initializer=init,
                                       dtype=self.dtype_policy, name=f"transform_{index}")
            dense.build((None, inputs))
            norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
                                                   name=f"layer_norm_{index}")
            norm.build((None, units))
            self.transforms.append(dense)
            self.layer_norms.append(norm)
            inputs = units
        if self.token_embedding is None:
            self.decoder_kernel = self.add_weight(name="decoder_kernel", shape=(width, self.vocab_size),
                                                  initializer=init)
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,), initializer="zeros")
        self.built = True

    def call(self, hidden, span_left, span_right, span_offset, targets=None):
        offset = ops.clip(ops.cast(span_offset, "int32"), 0, self.max_span_positions - 1)
        x = ops.concatenate([gather_positions(hidden, span_left), gather_positions(hidden, span_right),
                             self.position_embedding(offset)], axis=-1)
        for dense, norm in zip(self.transforms, self.layer_norms):
            x = norm(dense(x))
        decoder_kernel = None if self.token_embedding is not None else self.decoder_kernel
        return decode_tokens(x, self.token_embedding, decoder_kernel, self.output_bias, targets, self.loss_chunk_size)

    def compute_output_spec(self, hidden, span_left, span_right, span_offset, targets=None):
        width = self.vocab_size if targets is None else 2
        return keras.KerasTensor((hidden.shape[0], span_left.shape[1], width), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, max_span_positions=self.max_span_positions,
                      position_embedding_size=self.position_embedding_size, activation=self.activation,
                      layer_norm_epsilon=self.layer_norm_epsilon, initializer_range=self.initializer_range)
        if self.loss_chunk_size:
            config.update(loss_chunk_size=self.loss_chunk_size)
        return config
