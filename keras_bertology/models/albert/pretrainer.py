"""ALBERT pretraining: masked LM + sentence-order prediction."""

import keras

from keras_bertology.layers import MaskedLMHead, PooledClassificationHead
from keras_bertology.models.bert.pretrainer import MLM
from keras_bertology.models.pretrainer import Objective, Pretrainer

# Sentence-order prediction: 1 when the two consecutive segments were swapped.
SOP = Objective("sop", label_key="sop_labels")


@keras.saving.register_keras_serializable(package="keras_bertology")
class AlbertPretrainer(Pretrainer):
    """AlbertBackbone + MLM head (H -> E, tied E x V decoder) + sentence-order head.

    Inputs: the backbone's inputs plus `mask_positions` [B, P]. Outputs:
    `mlm` [B, P, V] and `sop` [B, 2] logits; reports `mlm_*` and `sop_*`.

    Args:
        backbone: an `AlbertBackbone`.
        sentence_order_prediction: bool, add the SOP objective.
    """

    def __init__(self, backbone, sentence_order_prediction=True, **kwargs):
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        encoded = backbone({k: v for k, v in inputs.items() if k in backbone.input})
        outputs = {
            "mlm": MaskedLMHead(
                backbone.vocab_size, token_embedding=backbone.token_embedding, activation=backbone.activation,
                layer_norm_epsilon=backbone.layer_norm_epsilon, initializer_range=backbone.initializer_range,
                dtype=backbone.dtype_policy, name="mlm_head",
            )(encoded["sequence_output"], inputs["mask_positions"]),
        }
        if sentence_order_prediction:
            if "pooled_output" not in encoded:
                raise ValueError("sentence-order prediction needs a backbone with a pooler")
            outputs["sop"] = PooledClassificationHead(
                2, initializer_range=backbone.initializer_range, dtype=backbone.dtype_policy, name="sop_head",
            )(encoded["pooled_output"])
        super().__init__(backbone, inputs, outputs, [MLM, SOP] if sentence_order_prediction else [MLM], **kwargs)
        self.sentence_order_prediction = sentence_order_prediction

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "sentence_order_prediction": self.sentence_order_prediction}

    @classmethod
    def from_config(cls, config):
        config = dict(config, backbone=keras.saving.deserialize_keras_object(config["backbone"]))
        return cls(**config)
