"""The DeBERTa encoder: BERT's post-LN blocks with disentangled attention over relative positions."""

import keras

from keras_bertology.layers import (
    DisentangledSelfAttention,
    RelativeEmbeddings,
    RelativePositionTable,
    TokenPositionSegmentEmbedding,
    TransformerEncoderBlock,
    merge_attention_masks,
)
from keras_bertology.layers.disentangled_attention import POSITION_TERMS
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.models.backbone import Backbone, check_heads, encoder_inputs


@keras.saving.register_keras_serializable(package="keras_bertology")
class DebertaBackbone(Backbone):
    """DeBERTa (v1) and DeBERTa-v2/v3: `{"sequence_output": [B, L, H]}`, no pooler (a classifier reads
    the first token).

    The embeddings sum the token table (and, where `position_biased_input`,
    an absolute position table, and segment embeddings where `num_segments`),
    project to the hidden size where `embedding_size` differs, LayerNorm, and
    zero the padding positions. Each block's attention adds c2p and p2c terms
    (`DisentangledSelfAttention`) over one relative table the blocks share;
    v2's optional convolution mixes the embeddings into the first block's
    output.

    Args:
        vocab_size, num_layers, num_heads, hidden_size, intermediate_size: int.
        activation: str, feed-forward activation ("gelu": the exact GELU).
        max_positions: int, the absolute position table's size, and the relative
            reach when `max_relative_positions` is None.
        position_biased_input: bool, add absolute positions to the embeddings (v1
            configs may; DeBERTa's released models do not).
        num_segments: int, segment vocabulary (0: none, DeBERTa's).
        position_terms: the attention's terms among "c2p" and "p2c".
        max_relative_positions: int or None (max_positions).
        position_buckets: int, v2's log buckets (0: none; the table is then
            2 x max_relative_positions rows).
        share_attention_key: bool, project the relative table with each layer's
            content query/key projections (v2's share_att_key).
        norm_relative_embeddings: bool, LayerNorm the relative table (v2's norm_rel_ebd).
        position_key_bias: bool, a bias on the c2p position projection (v2: yes; v1: no).
        content_key_bias: bool, a bias on the content key projection (v2: yes; v1: no).
        conv_kernel_size: int, v2's convolution after the first block (0: none; odd).
        conv_groups: int.
        conv_activation: str.
        embedding_size: int or None (hidden_size).
        dropout, attention_dropout: float.
        layer_norm_epsilon: float (1e-7).
        initializer_range: float.
        dtype: optional dtype policy.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.deberta import DebertaBackbone
        >>> backbone = DebertaBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                            intermediate_size=32, position_buckets=8, max_relative_positions=32)
        >>> out = backbone({"token_ids": ops.ones((1, 6), "int32"), "padding_mask": ops.ones((1, 6), "int32")})
        >>> tuple(out["sequence_output"].shape)
        (1, 6, 16)
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, activation="gelu",
                 max_positions=512, position_biased_input=False, num_segments=0, position_terms=POSITION_TERMS,
                 max_relative_positions=None, position_buckets=256, share_attention_key=True,
                 norm_relative_embeddings=True, position_key_bias=True, content_key_bias=True, conv_kernel_size=0,
                 conv_groups=1, conv_activation="tanh", embedding_size=None, dropout=0.1, attention_dropout=0.1,
                 layer_norm_epsilon=1e-7, initializer_range=0.02, dtype=None, **kwargs):
        check_heads(hidden_size, num_heads)
        if conv_kernel_size and conv_kernel_size % 2 == 0:
            raise ValueError(f"conv_kernel_size must be odd (the convolution keeps the length); got "
                             f"{conv_kernel_size}")
        position_terms = tuple(position_terms)
        reach = max_relative_positions or max_positions
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        width = embedding_size or hidden_size
        inputs = encoder_inputs(num_segments)
        embeddings = TokenPositionSegmentEmbedding(
            vocab_size, width, max_positions=max_positions if position_biased_input else 0,
            num_segments=num_segments, dropout=0.0, layer_norm_epsilon=None, initializer_range=initializer_range,
            dtype=dtype, name="embeddings")
        x = embeddings(inputs["token_ids"], inputs.get("segment_ids"))
        if width != hidden_size:
            x = keras.layers.Dense(hidden_size, use_bias=False, kernel_initializer=init, dtype=dtype,
                                   name="embedding_projection")(x)
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype, name="embedding_norm")(x)
        real = keras.ops.cast(keras.ops.expand_dims(inputs["padding_mask"], -1), x.dtype)
        x = HashedDropout(dropout, dtype=dtype, name="embedding_dropout")(x * real)
        table, index = RelativePositionTable(
            position_buckets or reach, hidden_size, position_buckets=position_buckets, max_position=reach,
            layer_norm_epsilon=layer_norm_epsilon if norm_relative_embeddings else None,
            initializer_range=initializer_range, dtype=dtype, name="relative_embeddings")(x)
        terms = (RelativeEmbeddings(table, index),)
        attention_mask = merge_attention_masks(inputs["padding_mask"])
        embedded = x
        for position in range(num_layers):
            x = TransformerEncoderBlock(
                num_heads, intermediate_size, activation=activation, dropout=dropout,
                attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon,
                initializer_range=initializer_range, attention_class=DisentangledSelfAttention,
                attention_options=dict(position_terms=position_terms, share_key=share_attention_key,
                                       position_key_bias=position_key_bias, content_key_bias=content_key_bias,
                                       position_dropout=dropout),
                dtype=dtype, name=f"encoder_block_{position}")(x, attention_mask=attention_mask, score_terms=terms)
            if position == 0 and conv_kernel_size:
                x = _convolution(embedded, x, real, hidden_size, conv_kernel_size, conv_groups, conv_activation,
                                 dropout, layer_norm_epsilon, init, dtype)
        config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, activation=activation, max_positions=max_positions,
            position_biased_input=position_biased_input, num_segments=num_segments,
            position_terms=list(position_terms), max_relative_positions=max_relative_positions,
            position_buckets=position_buckets, share_attention_key=share_attention_key,
            norm_relative_embeddings=norm_relative_embeddings, position_key_bias=position_key_bias,
            content_key_bias=content_key_bias,
            conv_kernel_size=conv_kernel_size, conv_groups=conv_groups, conv_activation=conv_activation,
            embedding_size=embedding_size, dropout=dropout, attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range)
        super().__init__(inputs, {"sequence_output": x}, config, dtype=dtype, **kwargs)
        self.embeddings = embeddings

    embedding_layer_names = ("embeddings", "embedding_projection", "embedding_norm")

    @property
    def token_embedding(self):
        return self.embeddings.token_embedding


def _convolution(embedded, block_output, real, hidden_size, kernel_size, groups, activation, dropout, epsilon, init,
                 dtype):
    """v2's ConvLayer: LayerNorm(block output + act(conv(embeddings) at real positions)), padding zeroed."""
    from keras_bertology.layers.activations import get_activation

    mixed = keras.layers.Conv1D(hidden_size, kernel_size, padding="same", groups=groups, kernel_initializer=init,
                                dtype=dtype, name="conv")(embedded)
    mixed = HashedDropout(dropout, dtype=dtype, name="conv_dropout")(mixed * real)
    mixed = keras.layers.Activation(get_activation(activation), dtype=dtype, name="conv_activation")(mixed)
    normed = keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name="conv_norm")(block_output + mixed)
    return normed * real
