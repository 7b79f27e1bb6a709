"""T5's encoder-decoder stacks: RMS-normed pre-LN blocks without biases, bucketed relative position bias."""

import keras

from keras_bertology.layers import (
    RelativePositionBias,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    merge_attention_masks,
)
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.embeddings import token_table
from keras_bertology.models.backbone import Backbone, encoder_inputs

DECODER_INPUTS = ("decoder_token_ids", "decoder_padding_mask")


@keras.saving.register_keras_serializable(package="keras_bertology")
class T5Backbone(Backbone):
    """T5 (v1.0 and v1.1): a shared token table feeding an encoder stack and a decoder stack.

    Inputs are a dict of [B, L] int32: `token_ids` and `padding_mask` for the
    encoder, and, with decoder layers, `decoder_token_ids` and
    `decoder_padding_mask` (teacher forcing: the targets shifted right after
    the start token). Outputs: `sequence_output` [B, L, H], the encoder's
    states, and `decoder_sequence_output` [B, Ld, H]. With
    `num_decoder_layers=0` it is T5's encoder alone (`T5EncoderModel`), with
    an encoder family's inputs and output.

    Each stack: token embeddings (no positions, no scaling), dropout, blocks
    (pre-norm, RMS norm without mean or bias, attention without biases and
    without the 1/sqrt(d) scale, feed-forward without biases), a final RMS
    norm and dropout. The first layer of each stack holds a relative position
    bias (bidirectional buckets in the encoder, causal in the decoder) that
    every layer of the stack adds to its self-attention scores; the decoder's
    cross-attention has none.

    Args:
        vocab_size: int.
        num_layers: int, encoder layers.
        num_heads: int.
        hidden_size: int, T5's d_model.
        intermediate_size: int, T5's d_ff.
        head_dim: int, T5's d_kv; default hidden_size / num_heads.
        num_decoder_layers: int, default num_layers; 0 for the encoder alone.
        activation: str, feed-forward activation: "relu" (v1.0) or "gelu_approximate" (v1.1's gated GELU).
        gated_feed_forward: bool, v1.1's activation(x W0) * (x W1) hidden layer.
        num_buckets: int, relative position buckets.
        max_distance: int, offset from which all share the last bucket.
        dropout: float, every dropout of the model (T5's dropout_rate).
        layer_norm_epsilon: float.
        initializer_factor: float, T5's: scales every initial standard deviation.
        dtype: optional dtype policy.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.t5 import T5Backbone
        >>> backbone = T5Backbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                       intermediate_size=32)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"), "padding_mask": ops.ones((1, 8), "int32"),
        ...                 "decoder_token_ids": ops.ones((1, 3), "int32"),
        ...                 "decoder_padding_mask": ops.ones((1, 3), "int32")})
        >>> tuple(out["sequence_output"].shape), tuple(out["decoder_sequence_output"].shape)
        ((1, 8, 16), (1, 3, 16))
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, head_dim=None,
                 num_decoder_layers=None, activation="relu", gated_feed_forward=False, num_buckets=32,
                 max_distance=128, dropout=0.1, layer_norm_epsilon=1e-6, initializer_factor=1.0, dtype=None,
                 **kwargs):
        num_decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
        head_dim = head_dim or hidden_size // num_heads
        embeddings = token_table(vocab_size, hidden_size, keras.initializers.RandomNormal(stddev=initializer_factor),
                                 dtype, "embeddings")
        block_options = dict(
            activation=activation, dropout=dropout, attention_dropout=dropout, activation_dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon, norm_first=True, attention_bias=False, norm="rms_norm",
            feed_forward_bias=False, gated_feed_forward=gated_feed_forward, attention_scale=1.0,
            head_dim=head_dim, dtype=dtype)
        bias_options = dict(num_heads=num_heads, num_buckets=num_buckets, max_distance=max_distance,
                            initializer_range=initializer_factor * hidden_size ** -0.5, dtype=dtype)

        inputs = encoder_inputs(0)
        encoder_mask = merge_attention_masks(inputs["padding_mask"])
        encoder_stack = _Stack("encoder", [
            TransformerEncoderBlock(num_heads, intermediate_size, name=f"encoder_block_{index}", **block_options)
            for index in range(num_layers)], True, bias_options, dropout, layer_norm_epsilon, dtype)
        encoded = encoder_stack(embeddings(inputs["token_ids"]), attention_mask=encoder_mask)
        outputs = {"sequence_output": encoded}
        decoder_stack = None
        if num_decoder_layers:
            decoder_stack = _Stack("decoder", [
                TransformerDecoderBlock(num_heads, intermediate_size, name=f"decoder_block_{index}", **block_options)
                for index in range(num_decoder_layers)], False, bias_options, dropout, layer_norm_epsilon, dtype)
            inputs.update({name: keras.Input((None,), dtype="int32", name=name) for name in DECODER_INPUTS})
            outputs["decoder_sequence_output"] = _decode(decoder_stack, embeddings, inputs, encoded)
        config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, head_dim=head_dim, num_decoder_layers=num_decoder_layers,
            activation=activation, gated_feed_forward=gated_feed_forward, num_buckets=num_buckets,
            max_distance=max_distance, dropout=dropout, layer_norm_epsilon=layer_norm_epsilon,
            initializer_factor=initializer_factor,
        )
        super().__init__(inputs, outputs, config, dtype=dtype, **kwargs)
        self.embeddings, self.decoder_stack = embeddings, decoder_stack
        _initialize_as_t5(encoder_stack.blocks + self.decoder_blocks, hidden_size, head_dim, num_heads,
                          intermediate_size, initializer_factor)

    @property
    def token_embedding(self):
        return self.embeddings

    def text_encoder(self):
        """The encoder alone: `token_ids`, `padding_mask` -> `sequence_output` (what serving encodes a
        text with); the same layers and weights."""
        if not self.num_decoder_layers:
            return self
        names = ("token_ids", "padding_mask")
        return keras.Model({name: self.input[name] for name in names},
                           {"sequence_output": self.output["sequence_output"]}, name="t5_encoder")

    @property
    def decoder_blocks(self):
        """The decoder's blocks, in order (none for the encoder alone)."""
        return self.decoder_stack.blocks if self.decoder_stack else []

    def encoder_backbone(self):
        """This T5's encoder as a `T5Backbone` of its own (`num_decoder_layers=0`, `T5EncoderModel`), its
        weights copied: fine-tuning heads take an encoder's inputs and train no decoder."""
        if not self.num_decoder_layers:
            return self
        config = dict(self.get_config(), num_decoder_layers=0)
        config.pop("name")
        encoder = T5Backbone.from_config(config)
        for layer in encoder.layers:
            if layer.weights:
                layer.set_weights(self.get_layer(layer.name).get_weights())
        return encoder


