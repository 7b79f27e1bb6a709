"""BERT pretraining: masked LM + next-sentence prediction on top of a backbone."""

import keras

from keras_bertology.layers import MaskedLMHead, PooledClassificationHead
from keras_bertology.models.pretrainer import Objective, Pretrainer, scored

# Masked LM: original ids at the masked positions; filler prediction slots weigh 0.
MLM = Objective("mlm", label_key="mask_ids", weight_key="mask_weights", predicts_tokens=True)
# Next-sentence prediction: 1 when B is a random sentence, 0 when it continues A.
NSP = Objective("nsp", label_key="nsp_labels")
# The masked LM where the head scores its targets itself (`loss_chunk_size`).
MLM_IN_CHUNKS = scored(MLM)


def masked_lm_output(head, sequence, inputs):
    """(the "mlm" output, its objective, the logits to serve or None) of the `MaskedLMHead` `head` on
    `sequence` at `inputs["mask_positions"]`. A head with a `loss_chunk_size` scores its targets, which
    become the input "mask_ids" (added to `inputs`); its logits stay in the graph for serving."""
    logits = head(sequence, inputs["mask_positions"])
    if not head.loss_chunk_size:
        return logits, MLM, None
    inputs["mask_ids"] = keras.Input((None,), dtype="int32", name="mask_ids")
    return head(sequence, inputs["mask_positions"], inputs["mask_ids"]), MLM_IN_CHUNKS, logits


@keras.saving.register_keras_serializable(package="keras_bertology")
class BertPretrainer(Pretrainer):
    """Backbone + MLM head (tied to the token embeddings) + optional NSP head.

    Inputs: the backbone's input dict plus `mask_positions` [B, P] int32.
    Outputs: `{"mlm": [B, P, V] logits}` and, with next-sentence prediction,
    `"nsp": [B, 2] logits}`. `compile()` without arguments sets up the BERT
    objective: MLM cross-entropy averaged over real predictions (padding
    predictions carry sample weight 0), NSP cross-entropy, and the accuracy of
    each, reported as `mlm_loss`, `mlm_accuracy`, `nsp_loss`, `nsp_accuracy`.

    Args:
        backbone: a `BertBackbone` (with pooler when NSP is on).
        next_sentence_prediction: bool, add the NSP objective.
        mlm_activation: str, activation of the MLM head's transform; None takes
            the backbone's, as BERT's head does.
        tie_decoder: bool; False gives the MLM head a decoder of its own
            instead of the token embeddings (an imported untied checkpoint).
        mlm_head_options: dict, further `MaskedLMHead` arguments (ModernBERT's head has no biases
            in its transform and norm).
        loss_chunk_size: int; > 0 trains the masked LM without its logits: the targets (`mask_ids`)
            are an input and the "mlm" output holds each one's (cross-entropy, target is the arg-max),
            computed that many positions at a time (`layers.vocabulary_scores`). Same loss, gradients
            and metrics; `masked_lm_model()` still serves the logits.

    Example:
        >>> from keras_bertology.models import BertBackbone, BertPretrainer
        >>> backbone = BertBackbone(vocab_size=100, num_layers=1, num_heads=2,
        ...                         hidden_size=16, intermediate_size=32)
        >>> model = BertPretrainer(backbone)
        >>> model.compile()
    """

    def __init__(self, backbone, next_sentence_prediction=True, mlm_activation=None, tie_decoder=True,
                 mlm_head_options=None, loss_chunk_size=0, **kwargs):
        mlm_head_options = dict(mlm_head_options or {})
        mlm_activation = mlm_activation or backbone.activation
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        encoded = backbone({k: v for k, v in inputs.items() if k in backbone.input})
        mlm_head = MaskedLMHead(
            backbone.vocab_size,
            token_embedding=backbone.token_embedding,
            activation=mlm_activation,
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            initializer_range=backbone.initializer_range,
            tie_decoder=tie_decoder,
            dtype=backbone.dtype_policy,
            name="mlm_head",
            loss_chunk_size=loss_chunk_size,
            **mlm_head_options,
        )
        mlm_output, mlm, served_logits = masked_lm_output(mlm_head, encoded["sequence_output"], inputs)
        outputs = {"mlm": mlm_output}
        if next_sentence_prediction:
            if "pooled_output" not in encoded:
                raise ValueError("next-sentence prediction needs a backbone with a pooler")
            outputs["nsp"] = PooledClassificationHead(
                2, initializer_range=backbone.initializer_range,
                dtype=backbone.dtype_policy, name="nsp_head",
            )(encoded["pooled_output"])
        objectives = [mlm, NSP] if next_sentence_prediction else [mlm]
        super().__init__(backbone, inputs, outputs, objectives, **kwargs)
        self.served_mlm_logits = served_logits
        self.loss_chunk_size = loss_chunk_size
        self.next_sentence_prediction = next_sentence_prediction
        self.mlm_activation = mlm_activation
        self.tie_decoder = tie_decoder
        self.mlm_head_options = mlm_head_options

    # False in subclasses that always leave next-sentence prediction out (RoBERTa's, ModernBERT's).
    takes_next_sentence_prediction = True

    @classmethod
    def backbone_needs(cls, next_sentence_prediction=True, **settings):
        return {"use_pooler": True} if cls.takes_next_sentence_prediction and next_sentence_prediction else {}

    def get_config(self):
        config = {**super().get_config(), "next_sentence_prediction": self.next_sentence_prediction,
                  "mlm_activation": self.mlm_activation, "tie_decoder": self.tie_decoder}
        if self.mlm_head_options:
            config["mlm_head_options"] = self.mlm_head_options
        if self.loss_chunk_size:
            config["loss_chunk_size"] = self.loss_chunk_size
        return config
