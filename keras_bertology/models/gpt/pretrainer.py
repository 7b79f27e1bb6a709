"""GPT pretraining: the next token at every position, from the tied token table."""

import keras

from keras_bertology.models.causal_lm import CLM
from keras_bertology.models.pretrainer import Pretrainer


@keras.saving.register_keras_serializable(package="keras_bertology")
class GPTPretrainer(Pretrainer):
    """Backbone + GPT-2's LM head: the final states times the token table, no bias.

    Inputs: the backbone's (`token_ids`, `padding_mask`). Output `{"clm": [B, L, V]
    float32 logits}`, position t scoring the token at t + 1. `compile()` sets up
    the causal LM objective (`models.causal_lm.CLM`): cross-entropy over the
    positions whose next token is real, reported with accuracy and perplexity
    as `clm_loss`, `clm_accuracy`, `clm_perplexity`.

    Example:
        >>> from keras_bertology.models.gpt import GPTBackbone, GPTPretrainer
        >>> backbone = GPTBackbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=16,
        ...                        intermediate_size=32, max_positions=32)
        >>> model = GPTPretrainer(backbone)
        >>> model.compile()
    """

    def __init__(self, backbone, **kwargs):
        inputs = dict(backbone.input)
        states = backbone(inputs)["sequence_output"]
        logits = keras.layers.Activation("linear", dtype="float32", name="clm_logits")(
            backbone.token_embedding(states, reverse=True))
        super().__init__(backbone, inputs, {"clm": logits}, [CLM], **kwargs)

    output_kinds = ("continuation",)

    def causal_lm_model(self):
        """backbone inputs -> the next-token logits [B, L, V], for serving `score` and `generate`."""
        return keras.Model(self.input, self.output["clm"])
