"""T5 pretraining: the decoder writes out the corrupted spans (`data.span_corruption`), one target per
position, from the token table (v1.0) or a head of its own (v1.1)."""

import keras

from keras_bertology.layers import merge_attention_masks
from keras_bertology.models.pretrainer import Objective, Pretrainer

# The spans after their sentinels, then EOS: every real target position, teacher forced.
SPAN_CORRUPTION = Objective("spans", label_key="target_ids", weight_key="target_weights", predicts_tokens=True)


@keras.saving.register_keras_serializable(package="keras_bertology")
class T5Pretrainer(Pretrainer):
    """T5Backbone + the LM head over the decoder's states: `{"spans": [B, Ld, V] float32 logits}`.

    v1.0 ties the head to the token table and scales the states by
    hidden_size ** -0.5 first; v1.1 has a head of its own (no bias) and no
    scale. `compile()` sets up span corruption's cross-entropy over the real
    target positions, reported as `spans_loss` and `spans_accuracy`.

    Args:
        backbone: a `T5Backbone` with decoder layers.
        tie_embeddings: bool, the head is the token table (v1.0).
        scale_logits: bool, multiply the states by hidden_size ** -0.5 before the head (v1.0).

    Example:
        >>> from keras_bertology.models.t5 import T5Backbone, T5Pretrainer
        >>> backbone = T5Backbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=16,
        ...                       intermediate_size=32)
        >>> model = T5Pretrainer(backbone)
        >>> model.compile()
        >>> model.objectives
        ['spans']
    """

    def __init__(self, backbone, tie_embeddings=True, scale_logits=True, **kwargs):
        if not backbone.num_decoder_layers:
            raise ValueError("T5Pretrainer needs a backbone with decoder layers")
        inputs = dict(backbone.input)
        head = _LMHead(backbone, tie_embeddings, scale_logits)
        logits = head(backbone(inputs)["decoder_sequence_output"])
        super().__init__(backbone, inputs, {"spans": logits}, [SPAN_CORRUPTION], **kwargs)
        self.tie_embeddings, self.scale_logits, self._head = tie_embeddings, scale_logits, head

    has_decoder = True
    output_kinds = ("span_fill",)

    def start_decoding(self, encoder_states):
        """Each decoder layer's cross-attention heads of `encoder_states` [B, L, H], computed once for
        `decode_step`."""
        return [block.cross_attention.key_value(encoder_states) for block in self.backbone.decoder_blocks]

    def decode_step(self, token_ids, step, past, encoder_key_values, padding_mask):
        """The next-token logits [B, V] (float32) after `token_ids` [B, 1] at position `step`, and each
        layer's self-attention heads with it (`past`: theirs for the positions before, [B, step, N, D]):
        a decoder key/value cache, for generation that costs one position a step."""
        stack = self.backbone.decoder_stack
        x = self.backbone.embeddings(token_ids)
        terms = (stack.bias.bias(1, step + 1, query_offset=step),)
        encoder_mask = merge_attention_masks(padding_mask)
        heads = []
        for block, before, encoder_heads in zip(stack.blocks, past, encoder_key_values):
            x, kept = block.decode_step(x, before, encoder_heads, encoder_mask, terms)
            heads.append(kept)
        return self._head(stack.final_norm(x))[:, 0], heads

    def get_config(self):
        return {**super().get_config(), "tie_embeddings": self.tie_embeddings, "scale_logits": self.scale_logits}


class _LMHead:
    """The head's layers, callable again one position at a time (`decode_step`): v1.0's scale and the
    tied token table, or v1.1's own dense layer; logits in float32."""

    def __init__(self, backbone, tie_embeddings, scale_logits):
        dtype = backbone.dtype_policy
        self.scale = keras.layers.Rescaling(backbone.hidden_size ** -0.5, dtype=dtype, name="head_scale") \
            if scale_logits else None
        self.dense = None if tie_embeddings else keras.layers.Dense(
            backbone.vocab_size, use_bias=False, dtype=dtype, name="lm_head",
            kernel_initializer=keras.initializers.RandomNormal(stddev=backbone.initializer_factor))
        self.table = backbone.token_embedding
        self.output = keras.layers.Activation("linear", dtype="float32", name="spans_logits")

    def __call__(self, states):
        if self.scale is not None:
            states = self.scale(states)
        logits = self.table(states, reverse=True) if self.dense is None else self.dense(states)
        return self.output(logits)
