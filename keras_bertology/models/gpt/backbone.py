"""The GPT-2 decoder stack: the BERT encoder made causal and pre-LN, with GPT-2's initialization."""

import math

import keras

from keras_bertology.models.bert.backbone import BertBackbone

# What makes the BERT encoder GPT-2's: no segments, no pooler, pre-LN blocks with a final LayerNorm,
# causal attention. Fixed: a config that says otherwise is not a GPT.
_LAYOUT = dict(num_segments=0, use_pooler=False, norm_first=True, causal=True, embedding_size=None)


@keras.saving.register_keras_serializable(package="keras_bertology")
class GPTBackbone(BertBackbone):
    """GPT-2: token + learned position embeddings, causal pre-LN Transformer blocks, final LayerNorm.

    Inputs `token_ids` and `padding_mask` [B, L] int32; output `sequence_output`
    [B, L, H]. Token t sees tokens 0..t of its row; positions count the real
    tokens only, so a left-padded prompt (generation) and a right-padded one
    give the same states at their tokens. The projections that write into the
    residual stream (attention output, feed-forward output) start with
    stddev initializer_range / sqrt(2 * num_layers), as GPT-2 does, so the sum
    of the layers' contributions keeps its scale with depth.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.gpt import GPTBackbone
        >>> backbone = GPTBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                        intermediate_size=32, max_positions=32)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"), "padding_mask": ops.ones((1, 8), "int32")})
        >>> tuple(out["sequence_output"].shape)
        (1, 8, 16)
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size,
                 activation="gelu_approximate", max_positions=1024, layer_norm_epsilon=1e-5, **kwargs):
        for name, value in _LAYOUT.items():
            if kwargs.setdefault(name, value) != value:
                raise ValueError(f"GPTBackbone takes {name}={value!r} only (got {kwargs[name]!r})")
        super().__init__(vocab_size, num_layers, num_heads, hidden_size, intermediate_size, activation=activation,
                         max_positions=max_positions, layer_norm_epsilon=layer_norm_epsilon, **kwargs)
        residual = keras.initializers.TruncatedNormal(stddev=self.initializer_range / math.sqrt(2 * num_layers))
        for index in range(num_layers):
            block = self.get_layer(f"encoder_block_{index}")
            for dense in (block.attention.output_dense, block.output_dense):
                dense.kernel.assign(residual(dense.kernel.shape, dense.kernel.dtype))
