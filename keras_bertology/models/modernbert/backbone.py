"""The ModernBERT encoder: rotary positions, alternating global and sliding-window attention, GeGLU,
pre-norm blocks without biases."""

import keras

from keras_bertology.layers import (
    MultiHeadSelfAttention,
    TokenPositionSegmentEmbedding,
    TransformerEncoderBlock,
    document_positions,
    merge_attention_masks,
    same_document_mask,
)
from keras_bertology.models.backbone import Backbone, check_heads, encoder_inputs


@keras.saving.register_keras_serializable(package="keras_bertology")
class ModernBertBackbone(Backbone):
    """Token embeddings and their norm (no position or segment table), pre-norm encoder blocks, a final
    norm. Every norm is a scale without bias and no dense layer has a bias. Layer i attends globally with
    rotary base `global_rotary_base` when i % `global_every` == 0, else within `local_window` tokens
    (`local_window` / 2 on each side) with `rotary_base`. The first block takes the embedding norm's output
    as its attention input, with no norm of its own. The feed-forward is GeGLU: GELU(x W0) * (x W1).

    Inputs: `token_ids` and `padding_mask` [B, L] int32. Output: `sequence_output` [B, L, H].

    Args:
        vocab_size, num_layers, num_heads, hidden_size: ints.
        intermediate_size: int, width of each of the two GeGLU projections.
        activation: str, the GeGLU's activation ("gelu", exact).
        max_positions: int, the longest text the model serves (no table depends on it).
        local_window: int, tokens a local layer sees besides the query's own.
        global_every: int, every how many layers one attends globally (from the first).
        rotary_base, global_rotary_base: floats, the rotary bases of local and global layers.
        dropout: float, on the embeddings and both residual branches.
        attention_dropout: float, on the attention probabilities.
        layer_norm_epsilon: float.
        initializer_range: float.
        packed_documents: bool, rows hold several documents (unpadded packing): `padding_mask` numbers
            them (`layers.documents`), tokens attend within their own and rotary positions restart in each.
        dtype: optional dtype policy.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.modernbert.backbone import ModernBertBackbone
        >>> backbone = ModernBertBackbone(vocab_size=100, num_layers=3, num_heads=2, hidden_size=16,
        ...                               intermediate_size=24, local_window=4)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"), "padding_mask": ops.ones((1, 8), "int32")})
        >>> tuple(out["sequence_output"].shape)
        (1, 8, 16)
    """

    def __init__(
        self,
        vocab_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        activation="gelu",
        max_positions=8192,
        local_window=128,
        global_every=3,
        rotary_base=10000.0,
        global_rotary_base=160000.0,
        dropout=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-5,
        initializer_range=0.02,
        packed_documents=False,
        dtype=None,
        **kwargs,
    ):
        check_heads(hidden_size, num_heads)
        inputs = encoder_inputs(0)
        embeddings = TokenPositionSegmentEmbedding(
            vocab_size, hidden_size, max_positions=0, num_segments=0, dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon, layer_norm_bias=False, initializer_range=initializer_range,
            dtype=dtype, name="embeddings",
        )
        x = embeddings(inputs["token_ids"])
        padding = inputs["padding_mask"]
        attention_mask = same_document_mask(padding) if packed_documents else merge_attention_masks(padding)
        positions = document_positions(padding) if packed_documents else None
        attention_options = dict(rotary_base=rotary_base, window=local_window, global_every=global_every,
                                 global_options=dict(rotary_base=global_rotary_base, window=None))
        for index in range(num_layers):
            x = TransformerEncoderBlock(
                num_heads, intermediate_size, activation=activation, dropout=dropout,
                attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon, norm_first=True,
                initializer_range=initializer_range, attention_bias=False, norm="unbiased_layer_norm",
                feed_forward_bias=False, gated_feed_forward=True, attention_input_norm=index > 0,
                attention_options=MultiHeadSelfAttention.options_for_layer(attention_options, index),
                dtype=dtype, name=f"encoder_block_{index}",
            )(x, attention_mask=attention_mask, positions=positions)
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, center=False, dtype=dtype,
                                            name="final_norm")(x)
        config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, activation=activation, max_positions=max_positions,
            local_window=local_window, global_every=global_every, rotary_base=rotary_base,
            global_rotary_base=global_rotary_base, dropout=dropout, attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
        )
        if packed_documents:
            config.update(packed_documents=True)
        super().__init__(inputs, {"sequence_output": x}, config, dtype=dtype, **kwargs)
        self.embeddings = embeddings
