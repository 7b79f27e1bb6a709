"""ALBERT pretraining: masked LM + sentence-order prediction (or NSP, for an ablation)."""

import keras

from keras_bertology.layers import MaskedLMHead, PooledClassificationHead
from keras_bertology.models.bert.pretrainer import NSP, masked_lm_output
from keras_bertology.models.pretrainer import Objective, Pretrainer

# Sentence-order prediction: 1 when the two consecutive segments were swapped.
SOP = Objective("sop", label_key="sop_labels")
SENTENCE_TASKS = {"sop": SOP, "nsp": NSP}


@keras.saving.register_keras_serializable(package="keras_bertology")
class AlbertPretrainer(Pretrainer):
    """AlbertBackbone + MLM head (H -> E, tied E x V decoder) + a sentence-pair head.

    Inputs: the backbone's inputs plus `mask_positions` [B, P]. Outputs:
    `mlm` [B, P, V] logits and, with a sentence task, its [B, 2] logits
    (`sop`, or `nsp` in the ablation); reports `mlm_*` and `sop_*`/`nsp_*`.

    Args:
        backbone: an `AlbertBackbone`.
        sentence_task: "sop" (ALBERT), "nsp" (BERT's task, for an ablation) or None (MLM only).
        tie_decoder: bool; False gives the MLM head an E x V decoder of its own
            instead of the token embeddings (an imported untied checkpoint).
        loss_chunk_size: int; > 0 scores the masked LM's targets (then an input, `mask_ids`) that many
            positions at a time instead of keeping [positions, vocabulary] logits for the gradient, as
            `BertPretrainer` does.
    """

    def __init__(self, backbone, sentence_task="sop", tie_decoder=True, loss_chunk_size=0, **kwargs):
        if sentence_task not in (*SENTENCE_TASKS, None):
            raise ValueError(f"sentence_task must be one of {sorted(SENTENCE_TASKS)} or None, got {sentence_task!r}")
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        encoded = backbone({k: v for k, v in inputs.items() if k in backbone.input})
        mlm_head = MaskedLMHead(
            backbone.vocab_size, token_embedding=backbone.token_embedding, activation=backbone.activation,
            layer_norm_epsilon=backbone.layer_norm_epsilon, initializer_range=backbone.initializer_range,
            tie_decoder=tie_decoder, dtype=backbone.dtype_policy, name="mlm_head", loss_chunk_size=loss_chunk_size,
        )
        mlm_output, mlm, served_logits = masked_lm_output(mlm_head, encoded["sequence_output"], inputs)
        outputs = {"mlm": mlm_output}
        objectives = [mlm]
        if sentence_task is not None:
            if "pooled_output" not in encoded:
                raise ValueError(f"{sentence_task} needs a backbone with a pooler")
            outputs[sentence_task] = PooledClassificationHead(
                2, initializer_range=backbone.initializer_range, dtype=backbone.dtype_policy,
                name=f"{sentence_task}_head",
            )(encoded["pooled_output"])
            objectives.append(SENTENCE_TASKS[sentence_task])
        super().__init__(backbone, inputs, outputs, objectives, **kwargs)
        self.served_mlm_logits = served_logits
        self.sentence_task = sentence_task
        self.tie_decoder = tie_decoder
        self.loss_chunk_size = loss_chunk_size

    @classmethod
    def backbone_needs(cls, sentence_task="sop", **settings):
        return {"use_pooler": True} if sentence_task is not None else {}

    def get_config(self):
        config = {**super().get_config(), "sentence_task": self.sentence_task, "tie_decoder": self.tie_decoder}
        if self.loss_chunk_size:
            config["loss_chunk_size"] = self.loss_chunk_size
        return config
