"""The XLNet encoder: word embeddings, relative positions and segments, two-stream blocks, memory."""

import keras
from keras import ops

from keras_bertology.layers import TwoStreamBlock, different_segments, sinusoidal_relative_positions
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.embeddings import token_table


def stream_masks(perm_mask, padding_mask, memory_length):
    """(content mask, query mask), [B, L, M + L] with 1 where a position may attend, or (None, None).

    `perm_mask` [B, L, L] is XLNet's: 1 where query i may NOT see position j;
    `padding_mask` [B, L] hides padding keys. Memory is visible to all. The
    content stream additionally sees itself, unless its own position is both
    perm-blocked and padding (the original's arithmetic: blocked if
    perm + padding - self > 0).
    """
    if perm_mask is None and padding_mask is None:
        return None, None
    blocked = 0.0
    if perm_mask is not None:
        blocked = ops.cast(perm_mask, "float32")
    if padding_mask is not None:
        blocked = blocked + ops.expand_dims(1.0 - ops.cast(padding_mask, "float32"), 1)
    length = ops.shape(padding_mask if padding_mask is not None else perm_mask)[1]
    blocked = ops.broadcast_to(blocked, (ops.shape(blocked)[0], length, length))
    itself = ops.eye(length, dtype="float32")
    if memory_length:
        visible_memory = ops.zeros((ops.shape(blocked)[0], length, memory_length), "float32")
        blocked = ops.concatenate([visible_memory, blocked], axis=2)
        itself = ops.concatenate([ops.zeros((length, memory_length), "float32"), itself], axis=1)
    query_mask = ops.cast(blocked <= 0, "int32")
    content_mask = ops.cast(blocked - itself <= 0, "int32")
    return content_mask, query_mask


@keras.saving.register_keras_serializable(package="keras_bertology")
class XLNetEncoder(keras.layers.Layer):
    """XLNet's network, as one layer that the backbone (content stream) and the pretrainer (both
    streams, memory) call with the same weights.

    No absolute positions and no segment table: positions enter every layer's
    attention as sinusoidal relative encodings, segments as "same or
    different" vectors. `untie_r` gives each layer its own content, position
    and segment biases; otherwise one set is shared.

    Args:
        vocab_size, num_layers, num_heads, hidden_size, intermediate_size: ints.
        activation: feed-forward activation ("gelu" exact, "gelu_approximate" the original's tanh form).
        dropout: float, XLNet's one dropout rate.
        layer_norm_epsilon, initializer_range: floats.
        untie_r: bool, per-layer relative biases.
        clamp_len: int, cap on relative distances (-1: none).

    Call args:
        token_ids, segment_ids, padding_mask: [B, L].
        perm_mask: optional [B, L, L] (1: may not attend), XLNet's factorization order.
        target_mapping: optional [B, P, L]: run the query stream for these P slots.
        memory: optional [num_layers, B, M, H] states of the previous segment.
        bi_data: the second half of the batch reads its text backwards
            (negated distances), as in XLNet's pretraining batches.

    Returns:
        dict: `content` [B, L, H]; `query` [B, P, H] with `target_mapping`;
        `layer_inputs` [num_layers, B, L, H], what each layer read (the next
        segment's memory).
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, activation="gelu",
                 dropout=0.1, layer_norm_epsilon=1e-12, initializer_range=0.02, untie_r=True, clamp_len=-1,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.untie_r = untie_r
        self.clamp_len = clamp_len
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.word_embedding = token_table(vocab_size, hidden_size, init, self.dtype_policy, "word_embedding")
        self.blocks = [
            TwoStreamBlock(num_heads, intermediate_size, activation=activation, dropout=dropout,
                           layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
                           dtype=self.dtype_policy, name=f"layer_{index}")
            for index in range(num_layers)
        ]
        self.dropout_layer = HashedDropout(dropout, dtype=self.dtype_policy)

    def build(self, token_ids_shape=None, *args, **kwargs):
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        head_dim = self.hidden_size // self.num_heads
        self.word_embedding.build((None, None))
        self.mask_embedding = self.add_weight(shape=(self.hidden_size,), initializer=init, name="mask_embedding")
        layers = (self.num_layers,) if self.untie_r else ()
        self.relative_biases = self.add_weight(shape=(*layers, 3, self.num_heads, head_dim), initializer=init,
                                               name="relative_biases")
        for block in self.blocks:
            block.build((None, None, self.hidden_size))
        self.built = True

    def layer_biases(self, index):
        """(content, position, segment) biases [N, D] of layer `index`."""
        biases = self.relative_biases[index] if self.untie_r else self.relative_biases
        return biases[0], biases[1], biases[2]

    def call(self, token_ids, segment_ids=None, padding_mask=None, perm_mask=None, target_mapping=None,
             memory=None, bi_data=False, training=None):
        batch, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        memory_length = 0 if memory is None else ops.shape(memory)[2]
        content_mask, query_mask = stream_masks(perm_mask, padding_mask, memory_length)
        h = self.dropout_layer(self.word_embedding(token_ids), training=training)
        positions = sinusoidal_relative_positions(length, memory_length + length, self.hidden_size, self.clamp_len,
                                                  bi_data)
        positions = self.dropout_layer(ops.cast(positions, h.dtype), training=training)
        segments = None if segment_ids is None else different_segments(segment_ids, memory_length)
        streams = {}
        if target_mapping is not None:
            streams = self._query_stream(target_mapping, query_mask, segments, memory_length + length, h.dtype,
                                         training)
        layer_inputs = []
        for index, block in enumerate(self.blocks):
            layer_inputs.append(h)
            h, g = block(h, positions, self.layer_biases(index), content_mask, different_segment=segments,
                         memory=None if memory is None else memory[index], training=training, **streams)
            if g is not None:
                streams["g"] = g
        outputs = {"content": self.dropout_layer(h, training=training), "layer_inputs": ops.stack(layer_inputs)}
        if target_mapping is not None:
            outputs["query"] = self.dropout_layer(g, training=training)
        return outputs

    def _query_stream(self, target_mapping, query_mask, segments, key_length, dtype, training):
        """The query stream's start, `g` [B, P, H], and the rows of its target positions.

        A slot's position is the one its one-hot `target_mapping` row picks; an
        all-zero row (an unused slot) acts as position 0: its output is not
        transformers' (which zeroes its attention) but no loss reads it.
        """
        batch, slots = ops.shape(target_mapping)[0], ops.shape(target_mapping)[1]
        positions = ops.cast(ops.argmax(target_mapping, axis=-1), "int32")
        rows = ops.expand_dims(positions, -1)
        g = ops.broadcast_to(ops.cast(self.mask_embedding, dtype), (batch, slots, self.hidden_size))
        streams = {"g": self.dropout_layer(g, training=training), "query_positions": positions}
        streams["query_mask"] = (ops.ones((batch, slots, key_length), "int32") if query_mask is None
                                 else ops.take_along_axis(query_mask, rows, axis=1))
        if segments is not None:
            streams["query_different_segment"] = ops.take_along_axis(segments, rows, axis=1)
        return streams

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, num_layers=self.num_layers, num_heads=self.num_heads,
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size, activation=self.activation,
            dropout=self.dropout, layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range, untie_r=self.untie_r, clamp_len=self.clamp_len,
        )
        return config
