"""GPT pretraining: the next token at every position, from the tied token table."""

import keras

from keras_bertology.layers.vocabulary_scores import TokenScoresInChunks
from keras_bertology.models.causal_lm import CLM, CLM_IN_CHUNKS
from keras_bertology.models.pretrainer import Pretrainer


@keras.saving.register_keras_serializable(package="keras_bertology")
class GPTPretrainer(Pretrainer):
    """Backbone + GPT-2's LM head: the final states times the token table, no bias.

    Inputs: the backbone's (`token_ids`, `padding_mask`). Output `{"clm": [B, L, V]
    float32 logits}`, position t scoring the token at t + 1. `compile()` sets up
    the causal LM objective (`models.causal_lm.CLM`): cross-entropy over the
    positions whose next token is real, reported with accuracy and perplexity
    as `clm_loss`, `clm_accuracy`, `clm_perplexity`.

    `loss_chunk_size` > 0 trains the same objective without the logits: the
    model takes the targets (`next_token_ids`) as an input and its `clm` output
    is each position's (cross-entropy, target is the arg-max), computed that
    many positions at a time (`layers.TokenScoresInChunks`), so no
    [positions, vocabulary] tensor waits for the backward pass. Same loss,
    gradients and metrics; `causal_lm_model()` still gives the logits.

    Example:
        >>> from keras_bertology.models.gpt import GPTBackbone, GPTPretrainer
        >>> backbone = GPTBackbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=16,
        ...                        intermediate_size=32, max_positions=32)
        >>> model = GPTPretrainer(backbone)
        >>> model.compile()
    """

    def __init__(self, backbone, loss_chunk_size=0, **kwargs):
        inputs = dict(backbone.input)
        states = backbone(inputs)["sequence_output"]
        # The tied head's float32 logits: the output, or with the loss in chunks a node that serving reads.
        logits = keras.layers.Activation("linear", dtype="float32", name="clm_logits")(
            backbone.token_embedding(states, reverse=True))
        outputs, objective = {"clm": logits}, CLM
        if loss_chunk_size:
            inputs["next_token_ids"] = keras.Input(shape=backbone.input["token_ids"].shape[1:], dtype="int32",
                                                   name="next_token_ids")
            outputs["clm"] = TokenScoresInChunks(backbone.token_embedding, loss_chunk_size, dtype=backbone.dtype_policy,
                                                 name="clm_scores")(states, inputs["next_token_ids"])
            objective = CLM_IN_CHUNKS
        super().__init__(backbone, inputs, outputs, [objective], **kwargs)
        self.loss_chunk_size = loss_chunk_size
        self._served_logits = logits

    output_kinds = ("continuation",)

    def causal_lm_model(self):
        """backbone inputs -> the next-token logits [B, L, V], for serving `score` and `generate`."""
        return keras.Model({name: self.input[name] for name in self.backbone.input}, self._served_logits)

    def get_config(self):
        config = super().get_config()
        return {**config, "loss_chunk_size": self.loss_chunk_size} if self.loss_chunk_size else config

