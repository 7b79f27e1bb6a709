"""The Transformer-XL network: adaptive input, causal relative-attention blocks over [memory; segment]."""

import keras
from keras import ops

from keras_bertology.layers import TwoStreamBlock, merge_attention_masks, sinusoidal_relative_positions
from keras_bertology.layers.adaptive_softmax import AdaptiveEmbedding
from keras_bertology.layers.dropout import HashedDropout


def key_mask(padding_mask, memory_length, length, attention_window=None, memory_mask=None):
    """[B or 1, L, M + L] 1 where a query may see a key, before the causal order (the attention adds it),
    or None: memory keys are text unless `memory_mask` [B, M] hides them (empty slots), current keys
    hide padding, and with `attention_window` a query sees only the keys less than that many
    positions back (Transformer-XL's `same_length` with the window = mem_len: every query sees as
    many keys, itself included)."""
    keys = None
    if padding_mask is not None or memory_mask is not None:
        keys = ops.cast(padding_mask, "int32") if padding_mask is not None else ops.ones(
            (ops.shape(memory_mask)[0], length), "int32")
        if memory_length:
            memory_keys = ops.ones((ops.shape(keys)[0], memory_length), "int32") if memory_mask is None \
                else ops.cast(memory_mask, "int32")
            keys = ops.concatenate([memory_keys, keys], axis=1)
    window = None
    if attention_window:
        distance = ops.expand_dims(ops.arange(length) + memory_length, 1) - ops.expand_dims(
            ops.arange(memory_length + length), 0)
        window = ops.expand_dims(distance < attention_window, 0)
    return merge_attention_masks(keys, window)


@keras.saving.register_keras_serializable(package="keras_bertology")
class TransformerXLEncoder(keras.layers.Layer):
    """Transformer-XL's decoder stack as one layer, which the backbone (no memory) and the pretrainer
    (with the memory of the previous segment) call with the same weights.

    Tokens enter through an `AdaptiveEmbedding` (scaled by sqrt(hidden)),
    positions only as sinusoidal relative encodings in every layer's
    attention, with the global content and position biases u and v (one set
    shared by all layers, or per layer with `untie_r`). Each block is
    post-LN with a ReLU feed-forward (`TwoStreamBlock`, causal, content
    stream only, no segment term).

    Args:
        vocab_size, num_layers, num_heads, hidden_size, intermediate_size: ints.
        cutoffs, div_val, embedding_size: the adaptive input (see `layers.adaptive_softmax`).
        activation: feed-forward activation.
        dropout: float, on the embeddings, the relative encodings, both residual branches, after the
            feed-forward activation and on the output.
        attention_dropout: float, on the attention probabilities (`dropatt`).
        layer_norm_epsilon, initializer_range: floats.
        untie_r: bool, per-layer u and v.
        clamp_len: int, cap on relative distances (-1: none).

    Call args:
        token_ids, padding_mask: [B, L].
        memory: optional [num_layers, B, M, H], what each layer read on the previous segment.
        attention_window: optional int, see `key_mask`.
        memory_mask: optional [B, M], 0 on memory slots that hold no state (see `key_mask`).

    Returns:
        dict: `sequence` [B, L, H]; `layer_inputs` [num_layers, B, L, H], what each layer read (the next
        segment's memory).
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, cutoffs=(), div_val=1,
                 embedding_size=None, activation="relu", dropout=0.1, attention_dropout=0.0,
                 layer_norm_epsilon=1e-5, initializer_range=0.02, untie_r=False, clamp_len=-1, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.cutoffs = list(cutoffs)
        self.div_val = div_val
        self.embedding_size = embedding_size
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.untie_r = untie_r
        self.clamp_len = clamp_len
        self.embedding = AdaptiveEmbedding(vocab_size, hidden_size, cutoffs, div_val, embedding_size,
                                           initializer_range, dtype=self.dtype_policy, name="word_embedding")
        self.blocks = [
            TwoStreamBlock(num_heads, intermediate_size, activation=activation, dropout=dropout,
                           layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
                           attention_dropout=attention_dropout, causal=True, segments=False,
                           dtype=self.dtype_policy, name=f"layer_{index}")
            for index in range(num_layers)
        ]
        self.dropout_layer = HashedDropout(dropout, dtype=self.dtype_policy)

    def build(self, token_ids_shape=None, *args, **kwargs):
        self.embedding.build((None, None))
        layers = (self.num_layers,) if self.untie_r else ()
        self.relative_biases = self.add_weight(
            shape=(*layers, 2, self.num_heads, self.hidden_size // self.num_heads),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range), name="relative_biases")
        for block in self.blocks:
            block.build((None, None, self.hidden_size))
        self.built = True

    def layer_biases(self, index):
        """(content u, position v, no segment bias) of layer `index`."""
        biases = self.relative_biases[index] if self.untie_r else self.relative_biases
        return biases[0], biases[1], None

    def call(self, token_ids, padding_mask=None, memory=None, attention_window=None, memory_mask=None,
             training=None):
        length = ops.shape(token_ids)[1]
        memory_length = 0 if memory is None else ops.shape(memory)[2]
        h = self.dropout_layer(self.embedding(token_ids), training=training)
        positions = sinusoidal_relative_positions(length, memory_length + length, self.hidden_size, self.clamp_len)
        positions = self.dropout_layer(ops.cast(positions, h.dtype), training=training)
        mask = key_mask(padding_mask, memory_length, length, attention_window, memory_mask)
        layer_inputs = []
        for index, block in enumerate(self.blocks):
            layer_inputs.append(h)
            h, _ = block(h, positions, self.layer_biases(index), mask,
                         memory=None if memory is None else memory[index], training=training)
        return {"sequence": self.dropout_layer(h, training=training), "layer_inputs": ops.stack(layer_inputs)}

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, num_layers=self.num_layers, num_heads=self.num_heads,
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size, cutoffs=self.cutoffs,
            div_val=self.div_val, embedding_size=self.embedding_size, activation=self.activation,
            dropout=self.dropout, attention_dropout=self.attention_dropout,
            layer_norm_epsilon=self.layer_norm_epsilon, initializer_range=self.initializer_range,
            untie_r=self.untie_r, clamp_len=self.clamp_len,
        )
        return config