def _decode(stack, embeddings, inputs, encoder_states):
    """The decoder `stack`'s states of `inputs` (decoder ids and mask, the encoder's padding mask)."""
    return stack(embeddings(inputs["decoder_token_ids"]), encoder_states=encoder_states,
                 attention_mask=merge_attention_masks(inputs["decoder_padding_mask"]),
                 encoder_mask=merge_attention_masks(inputs["padding_mask"]))


class _Stack:
    """One stack's layers, callable again on new inputs (the decoder alone, for generation): embedding
    dropout, the blocks with the relative position bias of the first layer added in each, the final
    RMS norm and dropout."""

    def __init__(self, prefix, blocks, bidirectional, bias_options, dropout, epsilon, dtype):
        self.blocks = blocks
        self.input_dropout = HashedDropout(dropout, dtype=dtype, name=f"{prefix}_embedding_dropout")
        self.bias = RelativePositionBias(bidirectional=bidirectional, name=f"{prefix}_position_bias", **bias_options)
        self.final_norm = keras.layers.RMSNormalization(epsilon=epsilon, dtype=dtype, name=f"{prefix}_final_norm")
        self.output_dropout = HashedDropout(dropout, dtype=dtype, name=f"{prefix}_output_dropout")

    def __call__(self, x, **inputs):
        x = self.input_dropout(x)
        terms = (self.bias(x, x),)
        for block in self.blocks:
            x = block(x, score_terms=terms, **inputs)
        return self.output_dropout(self.final_norm(x))


def _initialize_as_t5(blocks, hidden_size, head_dim, num_heads, intermediate_size, factor):
    """T5's initial standard deviations (Mesh TensorFlow's): each projection's by its fan-in, the query's
    also by the head width, which takes the place of the 1/sqrt(d) score scale."""
    def draw(dense, stddev):
        dense.kernel.assign(keras.random.normal(dense.kernel.shape, stddev=stddev, dtype=dense.kernel.dtype))

    for block in blocks:
        attentions = [block.attention] + ([block.cross_attention] if hasattr(block, "cross_attention") else [])
        for attention in attentions:
            draw(attention.query_dense, factor * (hidden_size * head_dim) ** -0.5)
            draw(attention.key_dense, factor * hidden_size ** -0.5)
            draw(attention.value_dense, factor * hidden_size ** -0.5)
            draw(attention.output_dense, factor * (num_heads * head_dim) ** -0.5)
        for dense in filter(None, (block.intermediate_dense, block.gate_dense)):
            draw(dense, factor * hidden_size ** -0.5)
        draw(block.output_dense, factor * intermediate_size ** -0.5)
