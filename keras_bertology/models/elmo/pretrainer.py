"""ELMo pretraining: a forward and a backward language model over one encoder, sharing their softmax."""

import keras

from keras_bertology.models.causal_lm import next_token_metrics
from keras_bertology.models.pretrainer import Objective, Pretrainer

# Each direction predicts every word from the words on its side: the forward LM the next word, the backward
# LM the previous one; a position whose neighbour is not a real word of the row weighs 0.
FORWARD_LM = Objective("forward_lm", label_key="next_token_ids", weight_key="next_token_weights",
                       make_metrics=next_token_metrics, predicts_tokens=True)
BACKWARD_LM = Objective("backward_lm", label_key="previous_token_ids", weight_key="previous_token_weights",
                        make_metrics=next_token_metrics, predicts_tokens=True)


@keras.saving.register_keras_serializable(package="keras_bertology")
class ElmoPretrainer(Pretrainer):
    """Backbone + one softmax over the word vocabulary, applied to each direction's top states.

    Inputs: the backbone's (`char_ids`, `padding_mask`). Outputs `forward_lm` and
    `backward_lm` [B, L, V] float32 logits: position t scores the word at t + 1
    and the word at t - 1. The two language models share the token vectors and
    the softmax and nothing else, and each reads its top states through
    dropout (bilm-tf's). The backbone's scalar mix is
    frozen here: it is the fine-tuning task's to learn, and no pretraining
    loss reaches it.

    Example:
        >>> from keras_bertology.models.elmo.backbone import ElmoBackbone
        >>> from keras_bertology.models.elmo.pretrainer import ElmoPretrainer
        >>> backbone = ElmoBackbone(vocab_size=50, filters=((1, 4), (2, 4)), num_highway=1, projection_dim=8,
        ...                         lstm_units=16, max_characters=10)
        >>> model = ElmoPretrainer(backbone)
        >>> model.compile()
        >>> model.objectives
        ['forward_lm', 'backward_lm']
    """

    def __init__(self, backbone, **kwargs):
        backbone.get_layer("scalar_mix").trainable = False
        inputs = dict(backbone.input)
        states = backbone(inputs)
        # bilm-tf's softmax: weights normal with a variance of 1 / width, read through dropout.
        softmax = keras.layers.Dense(backbone.vocab_size, dtype=backbone.dtype_policy, name="softmax",
                                     kernel_initializer=keras.initializers.RandomNormal(
                                         stddev=backbone.projection_dim ** -0.5))
        outputs = {}
        for objective, direction in (("forward_lm", "forward"), ("backward_lm", "backward")):
            top = keras.layers.Dropout(backbone.dropout, dtype=backbone.dtype_policy,
                                       name=f"{direction}_output_dropout")(states[f"{direction}_output"])
            outputs[objective] = keras.layers.Activation("linear", dtype="float32", name=f"{objective}_logits")(
                softmax(top))
        super().__init__(backbone, inputs, outputs, [FORWARD_LM, BACKWARD_LM], **kwargs)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
