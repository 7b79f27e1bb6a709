"""DeBERTa pretraining: masked LM through the enhanced mask decoder (EMD).

The encoder never sees absolute positions; the EMD gives them to the MLM head
only. Its queries start as absolute position embeddings plus the states
entering the last block, H; the last block (its weights) then runs twice,
keys and values from H, queries from its previous output; the MLM head reads
the second output at the masked positions.
"""

import keras

from keras_bertology.layers import MaskedLMHead, merge_attention_masks
from keras_bertology.models.bert.pretrainer import masked_lm_output
from keras_bertology.models.pretrainer import Pretrainer

EMD_PASSES = 2


@keras.saving.register_keras_serializable(package="keras_bertology")
class DebertaPretrainer(Pretrainer):
    """`DebertaBackbone` + BERT's MLM head (tied to the token table), through the EMD or, with
    `enhanced_mask_decoder=False`, on the last block's states (transformers' `DebertaForMaskedLM`).

    Inputs: the backbone's plus `mask_positions` [B, P]; output `{"mlm": [B, P, V] float32 logits}`,
    reported as `mlm_loss` and `mlm_accuracy`.

    Args:
        backbone: a `DebertaBackbone`.
        enhanced_mask_decoder: bool, absolute positions and the last block run twice before the head.
        tie_decoder: bool; False gives the head a decoder of its own (an imported untied checkpoint).
        loss_chunk_size: int; > 0 scores the masked LM's targets (then an input, `mask_ids`) that many
            positions at a time instead of keeping [positions, vocabulary] logits for the gradient, as
            `BertPretrainer` does.

    Example:
        >>> from keras_bertology.models.deberta import DebertaBackbone, DebertaPretrainer
        >>> backbone = DebertaBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                            intermediate_size=32, position_buckets=8, max_relative_positions=32)
        >>> model = DebertaPretrainer(backbone)
        >>> model.compile()
        >>> model.objectives
        ['mlm']
    """

    def __init__(self, backbone, enhanced_mask_decoder=True, tie_decoder=True, loss_chunk_size=0, **kwargs):
        inputs = dict(backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        encoder_inputs = {name: inputs[name] for name in backbone.input}
        if enhanced_mask_decoder:
            states = _enhanced_mask_decoder(backbone, encoder_inputs)
        else:
            states = backbone(encoder_inputs)["sequence_output"]
        head = MaskedLMHead(backbone.vocab_size, token_embedding=backbone.token_embedding,
                            activation=backbone.activation, layer_norm_epsilon=backbone.layer_norm_epsilon,
                            initializer_range=backbone.initializer_range, tie_decoder=tie_decoder,
                            dtype=backbone.dtype_policy, name="mlm_head", loss_chunk_size=loss_chunk_size)
        mlm_output, mlm, served_logits = masked_lm_output(head, states, inputs)
        super().__init__(backbone, inputs, {"mlm": mlm_output}, [mlm], **kwargs)
        self.served_mlm_logits = served_logits
        self.enhanced_mask_decoder, self.tie_decoder = bool(enhanced_mask_decoder), tie_decoder
        self.loss_chunk_size = loss_chunk_size

    def get_config(self):
        config = {**super().get_config(), "enhanced_mask_decoder": self.enhanced_mask_decoder,
                  "tie_decoder": self.tie_decoder}
        if self.loss_chunk_size:
            config["loss_chunk_size"] = self.loss_chunk_size
        return config


def _enhanced_mask_decoder(backbone, inputs):
    """The EMD's output states [B, L, H] for the backbone's `inputs`."""
    from keras_bertology.layers import RelativeEmbeddings

    last = backbone.get_layer(f"encoder_block_{backbone.num_layers - 1}")
    table, index = backbone.get_layer("relative_embeddings").output
    states = last.input[0]  # the block's tensors in call order: x first, then the mask and the terms
    below = keras.Model(backbone.input, {"states": states, "table": table, "index": index},
                        name="deberta_below_last_block")(inputs)
    queries = _AbsolutePositions(backbone.max_positions, backbone.initializer_range, dtype=backbone.dtype_policy,
                                 name="emd_positions")(below["states"])
    mask = merge_attention_masks(inputs["padding_mask"])
    terms = (RelativeEmbeddings(below["table"], below["index"]),)
    for _ in range(EMD_PASSES):
        queries = last(below["states"], attention_mask=mask, queries=queries, score_terms=terms)
    return queries


@keras.saving.register_keras_serializable(package="keras_bertology")
class _AbsolutePositions(keras.layers.Layer):
    """states + the absolute position embedding of each position: the EMD's first queries."""

    def __init__(self, max_positions, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.max_positions, self.initializer_range = max_positions, initializer_range

    def build(self, states_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.max_positions, states_shape[-1]),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range))

    def call(self, states):
        rows = keras.ops.take(self.embeddings, keras.ops.arange(keras.ops.shape(states)[1]), axis=0)
        return states + keras.ops.cast(rows, states.dtype)[None]

    def get_config(self):
        return {**super().get_config(), "max_positions": self.max_positions,
                "initializer_range": self.initializer_range}
