"""XLNet's two-stream encoder layer: one set of weights updates a content stream and a query stream."""

import keras

from keras_bertology.layers.relative_attention import RelativeAttentionTerms
from keras_bertology.layers.transformer_block import TransformerEncoderBlock


@keras.saving.register_keras_serializable(package="keras_bertology")
class TwoStreamBlock(keras.layers.Layer):
    """A post-LN encoder block with relative attention, run on XLNet's two streams.

    The content stream h is BERT's: every position asks with its own content
    and may see itself. The query stream g asks from a position without its
    content (it starts as a learned mask vector), so it can predict that
    token. Both attend to the same keys and values from [memory; h]
    (projected once), with the same weights and relative position encodings
    (projected once), and their own masks; g holds only the P predicted
    slots, at `query_positions`, so its attention costs P rows, not L.

    Run with the content stream alone, `causal` and without `segments`, it
    is Transformer-XL's layer: relative attention over [memory; h], each
    position seeing the memory and the positions up to its own.

    Args:
        num_heads, intermediate_size: ints.
        activation: feed-forward activation name.
        dropout: float, used everywhere XLNet uses its single dropout rate
            (both residual branches, after the feed-forward activation, and
            the attention probabilities unless `attention_dropout` is given).
        layer_norm_epsilon, initializer_range: floats.
        attention_dropout: optional float, dropout on the attention probabilities
            (Transformer-XL's `dropatt`).
        causal: bool, each position attends to the memory and the positions up to its own.
        segments: bool, the relative segment term (XLNet's; Transformer-XL has none).

    Call args:
        h: [B, L, H] content stream.
        positions: [S, M + 2L, H] relative encodings (`sinusoidal_relative_positions`).
        biases: (content, position, segment) [N, D] biases.
        content_mask: [B, L, M + L] 1 where the content stream may attend, or None.
        different_segment: optional [B, L, M + L] bool.
        memory: optional [B, M, H] cached states of the previous segment.
        g: optional [B, P, H] query stream.
        query_positions: [B, P] int, the position each query slot predicts.
        query_mask: [B, P, M + L] mask of the query stream (the rows of its positions).
        query_different_segment: optional [B, P, M + L] bool (the rows of its positions).

    Returns:
        (new h, new g or None).

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import TwoStreamBlock
        >>> from keras_bertology.layers.relative_attention import sinusoidal_relative_positions
        >>> block = TwoStreamBlock(num_heads=2, intermediate_size=16)
        >>> h, g = ops.ones((1, 4, 8)), ops.ones((1, 2, 8))
        >>> new_h, new_g = block(h, sinusoidal_relative_positions(4, 4, 8), [ops.zeros((2, 4))] * 3, None,
        ...                      g=g, query_positions=ops.convert_to_tensor([[1, 3]]), query_mask=ops.ones((1, 2, 4)))
        >>> tuple(new_h.shape), tuple(new_g.shape)
        ((1, 4, 8), (1, 2, 8))
    """

    def __init__(self, num_heads, intermediate_size, activation="gelu", dropout=0.1, layer_norm_epsilon=1e-12,
                 initializer_range=0.02, attention_dropout=None, causal=False, segments=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.attention_dropout = attention_dropout
        self.causal = causal
        self.segments = segments

    def build(self, h_shape, *args, **kwargs):
        hidden = h_shape[-1]
        self.block = TransformerEncoderBlock(
            self.num_heads, self.intermediate_size, activation=self.activation, dropout=self.dropout,
            attention_dropout=self.dropout if self.attention_dropout is None else self.attention_dropout,
            layer_norm_epsilon=self.layer_norm_epsilon, initializer_range=self.initializer_range,
            attention_bias=False, activation_dropout=self.dropout, causal=self.causal, dtype=self.dtype_policy,
            name="block",
        )
        self.block.build(h_shape)
        self.relative = RelativeAttentionTerms(self.num_heads, hidden // self.num_heads,
                                               initializer_range=self.initializer_range, segments=self.segments,
                                               dtype=self.dtype_policy, name="relative")
        self.relative.build(hidden)
        self.built = True

    def call(self, h, positions, biases, content_mask, different_segment=None, memory=None, g=None,
             query_positions=None, query_mask=None, query_different_segment=None, training=None):
        key_positions = self.relative.project_positions(positions)
        key_value = self.block.attention.key_value(h, memory)
        terms = self.relative.score_terms(key_positions, biases, different_segment)
        new_h = self.block(h, content_mask, training=training, memory=memory, score_terms=terms, key_value=key_value)
        if g is None:
            return new_h, None
        query_terms = self.relative.score_terms(key_positions, biases, query_different_segment, query_positions)
        new_g = self.block(h, query_mask, training=training, memory=memory, queries=g, score_terms=query_terms,
                           key_value=key_value)
        return new_h, new_g

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, intermediate_size=self.intermediate_size,
                      activation=self.activation, dropout=self.dropout,
                      layer_norm_epsilon=self.layer_norm_epsilon, initializer_range=self.initializer_range,
                      attention_dropout=self.attention_dropout, causal=self.causal, segments=self.segments)
        return config
