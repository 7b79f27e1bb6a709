"""A Transformer encoder block: self-attention + feed-forward, post-LN or pre-LN."""

import keras

from keras_bertology.layers.activations import get_activation
from keras_bertology.layers.attention import MultiHeadSelfAttention


@keras.saving.register_keras_serializable(package="keras_bertology")
class TransformerEncoderBlock(keras.layers.Layer):
    """One encoder layer.

    Post-LN (`norm_first=False`, BERT/RoBERTa): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    Pre-LN (`norm_first=True`): x = x + Attn(LN(x)); x = x + FFN(LN(x)); the
    stack owner applies a final LayerNorm.

    Args:
        num_heads: int, attention heads.
        intermediate_size: int, width of the feed-forward hidden layer.
        activation: str, feed-forward activation, a name from `layers.activations`
            ("gelu" is the exact erf GELU of BERT, "gelu_approximate" the tanh form).
        dropout: float, dropout on both residual branches.
        attention_dropout: float, dropout on attention probabilities.
        layer_norm_epsilon: float.
        norm_first: bool, pre-LN instead of post-LN.
        initializer_range: float, stddev of the truncated-normal initializer.
        attention_bias: bool, biases on the attention projections (XLNet has none).
        activation_dropout: float, dropout after the feed-forward activation (XLNet's).
        causal: bool, causal self-attention (see `MultiHeadSelfAttention`).

    Example:
        >>> import keras
        >>> from keras_bertology.layers import TransformerEncoderBlock
        >>> block = TransformerEncoderBlock(num_heads=2, intermediate_size=32)
        >>> tuple(block(keras.ops.ones((1, 4, 8))).shape)
        (1, 4, 8)
    """

    def __init__(
        self,
        num_heads,
        intermediate_size,
        activation="gelu",
        dropout=0.1,
        attention_dropout=0.1,
        layer_norm_epsilon=1e-12,
        norm_first=False,
        initializer_range=0.02,
        attention_bias=True,
        activation_dropout=0.0,
        causal=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm_first = norm_first
        self.initializer_range = initializer_range
        self.attention_bias = attention_bias
        self.activation_dropout = activation_dropout
        self.causal = causal

    def build(self, input_shape):
        hidden = input_shape[-1]
        policy = self.dtype_policy
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.attention = MultiHeadSelfAttention(
            self.num_heads, dropout=self.attention_dropout,
            initializer_range=self.initializer_range, use_bias=self.attention_bias, causal=self.causal, dtype=policy,
            name="attention",
        )
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="attention_norm"
        )
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_size, activation=get_activation(self.activation),
            kernel_initializer=init, dtype=policy, name="intermediate",
        )
        self.output_dense = keras.layers.Dense(
            hidden, kernel_initializer=init, dtype=policy, name="output"
        )
        self.output_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="output_norm"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=policy)
        self.activation_dropout_layer = (keras.layers.Dropout(self.activation_dropout, dtype=policy)
                                         if self.activation_dropout else None)
        self.attention.build(input_shape)
        self.attention_norm.build(input_shape)
        self.intermediate_dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.output_norm.build(input_shape)
        self.built = True

    def _attention_branch(self, x, attention_mask, training, **streams):
        return self.dropout_layer(self.attention(x, attention_mask, training=training, **streams), training=training)

    def _feed_forward_branch(self, x, training):
        inner = self.intermediate_dense(x)
        if self.activation_dropout_layer is not None:
            inner = self.activation_dropout_layer(inner, training=training)
        return self.dropout_layer(self.output_dense(inner), training=training)

    def call(self, x, attention_mask=None, training=None, memory=None, queries=None, score_terms=(),
             key_value=None):
        """`memory`, `queries`, `score_terms` and `key_value` go to the attention (see
        `MultiHeadSelfAttention`); with `queries` the block updates that stream (XLNet's query
        stream), attending to `x`."""
        stream = x if queries is None else queries
        if self.norm_first:
            normed = dict(memory=None if memory is None else self.attention_norm(memory),
                          queries=None if queries is None else self.attention_norm(queries), score_terms=score_terms,
                          key_value=key_value)
            stream = stream + self._attention_branch(self.attention_norm(x), attention_mask, training, **normed)
            return stream + self._feed_forward_branch(self.output_norm(stream), training)
        attended = self._attention_branch(x, attention_mask, training, memory=memory, queries=queries,
                                          score_terms=score_terms, key_value=key_value)
        stream = self.attention_norm(stream + attended)
        return self.output_norm(stream + self._feed_forward_branch(stream, training))

    def compute_output_shape(self, x_shape, attention_mask_shape=None, memory_shape=None, queries_shape=None):
        return x_shape if queries_shape is None else queries_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            activation=self.activation,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            norm_first=self.norm_first,
            initializer_range=self.initializer_range,
            attention_bias=self.attention_bias,
            activation_dropout=self.activation_dropout,
            causal=self.causal,
        )
        return config

