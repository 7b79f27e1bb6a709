"""Transformer blocks: the encoder's (self-attention + feed-forward) and the decoder's (causal
self-attention + cross-attention to the encoder + feed-forward), post-LN or pre-LN."""

import functools

import keras
from keras import ops

from keras_bertology.layers.activations import get_activation
from keras_bertology.layers.attention import MultiHeadSelfAttention
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.hidden_states import record_block
from keras_bertology.layers.remat import RecomputableBlock

NORMS = {"layer_norm": keras.layers.LayerNormalization, "rms_norm": keras.layers.RMSNormalization,
         "unbiased_layer_norm": functools.partial(keras.layers.LayerNormalization, center=False)}


@keras.saving.register_keras_serializable(package="keras_bertology")
class TransformerEncoderBlock(RecomputableBlock, keras.layers.Layer):
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
        norm: str, "layer_norm", "unbiased_layer_norm" (a scale and no bias, ModernBERT's) or "rms_norm"
            (T5's: scale only, no mean, no bias).
        attention_input_norm: bool; False feeds a pre-LN block's attention its input as it is (a first
            layer whose input the embedding norm has just normalised, ModernBERT's); no norm is built.
        feed_forward_bias: bool, biases on the feed-forward layers (T5 has none).
        gated_feed_forward: bool, the feed-forward's hidden layer is activation(x W0) * (x W1)
            (T5 v1.1's gated GELU) instead of activation(x W0).
        attention_scale: float, the attention's score scale (`MultiHeadSelfAttention`'s
            `score_scale`; default 1 / sqrt(head width), T5's 1).
        head_dim: int, width of each attention head; default hidden / heads (T5's `d_kv`).
        attention_class: the attention layer class, `MultiHeadSelfAttention` or a subclass taking its
            arguments (DeBERTa's `DisentangledSelfAttention`), or its registered Keras name: a family
            swaps the attention while the block, its weight names and the converters stay.
        attention_options: dict, further arguments of `attention_class`.

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
        norm="layer_norm",
        feed_forward_bias=True,
        gated_feed_forward=False,
        attention_scale=None,
        head_dim=None,
        attention_class=MultiHeadSelfAttention,
        attention_options=None,
        attention_input_norm=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not (attention_input_norm or norm_first):
            raise ValueError("attention_input_norm=False applies to pre-LN blocks (norm_first=True)")
        self.attention_input_norm = attention_input_norm
        if isinstance(attention_class, str):
            attention_class = keras.saving.get_registered_object(attention_class)
        if not (isinstance(attention_class, type) and issubclass(attention_class, MultiHeadSelfAttention)):
            raise ValueError(f"attention_class must be MultiHeadSelfAttention or a subclass; got {attention_class!r}")
        self.attention_class = attention_class
        self.attention_options = dict(attention_options or {})
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
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {sorted(NORMS)}; got {norm!r}")
        self.norm = norm
        self.feed_forward_bias = feed_forward_bias
        self.gated_feed_forward = gated_feed_forward
        self.init_recomputable()
        self.attention_scale = attention_scale
        self.head_dim = head_dim

    def build(self, input_shape):
        hidden = input_shape[-1]
        policy = self.dtype_policy
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.attention = self._attention(causal=self.causal, name="attention")
        self.attention_norm = self._norm("attention_norm") if self.attention_input_norm else None
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_size, activation=get_activation(self.activation), use_bias=self.feed_forward_bias,
            kernel_initializer=init, dtype=policy, name="intermediate",
        )
        self.gate_dense = keras.layers.Dense(
            self.intermediate_size, use_bias=self.feed_forward_bias, kernel_initializer=init, dtype=policy,
            name="intermediate_gate",
        ) if self.gated_feed_forward else None
        self.output_dense = keras.layers.Dense(
            hidden, use_bias=self.feed_forward_bias, kernel_initializer=init, dtype=policy, name="output"
        )
        self.output_norm = self._norm("output_norm")
        self.dropout_layer = HashedDropout(self.dropout, dtype=policy)
        self.activation_dropout_layer = (HashedDropout(self.activation_dropout, dtype=policy)
                                         if self.activation_dropout else None)
        self.attention.build(input_shape)
        if self.attention_norm is not None:
            self.attention_norm.build(input_shape)
        self.intermediate_dense.build(input_shape)
        if self.gate_dense is not None:
            self.gate_dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.output_norm.build(input_shape)
        self.built = True

    def _attention(self, causal, name):
        return self.attention_class(
            self.num_heads, head_dim=self.head_dim, dropout=self.attention_dropout,
            initializer_range=self.initializer_range, use_bias=self.attention_bias, causal=causal,
            score_scale=self.attention_scale, dtype=self.dtype_policy, name=name, **self.attention_options,
        )

    def _norm(self, name):
        return NORMS[self.norm](epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def _attention_branch(self, x, attention_mask, training, **streams):
        return self.dropout_layer(self.attention(x, attention_mask, training=training, **streams), training=training)

    def _feed_forward_branch(self, x, training):
        inner = self.intermediate_dense(x)
        if self.gate_dense is not None:
            inner = inner * self.gate_dense(x)
        if self.activation_dropout_layer is not None:
            inner = self.activation_dropout_layer(inner, training=training)
        return self.dropout_layer(self.output_dense(inner), training=training)

    def call(self, x, attention_mask=None, training=None, memory=None, queries=None, score_terms=(),
             key_value=None, positions=None):
        """`memory`, `queries`, `score_terms`, `key_value` and `positions` go to the attention (see
        `MultiHeadSelfAttention`); with `queries` the block updates that stream (XLNet's query
        stream), attending to `x`. A call on the content stream reports its states (`record_block`)."""
        outputs = self.run_block(self._forward, x, attention_mask, training=training, memory=memory, queries=queries,
                                 score_terms=score_terms, key_value=key_value, positions=positions)
        return outputs if queries is not None else record_block(x, outputs)

    def _forward(self, x, attention_mask, training, memory, queries, score_terms, key_value, positions):
        stream = x if queries is None else queries
        streams = dict(score_terms=score_terms, key_value=key_value)
        if positions is not None:  # only attentions that place tokens by position take them
            streams["positions"] = positions
        if self.norm_first:
            def normed(states):
                return states if states is None or self.attention_norm is None else self.attention_norm(states)

            stream = stream + self._attention_branch(normed(x), attention_mask, training, memory=normed(memory),
                                                     queries=normed(queries), **streams)
            return stream + self._feed_forward_branch(self.output_norm(stream), training)
        attended = self._attention_branch(x, attention_mask, training, memory=memory, queries=queries, **streams)
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
            norm=self.norm,
            feed_forward_bias=self.feed_forward_bias,
            gated_feed_forward=self.gated_feed_forward,
            attention_scale=self.attention_scale,
            head_dim=self.head_dim,
        )
        if not self.attention_input_norm:
            config.update(attention_input_norm=False)
        if self.attention_class is not MultiHeadSelfAttention or self.attention_options:
            config.update(attention_class=keras.saving.get_registered_name(self.attention_class),
                          attention_options=self.attention_options)
        return config


@keras.saving.register_keras_serializable(package="keras_bertology")
class TransformerDecoderBlock(TransformerEncoderBlock):
    """One decoder layer of an encoder-decoder: causal self-attention, attention to the encoder's states,
    feed-forward, each a residual branch with its own norm.

    Pre-LN (`norm_first=True`, T5): x = x + SelfAttn(N1(x)); x = x + CrossAttn(N2(x), encoder);
    x = x + FFN(N3(x)). Post-LN: x = N1(x + SelfAttn(x)); x = N2(x + CrossAttn(x, encoder));
    x = N3(x + FFN(x)). Takes the encoder block's arguments; its self-attention is causal whatever
    `causal` says, and the cross-attention has the same heads, biases and score scale.

    Example:
        >>> import keras
        >>> from keras_bertology.layers import TransformerDecoderBlock
        >>> block = TransformerDecoderBlock(num_heads=2, intermediate_size=32)
        >>> tuple(block(keras.ops.ones((1, 3, 8)), keras.ops.ones((1, 5, 8))).shape)
        (1, 3, 8)
    """

    def __init__(self, num_heads, intermediate_size, **kwargs):
        kwargs["causal"] = True
        super().__init__(num_heads, intermediate_size, **kwargs)

    def build(self, x_shape, encoder_states_shape=None):
        super().build(x_shape)
        self.cross_attention = self._attention(causal=False, name="cross_attention")
        self.cross_attention_norm = self._norm("cross_attention_norm")
        self.cross_attention.build(x_shape)
        self.cross_attention_norm.build(x_shape)

    def call(self, x, encoder_states, attention_mask=None, encoder_mask=None, training=None, score_terms=()):
        """`attention_mask`: [B, L, L] or [B, 1, L] over the decoder's own positions (padding; the causal
        order is the block's); `encoder_mask`: [B, 1, Le] over the encoder's; `score_terms` go to the
        self-attention (T5's causal position bias)."""
        return self.run_block(self._decode, x, encoder_states, attention_mask, encoder_mask, training=training,
                              score_terms=score_terms)

    def _decode(self, x, encoder_states, attention_mask, encoder_mask, training, score_terms):
        def attended(stream):
            return self._attention_branch(stream, attention_mask, training, score_terms=score_terms)

        def consulted(stream):
            return self.dropout_layer(self.cross_attention(encoder_states, encoder_mask, training=training,
                                                           queries=stream), training=training)

        if self.norm_first:
            x = x + attended(self.attention_norm(x))
            x = x + consulted(self.cross_attention_norm(x))
            return x + self._feed_forward_branch(self.output_norm(x), training)
        x = self.attention_norm(x + attended(x))
        x = self.cross_attention_norm(x + consulted(x))
        return self.output_norm(x + self._feed_forward_branch(x, training))

    def decode_step(self, x, past, encoder_key_value, encoder_mask=None, score_terms=()):
        """One new position of autoregressive decoding, at inference: what `call` gives the last position
        of the sequence, from the positions before it kept as their self-attention heads.

        `x` [B, 1, H] is the newest position's input, `past` the (key, value) heads [B, T, N, D] of the T
        positions before it (T may be 0), `encoder_key_value` the cross-attention's heads of the
        encoder's states (`cross_attention.key_value`, computed once per sequence), `score_terms` the
        self-attention's terms for this query ([1, N, 1, T + 1]). Returns (output [B, 1, H], the heads of
        the T + 1 positions)."""
        stream = self.attention_norm(x) if self.norm_first else x
        key, value = self.attention.key_value(stream)
        heads = (ops.concatenate([ops.cast(past[0], key.dtype), key], axis=1),
                 ops.concatenate([ops.cast(past[1], value.dtype), value], axis=1))
        attended = self.attention(stream, key_value=heads, score_terms=score_terms)

        def consulted(stream):
            return self.cross_attention(stream, encoder_mask, queries=stream, key_value=encoder_key_value)

        if self.norm_first:
            x = x + attended
            x = x + consulted(self.cross_attention_norm(x))
            return x + self._feed_forward_branch(self.output_norm(x), False), heads
        x = self.attention_norm(x + attended)
        x = self.cross_attention_norm(x + consulted(x))
        return self.output_norm(x + self._feed_forward_branch(x, False)), heads

    def compute_output_shape(self, x_shape, encoder_states_shape=None, *args, **kwargs):
        return x_shape
