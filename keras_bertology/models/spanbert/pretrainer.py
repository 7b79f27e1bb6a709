"""SpanBERT pretraining: masked LM + span boundary objective, no next-sentence prediction."""

import keras

from keras_bertology.layers import MaskedLMHead, SpanBoundaryHead
from keras_bertology.models.bert.pretrainer import MLM
from keras_bertology.models.pretrainer import Objective, Pretrainer

# Span boundary objective: the same targets as MLM, predicted from the span's boundaries.
SBO = Objective("sbo", label_key="mask_ids", weight_key="mask_weights", predicts_tokens=True)
SPAN_INPUTS = ("span_left", "span_right", "span_offset")


@keras.saving.register_keras_serializable(package="keras_bertology")
class SpanBertPretrainer(Pretrainer):
    """Backbone + MLM head + span boundary head, both decoders tied to the token embeddings.

    Inputs: the backbone's inputs, `mask_positions` [B, P] and the span
    boundary features `span_left`, `span_right`, `span_offset` [B, P] (from
    `models.spanbert.masking.span_masker`). Outputs: `mlm` and `sbo` [B, P, V]
    logits; the loss is their sum, reported as `mlm_*` and `sbo_*`.

    Args:
        backbone: a `BertBackbone`.
        max_span_positions: rows of the boundary head's relative position table.
        position_embedding_size: width of that table (200 in SpanBERT).

    Example:
        >>> from keras_bertology.models import BertBackbone
        >>> from keras_bertology.models.spanbert import SpanBertPretrainer
        >>> backbone = BertBackbone(vocab_size=100, num_layers=1, num_heads=2,
        ...                         hidden_size=16, intermediate_size=32)
        >>> SpanBertPretrainer(backbone, position_embedding_size=8).objectives
        ['mlm', 'sbo']
    """

    def __init__(self, backbone, max_span_positions=32, position_embedding_size=200, **kwargs):
        inputs = dict(backbone.input)
        for name in ("mask_positions", *SPAN_INPUTS):
            inputs[name] = keras.Input((None,), dtype="int32", name=name)
        sequence = backbone({k: v for k, v in inputs.items() if k in backbone.input})["sequence_output"]
        common = dict(token_embedding=backbone.token_embedding, activation=backbone.activation,
                      layer_norm_epsilon=backbone.layer_norm_epsilon,
                      initializer_range=backbone.initializer_range, dtype=backbone.dtype_policy)
        outputs = {
            "mlm": MaskedLMHead(backbone.vocab_size, name="mlm_head", **common)(sequence, inputs["mask_positions"]),
            "sbo": SpanBoundaryHead(
                backbone.vocab_size, max_span_positions=max_span_positions,
                position_embedding_size=position_embedding_size, name="sbo_head", **common,
            )(sequence, *(inputs[name] for name in SPAN_INPUTS)),
        }
        super().__init__(backbone, inputs, outputs, [MLM, SBO], **kwargs)
        self.max_span_positions = max_span_positions
        self.position_embedding_size = position_embedding_size

    def get_config(self):
        return {**super().get_config(), "max_span_positions": self.max_span_positions,
                "position_embedding_size": self.position_embedding_size}
