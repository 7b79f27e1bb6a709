"""ELMo pretraining: a forward and a backward language model over one encoder, sharing their softmax."""

import dataclasses

import keras

from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.sampled_softmax import SampledSoftmax
from keras_bertology.models.causal_lm import next_token_metrics
from keras_bertology.models.pretrainer import Objective, Pretrainer

# Each direction predicts every word from the words on its side: the forward LM the next word, the backward
# LM the previous one; a position whose neighbour is not a real word of the row weighs 0.
FORWARD_LM = Objective("forward_lm", label_key="next_token_ids", weight_key="next_token_weights",
                       make_metrics=next_token_metrics, predicts_tokens=True)
BACKWARD_LM = Objective("backward_lm", label_key="previous_token_ids", weight_key="previous_token_weights",
                        make_metrics=next_token_metrics, predicts_tokens=True)
DIRECTIONS = {FORWARD_LM: "forward", BACKWARD_LM: "backward"}


@keras.saving.register_keras_serializable(package="keras_bertology")
class ElmoPretrainer(Pretrainer):
    """Backbone + one softmax over the word vocabulary, applied to each direction's top states.

    Inputs: the backbone's (`char_ids`, `padding_mask`). Outputs `forward_lm` and
    `backward_lm` [B, L, V] float32 logits: position t scores the word at t + 1
    and the word at t - 1. The two language models share the token vectors and
    the softmax and nothing else, and each reads its top states through
    dropout (bilm-tf's). The backbone's scalar mix is held still here: it is
    the fine-tuning task's to learn, and no pretraining loss reaches it.

    With `softmax_samples` > 0 a training step scores each position's target
    and that many words drawn for the batch (`layers.SampledSoftmax`, the
    original's 8,192 over 793,471 words) in place of the whole vocabulary: the
    targets (`next_token_ids`, `previous_token_ids`) are then inputs too, the
    outputs `<objective>_targets` hold the labels the scores are read against,
    and the logged loss, accuracy and perplexity are the sampled softmax's.

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

    def __init__(self, backbone, softmax_samples=0, **kwargs):
        # No loss here reaches the scalar mix: its weights are held still, as variables (the layer stays
        # trainable, so a backbone saved by the run and loaded for a task learns them).
        for variable in backbone.get_layer("scalar_mix").weights:
            variable.trainable = False
        inputs = dict(backbone.input)
        states = backbone(inputs)
        softmax = SampledSoftmax(backbone.vocab_size, softmax_samples, dtype=backbone.dtype_policy, name="softmax")
        outputs, objectives = {}, []
        for objective, direction in DIRECTIONS.items():
            top = HashedDropout(backbone.dropout, dtype=backbone.dtype_policy,
                                       name=f"{direction}_output_dropout")(states[f"{direction}_output"])
            if softmax_samples:
                inputs[objective.label_key] = keras.Input((None,), dtype="int32", name=objective.label_key)
                scores, outputs[f"{objective.name}_targets"] = softmax(top, inputs[objective.label_key])
                objective = dataclasses.replace(objective, label_key=f"{objective.name}_targets")
            else:
                scores = softmax(top)
            outputs[objective.name] = keras.layers.Activation("linear", dtype="float32",
                                                              name=f"{objective.name}_logits")(scores)
            objectives.append(objective)
        super().__init__(backbone, inputs, outputs, objectives, **kwargs)
        self.softmax_samples = softmax_samples

    output_kinds = ("word_in_context",)  # the backbone's per-word `context_output`, served by `serve`

    def served_backbone(self):
        """A copy of the backbone whose scalar mix trains again (held still here, where no loss reaches it):
        what the run saves, exports and fine-tunes."""
        served = type(self.backbone).from_config(self.backbone.get_config())
        served.set_weights(self.backbone.get_weights())
        return served

    def get_config(self):
        return {**super().get_config(), "softmax_samples": self.softmax_samples}
