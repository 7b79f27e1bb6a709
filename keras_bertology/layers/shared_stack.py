"""Cross-layer parameter sharing (ALBERT): many layers, few sets of weights."""

import keras

from keras_bertology.layers.transformer_block import TransformerEncoderBlock


@keras.saving.register_keras_serializable(package="keras_bertology")
class SharedEncoderStack(keras.layers.Layer):
    """`num_layers` encoder layers drawing on `num_groups` groups of `inner_group_num` blocks.

    Layer i runs every block of group int(i / (num_layers / num_groups)) in
    turn, ALBERT's rule: with the defaults all layers reuse one block. A
    block's variables exist once however often it runs, so their gradient is
    the sum over the layers that use them.

    Args:
        num_layers: int, layers applied.
        num_heads: int.
        intermediate_size: int.
        num_groups: int, groups of distinct weights (ALBERT's num_hidden_groups).
        inner_group_num: int, blocks per group, all run by each layer of it.
        activation, dropout, attention_dropout, layer_norm_epsilon,
        initializer_range: as for `TransformerEncoderBlock` (post-LN).

    Example:
        >>> import keras
        >>> from keras_bertology.layers import SharedEncoderStack
        >>> stack = SharedEncoderStack(num_layers=6, num_heads=2, intermediate_size=32)
        >>> tuple(stack(keras.ops.ones((1, 4, 8))).shape), len(stack.blocks)
        ((1, 4, 8), 1)
    """

    def __init__(self, num_layers, num_heads, intermediate_size, num_groups=1, inner_group_num=1,
                 activation="gelu", dropout=0.0, attention_dropout=0.0, layer_norm_epsilon=1e-12,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        if num_groups < 1 or inner_group_num < 1 or num_layers < num_groups:
            raise ValueError(f"need 1 <= num_groups ({num_groups}) <= num_layers ({num_layers}) "
                             f"and inner_group_num >= 1 (got {inner_group_num})")
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.num_groups = num_groups
        self.inner_group_num = inner_group_num
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.blocks = [
            TransformerEncoderBlock(
                num_heads, intermediate_size, activation=activation, dropout=dropout,
                attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon,
                initializer_range=initializer_range, dtype=self.dtype_policy,
                name=f"group_{group}_block_{inner}",
            )
            for group in range(num_groups) for inner in range(inner_group_num)
        ]

    def group_blocks(self, group):
        """The blocks of `group`, in the order each layer of it runs them."""
        return self.blocks[group * self.inner_group_num:(group + 1) * self.inner_group_num]

    def layer_group(self, layer):
        """The group whose blocks layer `layer` runs."""
        return int(layer / (self.num_layers / self.num_groups))

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)
        self.built = True

    def call(self, x, attention_mask=None, training=None):
        for layer in range(self.num_layers):
            for block in self.group_blocks(self.layer_group(layer)):
                x = block(x, attention_mask=attention_mask, training=training)
        return x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers, num_heads=self.num_heads, intermediate_size=self.intermediate_size,
            num_groups=self.num_groups, inner_group_num=self.inner_group_num, activation=self.activation,
            dropout=self.dropout, attention_dropout=self.attention_dropout,
            layer_norm_epsilon=self.layer_norm_epsilon, initializer_range=self.initializer_range,
        )
        return config
