"""SpanBERT pretraining: masked LM + span boundary objective, no next-sentence prediction."""

import keras

from keras_bertology.layers import MaskedLMHead, SpanBoundaryHead
from keras_bertology.models.bert.pretrainer import masked_lm_output
from keras_bertology.models.pretrainer import Objective, Pretrainer, scored

# Span boundary objective: the same targets as MLM, predicted from the span's boundaries.
SBO = Objective("sbo", label_key="mask_ids", weight_key="mask_weights", predicts_tokens=True)
SBO_IN_CHUNKS = scored(SBO)
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
        loss_chunk_size: int; > 0 scores both heads' targets (then an input, `mask_ids`) that many
            positions at a time instead of keeping [positions, vocabulary] logits for the gradient, as
            `BertPretrainer` does.

    Example:
        >>> from keras_bertology.models import BertBackbone
        >>> from keras_bertology.models.spanbert import SpanBertPretrainer
        >>> backbone = BertBackbone(vocab_size=100, num_layers=1, num_heads=2,
        ...                         hidden_size=16, intermediate_size=32)
        >>> SpanBertPretrainer(backbone, position_embedding_size=8).objectives
        ['mlm', 'sbo']
    """

    def __init__(self, backbone, max_span_positions=32, position_embedding_size=200, loss_chunk_size=0, **kwargs):
        inputs = dict(backbone.input)
        for name in ("mask_positions", *SPAN_INPUTS):
            inputs[name] = keras.Input((None,), dtype="int32", name=name)
        sequence = backbone({k: v for k, v in inputs.items() if k in backbone.input})["sequence_output"]
        common = dict(token_embedding=backbone.token_embedding, activation=backbone.activation,
                      layer_norm_epsilon=backbone.layer_norm_epsilon, initializer_range=backbone.initializer_range,
                      dtype=backbone.dtype_policy, loss_chunk_size=loss_chunk_size)
        mlm_head = MaskedLMHead(backbone.vocab_size, name="mlm_head", **common)
        mlm_output, mlm, served_logits = masked_lm_output(mlm_head, sequence, inputs)
        sbo_head = SpanBoundaryHead(backbone.vocab_size, max_span_positions=max_span_positions,
                                    position_embedding_size=position_embedding_size, name="sbo_head", **common)
        boundaries = [inputs[name] for name in SPAN_INPUTS]
        # In chunks, the span's boundaries score the masked LM's targets too: the input masked_lm_output added.
        sbo_output = sbo_head(sequence, *boundaries, inputs["mask_ids"]) if loss_chunk_size \
            else sbo_head(sequence, *boundaries)
        outputs = {"mlm": mlm_output, "sbo": sbo_output}
        super().__init__(backbone, inputs, outputs, [mlm, SBO_IN_CHUNKS if loss_chunk_size else SBO], **kwargs)
        self.served_mlm_logits = served_logits
        self.max_span_positions = max_span_positions
        self.position_embedding_size = position_embedding_size
        self.loss_chunk_size = loss_chunk_size

    def get_config(self):
        config = {**super().get_config(), "max_span_positions": self.max_span_positions,
                  "position_embedding_size": self.position_embedding_size}
        if self.loss_chunk_size:
            config["loss_chunk_size"] = self.loss_chunk_size
        return config
