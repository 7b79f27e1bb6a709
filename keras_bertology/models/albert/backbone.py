"""The ALBERT encoder: factorized embeddings and cross-layer parameter sharing."""

import keras

from keras_bertology.layers import SharedEncoderStack, TokenPositionSegmentEmbedding, merge_attention_masks
from keras_bertology.models.backbone import Backbone, check_heads, encoder_inputs, first_token_pooler


@keras.saving.register_keras_serializable(package="keras_bertology")
class AlbertBackbone(Backbone):
    """Embeddings of width `embedding_size` projected to `hidden_size`, then shared encoder layers.

    The token, position and segment tables (and their LayerNorm) are
    E-dimensional; one dense layer maps them to H, so the vocabulary costs
    V x E instead of V x H parameters. The layers share weights as
    `SharedEncoderStack` describes. Outputs: `sequence_output` [B, L, H] and,
    with `use_pooler`, `pooled_output` [B, H] (dense + tanh over the first token).

    Args:
        vocab_size, num_layers, num_heads, hidden_size, intermediate_size: ints.
        embedding_size: int, width E of the embedding tables (128 in ALBERT).
        num_groups: int, groups of distinct layer weights (1: all layers share).
        inner_group_num: int, blocks per group.
        activation: str, "gelu_approximate" as ALBERT's `gelu_new`.
        use_pooler: bool, add the pooler (masked-LM-only checkpoints have none).
        max_positions, num_segments, dropout, attention_dropout,
        layer_norm_epsilon, initializer_range, dtype: as for `BertBackbone`.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.albert.backbone import AlbertBackbone
        >>> backbone = AlbertBackbone(vocab_size=100, num_layers=4, num_heads=2, hidden_size=16,
        ...                           intermediate_size=32, embedding_size=8)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"),
        ...                 "segment_ids": ops.zeros((1, 8), "int32"),
        ...                 "padding_mask": ops.ones((1, 8), "int32")})
        >>> tuple(out["sequence_output"].shape), backbone.count_params()
        ((1, 8, 16), 7568)
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, embedding_size=128,
                 num_groups=1, inner_group_num=1, activation="gelu_approximate", max_positions=512,
                 num_segments=2, use_pooler=True, dropout=0.0, attention_dropout=0.0, layer_norm_epsilon=1e-12,
                 initializer_range=0.02, dtype=None, **kwargs):
        check_heads(hidden_size, num_heads)
        inputs = encoder_inputs(num_segments)
        embeddings = TokenPositionSegmentEmbedding(
            vocab_size, embedding_size, max_positions=max_positions, num_segments=num_segments,
            dropout=dropout, layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
            dtype=dtype, name="embeddings",
        )(inputs["token_ids"], inputs.get("segment_ids"))
        x = keras.layers.Dense(
            hidden_size, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=dtype, name="embedding_projection",
        )(embeddings)
        x = SharedEncoderStack(
            num_layers, num_heads, intermediate_size, num_groups=num_groups, inner_group_num=inner_group_num,
            activation=activation, dropout=dropout, attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range, dtype=dtype,
            name="encoder",
        )(x, attention_mask=merge_attention_masks(inputs["padding_mask"]))
        outputs = {"sequence_output": x}
        if use_pooler:
            outputs["pooled_output"] = first_token_pooler(x, hidden_size, initializer_range, dtype)
        config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, embedding_size=embedding_size, num_groups=num_groups,
            inner_group_num=inner_group_num, activation=activation, max_positions=max_positions,
            num_segments=num_segments, use_pooler=use_pooler, dropout=dropout, attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
        )
        super().__init__(inputs, outputs, config, dtype=dtype, **kwargs)
