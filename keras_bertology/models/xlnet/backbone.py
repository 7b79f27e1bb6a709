"""The XLNet backbone: the content stream, what fine-tuning and exports run."""

import keras

from keras_bertology.models.backbone import Backbone, check_heads, encoder_inputs
from keras_bertology.models.xlnet.encoder import XLNetEncoder


@keras.saving.register_keras_serializable(package="keras_bertology")
class XLNetBackbone(Backbone):
    """`token_ids`, `segment_ids`, `padding_mask` [B, L] -> `sequence_output` [B, L, H], the content
    stream of an `XLNetEncoder` (layer "encoder"), which the pretrainer calls with the query stream,
    the factorization order and the memory.

    Args: as `XLNetEncoder` (`vocab_size`, `num_layers`, `num_heads`,
    `hidden_size`, `intermediate_size`, `activation`, `dropout`,
    `layer_norm_epsilon`, `initializer_range`, `untie_r`, `clamp_len`), plus `max_positions` (the longest input accepted: relative
    encodings have no table, but the published models saw 512) and `dtype`.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.xlnet.backbone import XLNetBackbone
        >>> backbone = XLNetBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                          intermediate_size=32)
        >>> out = backbone({"token_ids": ops.ones((1, 8), "int32"), "segment_ids": ops.zeros((1, 8), "int32"),
        ...                 "padding_mask": ops.ones((1, 8), "int32")})
        >>> tuple(out["sequence_output"].shape), backbone.count_params()
        ((1, 8, 16), 6608)
    """

    def __init__(self, vocab_size, num_layers, num_heads, hidden_size, intermediate_size, activation="gelu",
                 dropout=0.1, layer_norm_epsilon=1e-12, initializer_range=0.02, untie_r=True, clamp_len=-1,
                 max_positions=512, dtype=None, **kwargs):
        check_heads(hidden_size, num_heads)
        encoder_config = dict(
            vocab_size=vocab_size, num_layers=num_layers, num_heads=num_heads, hidden_size=hidden_size,
            intermediate_size=intermediate_size, activation=activation, dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range, untie_r=untie_r,
            clamp_len=clamp_len)
        encoder = XLNetEncoder(**encoder_config, dtype=dtype, name="encoder")
        config = dict(encoder_config, max_positions=max_positions)
        inputs = encoder_inputs(num_segments=3)
        outputs = encoder(inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"])
        super().__init__(inputs, {"sequence_output": outputs["content"]}, config, dtype=dtype, **kwargs)
        self.encoder = encoder

    @property
    def token_embedding(self):
        return self.encoder.word_embedding

    def variable_depths(self):
        """Word and mask embeddings at depth 0, layer i at i + 1; the relative biases, one
        variable for all layers, at the top."""
        encoder = self.encoder
        depths = {variable.path: self.num_layers + 1 for variable in encoder.trainable_variables}
        depths.update({encoder.word_embedding.embeddings.path: 0, encoder.mask_embedding.path: 0})
        for index, block in enumerate(encoder.blocks):
            depths.update({variable.path: index + 1 for variable in block.trainable_variables})
        return depths
