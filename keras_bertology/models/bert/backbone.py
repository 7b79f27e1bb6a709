"""The BERT encoder (backbone), also used by RoBERTa with other settings."""

import keras

from keras_bertology.layers import (
    TokenPositionSegmentEmbedding,
    TransformerEncoderBlock,
    attention_kind,
    document_positions,
    merge_attention_masks,
    same_document_mask,
)
from keras_bertology.models.backbone import Backbone, check_heads, encoder_inputs, first_token_pooler


@keras.saving.register_keras_serializable(package="keras_bertology")
class BertBackbone(Backbone):
    """A stack of Transformer encoder blocks over token/position/segment embeddings.

    A functional Keras model built from plain arguments, so `get_config` and
    `.keras` save/load just work. Inputs are a dict: `token_ids` and
    `padding_mask` [B, L] int32, plus `segment_ids` when `num_segments > 0`.
    Outputs are a dict: `sequence_output` [B, L, H] and, with `use_pooler`,
    `pooled_output` [B, H] (dense + tanh over the first token).

    Args:
        vocab_size: int.
        num_layers: int.
        num_heads: int.
        hidden_size: int.
        intermediate_size: int, feed-forward width.
        activation: str, feed-forward activation: "gelu" (exact, BERT/RoBERTa) or
            another name from `layers.activations` (e.g. "gelu_approximate").
        max_positions: int, size of the absolute position table.
        num_segments: int, segment vocabulary (2 for BERT, 0 for RoBERTa).
        use_pooler: bool, add the tanh pooler over the first token.
        dropout: float, hidden dropout.
        attention_dropout: float, attention-probability dropout.
        layer_norm_epsilon: float, 1e-12 for BERT, 1e-5 for RoBERTa.
        norm_first: bool, pre-LN blocks plus a final LayerNorm.
        causal: bool, each token attends to itself and the tokens before it
            only (an autoregressive LM), and positions count real tokens only
            (`real_token_positions`), so left- and right-padded rows agree.
        initializer_range: float.
        embedding_size: int, width of the embedding tables when it differs from
            hidden_size (ELECTRA-small: 128 projected to 256); None for hidden_size.
        attention_type: str, the attention of every block, a name of `layers.ATTENTION_KINDS`: "full"
            (BERT's), "block_sparse" (BigBird's, `BlockSparseSelfAttention`), ...
        attention_options: dict, further arguments of that attention (e.g. block_size); the attention's
            `options_for_layer` adapts them per layer (each block-sparse layer draws its own plan).
        packed_documents: bool, rows hold several documents (unpadded packing): `padding_mask` numbers
            them (`layers.documents`), tokens attend within their own and positions restart in each.
        embeddings: an existing `TokenPositionSegmentEmbedding` to use instead
            of a new one, so two encoders share one set of embedding variables
            (ELECTRA's generator and discriminator). It is not serialized: the
            model owning both passes it again on reload.
        dtype: optional dtype policy, e.g. "mixed_bfloat16".

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models import BertBackbone
        >>> backbone = BertBackbone(vocab_size=100, num_layers=2, num_heads=2,
        ...                         hidden_size=16, intermediate_size=32)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"),
        ...                 "segment_ids": ops.zeros((1, 8), "int32"),
        ...                 "padding_mask": ops.ones((1, 8), "int32")})
        >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
        ((1, 8, 16), (1, 16))
    """

    def __init__(
        self,
        vocab_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        activation="gelu",
        max_positions=512,
        num_segments=2,
        use_pooler=True,
        dropout=0.1,
        attention_dropout=0.1,
        layer_norm_epsilon=1e-12,
        norm_first=False,
        initializer_range=0.02,
        embedding_size=None,
        causal=False,
        attention_type="full",
        attention_options=None,
        packed_documents=False,
        embeddings=None,
        dtype=None,
        **kwargs,
    ):
        check_heads(hidden_size, num_heads)
        if packed_documents and causal:
            raise ValueError("packed_documents is for encoders: a causal model's positions count real tokens")
        width = embedding_size or hidden_size
        if embeddings is None:
            embeddings = TokenPositionSegmentEmbedding(
                vocab_size,
                width,
                max_positions=max_positions,
                num_segments=num_segments,
                dropout=dropout,
                layer_norm_epsilon=None if norm_first else layer_norm_epsilon,
                initializer_range=initializer_range,
                dtype=dtype,
                name="embeddings",
            )
        _check_shared_embeddings(embeddings, vocab_size, width, max_positions, num_segments)
        inputs = encoder_inputs(num_segments)
        position_ids = real_token_positions(inputs["padding_mask"]) if causal else None
        if packed_documents:
            position_ids = document_positions(inputs["padding_mask"])
        x = embeddings(inputs["token_ids"], inputs.get("segment_ids"), position_ids)
        if width != hidden_size:
            x = keras.layers.Dense(
                hidden_size, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
                dtype=dtype, name="embedding_projection",
            )(x)
        attention_mask = (same_document_mask(inputs["padding_mask"]) if packed_documents
                          else merge_attention_masks(inputs["padding_mask"]))
        attention_class = attention_kind(attention_type)
        attention_options = dict(attention_options or {})
        shared_terms = attention_class.shared_score_terms(attention_options, x)
        for index in range(num_layers):
            x = TransformerEncoderBlock(
                num_heads,
                intermediate_size,
                activation=activation,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                norm_first=norm_first,
                initializer_range=initializer_range,
                causal=causal,
                attention_class=attention_class,
                attention_options=attention_class.options_for_layer(attention_options, index),
                dtype=dtype,
                name=f"encoder_block_{index}",
            )(x, attention_mask=attention_mask, score_terms=shared_terms)
        if norm_first:
            x = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="final_norm"
            )(x)
        outputs = {"sequence_output": x}
        if use_pooler:
            outputs["pooled_output"] = first_token_pooler(x, hidden_size, initializer_range, dtype)
        config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, activation=activation, max_positions=max_positions,
            num_segments=num_segments, use_pooler=use_pooler, dropout=dropout,
            attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon,
            norm_first=norm_first, initializer_range=initializer_range, embedding_size=embedding_size,
            causal=causal,
        )
        if attention_type != "full":
            config.update(attention_type=attention_type, attention_options=attention_options)
        if packed_documents:
            config.update(packed_documents=True)
        super().__init__(inputs, outputs, config, dtype=dtype, **kwargs)
        self.embeddings = embeddings

    @property
    def token_embedding(self):
        return self.embeddings.token_embedding


def real_token_positions(padding_mask):
    """[B, L] int32 position of each token among the real tokens of its row (0 for padding before them)."""
    return keras.ops.maximum(keras.ops.cumsum(keras.ops.cast(padding_mask, "int32"), axis=1) - 1, 0)


def _check_shared_embeddings(embeddings, vocab_size, width, max_positions, num_segments):
    """A shared embedding layer must have the tables this encoder would have built."""
    expected = (vocab_size, width, max_positions, num_segments)
    found = (embeddings.vocab_size, embeddings.embedding_dim, embeddings.max_positions, embeddings.num_segments)
    if found != expected:
        raise ValueError(
            f"shared embeddings have (vocab, width, positions, segments) = {found}, this encoder needs {expected}"
        )
