"""The Transformer-XL backbone: the stack without memory, what fine-tuning and exports run."""

import keras

from keras_bertology.models.backbone import Backbone, check_heads, encoder_inputs
from keras_bertology.models.transformer_xl.encoder import TransformerXLEncoder


@keras.saving.register_keras_serializable(package="keras_bertology")
class TransformerXLBackbone(Backbone):
    """`token_ids`, `padding_mask` [B, L] -> `sequence_output` [B, L, H]: a `TransformerXLEncoder`
    (layer "encoder") run causally over the input alone; the pretrainer calls the same encoder with
    the memory of the previous segment.

    Relative positions make the states of a left-padded and a right-padded
    row the same at their tokens, so serving either way needs no position ids.

    Args: as `TransformerXLEncoder`, plus `max_positions` (the longest input
    accepted: relative encodings have no table) and `dtype`.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.transformer_xl import TransformerXLBackbone
        >>> backbone = TransformerXLBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                                  intermediate_size=32, cutoffs=[20, 60], div_val=2)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"), "padding_mask": ops.ones((1, 8), "int32")})
        >>> tuple(out["sequence_output"].shape)
        (1, 8, 16)
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, cutoffs=(), div_val=1,
                 embedding_size=None, activation="relu", dropout=0.1, attention_dropout=0.0,
                 layer_norm_epsilon=1e-5, initializer_range=0.02, untie_r=False, clamp_len=-1, max_positions=512,
                 dtype=None, **kwargs):
        check_heads(hidden_size, num_heads)
        encoder_config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, cutoffs=list(cutoffs), div_val=div_val,
            embedding_size=embedding_size, activation=activation, dropout=dropout,
            attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range, untie_r=untie_r, clamp_len=clamp_len)
        encoder = TransformerXLEncoder(**encoder_config, dtype=dtype, name="encoder")
        inputs = encoder_inputs(num_segments=0)
        outputs = encoder(inputs["token_ids"], inputs["padding_mask"])
        super().__init__(inputs, {"sequence_output": outputs["sequence"]},
                         dict(encoder_config, max_positions=max_positions), dtype=dtype, **kwargs)
        self.encoder = encoder

    @property
    def token_embedding(self):
        return self.encoder.embedding

    def variable_depths(self):
        """The adaptive input at depth 0, layer i at i + 1; u and v, one variable for all layers, at the top."""
        encoder = self.encoder
        depths = {variable.path: self.num_layers + 1 for variable in encoder.trainable_variables}
        depths.update({variable.path: 0 for variable in encoder.embedding.trainable_variables})
        for index, block in enumerate(encoder.blocks):
            depths.update({variable.path: index + 1 for variable in block.trainable_variables})
        return depths
