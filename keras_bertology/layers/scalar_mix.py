"""ELMo's scalar mix: one learned weighted average of a stack's layer outputs per downstream task."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_bertology")
class ScalarMix(keras.layers.Layer):
    """A list of `num_layers` tensors of one shape -> `gamma * sum_j softmax(w)_j h_j`, of that shape.

    Different layers of a language model hold different information (ELMo:
    syntax lower, word sense higher), and which mix a task wants is learned
    with `num_layers + 1` scalars. `w` starts at zeros and `gamma` at one, so
    an untrained mix is the mean of the layers.

    Args:
        num_layers: int, how many tensors each call mixes.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import ScalarMix
        >>> mix = ScalarMix(num_layers=3)
        >>> layers = [ops.full((1, 2), value) for value in (1.0, 2.0, 6.0)]
        >>> ops.convert_to_numpy(mix(layers)).tolist()
        [[3.0, 3.0]]
    """

    def __init__(self, num_layers, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.supports_masking = True

    def build(self, input_shapes):
        if len(input_shapes) != self.num_layers:
            raise ValueError(f"ScalarMix(num_layers={self.num_layers}) called on {len(input_shapes)} tensors")
        self.scalar_weights = self.add_weight(name="scalar_weights", shape=(self.num_layers,), initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="ones")
        self.built = True

    def call(self, layers):
        dtype = self.compute_dtype
        weights = ops.cast(ops.softmax(self.scalar_weights), dtype)
        mixed = sum(weights[index] * ops.cast(layer, dtype) for index, layer in enumerate(layers))
        return ops.cast(self.gamma, dtype) * mixed

    def compute_mask(self, layers, mask=None):
        """The layers share their positions, so the first one's mask is the mix's."""
        return mask[0] if isinstance(mask, (list, tuple)) else mask

    def compute_output_shape(self, input_shapes):
        return input_shapes[0]

    def get_config(self):
        return dict(super().get_config(), num_layers=self.num_layers)
