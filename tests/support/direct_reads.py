"""ALBERT's shared stack with every layer reading the shared variables themselves: the reference of its chain."""

import keras

from keras_bertology.layers import SharedEncoderStack


class DirectReads(SharedEncoderStack):
    """What `SharedEncoderStack.call` computed before its training calls read the weights through a chain."""

    def call(self, x, attention_mask=None, training=None):
        for layer in range(self.num_layers):
            for block in self.group_blocks(self.layer_group(layer)):
                x = block(x, attention_mask=attention_mask, training=training)
        return x


def stack_model(stack_class, intermediate_size, num_groups=2, inner_group_num=2):
    """[batch, 5, 16] -> five layers over `num_groups` groups of `inner_group_num` blocks (dropout 0.2)
    -> [batch, 5, 3]."""
    inputs = keras.Input((5, 16))
    stack = stack_class(num_layers=5, num_heads=2, intermediate_size=intermediate_size, num_groups=num_groups,
                        inner_group_num=inner_group_num, dropout=0.2, attention_dropout=0.2,
                        activation="gelu_approximate")
    return keras.Model(inputs, keras.layers.Dense(3)(stack(inputs)))
