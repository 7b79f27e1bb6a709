"""Cross-layer parameter sharing (ALBERT): many layers, few sets of weights."""

import contextlib

import keras

from keras_bertology.layers.transformer_block import TransformerEncoderBlock


@keras.saving.register_keras_serializable(package="keras_bertology")
class SharedEncoderStack(keras.layers.Layer):
    """`num_layers` encoder layers drawing on `num_groups` groups of `inner_group_num` blocks.

    Layer i runs every block of group int(i / (num_layers / num_groups)) in
    turn, ALBERT's rule: with the defaults all layers reuse one block. A
    block's variables exist once however often it runs, so their gradient is
    the sum over the layers that use them.

    In training each layer reads the shared weights as a copy of what the
    layer before it read (`chained_reads`), so that sum is taken two terms
    at a time as the backward pass reaches each layer: read directly, the
    gradient tape holds every layer's partial gradient of a weight until the
    last arrives and sums them in one AddN (12 float32 copies of the block's
    weights for ALBERT-Base: about 1,130 against 1,000 MiB of tensors at
    the peak of a base bf16 step, docs/benchmarks.md). The stack reads
    the weights in their own dtype; each block casts what it reads, as it
    would cast the variables.

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
        self.autocast = False  # the chain carries the weights as stored (float32); the blocks cast their reads
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
        # A recomputed block reads the variables again in the backward pass, outside the chain: read directly.
        chained = training and not any(block.remat for block in self.blocks)
        with chained_reads(self.blocks) if chained else contextlib.nullcontext() as next_layer:
            for layer in range(self.num_layers):
                if next_layer:
                    next_layer()
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


@contextlib.contextmanager
def chained_reads(layers):
    """Inside it, `layers`' trainable variables read as the last call of the `next_layer` it yields copied them.

    Each call makes the reads a copy of the previous ones (the first, of the
    variables), so a gradient reaching the reads of one call adds to those
    of the next. The layers' other variables (their dropout seeds) move on
    inside as outside, and are written back when it ends; on JAX, inside
    Keras' stateless training step, they start from and go back to its values.
    """
    weights = [variable for layer in layers for variable in layer.trainable_variables]
    state = [variable for layer in layers for variable in layer.non_trainable_variables]
    reads = [variable.value for variable in weights]
    with keras.StatelessScope(state_mapping=[(variable, variable.value) for variable in state]) as scope:
        def next_layer():
            reads[:] = [keras.ops.copy(read) for read in reads]
            for variable, read in zip(weights, reads):
                scope.add_update((variable, read))

        yield next_layer
        moved = [(variable, scope.get_current_value(variable)) for variable in state]
    for variable, value in moved:
        variable.assign(value)
