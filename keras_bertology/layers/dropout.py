"""Dropout whose mask is an integer hash of (seed, element index): cheap wherever a compiler fuses it."""

import keras
from keras import ops

from keras_bertology.layers.remat import GOLDEN, scoped_dropout_seed


def _mix(bits):
    """A bijection of uint32 words in which each input bit flips about half of the output bits.

    Two xor-shift-multiply rounds and a final xor-shift, with the odd
    multipliers of a low-bias 32-bit integer finaliser.
    """
    bits = ops.bitwise_xor(bits, ops.right_shift(bits, 16))
    bits = bits * ops.cast(0x7FEB352D, "uint32")
    bits = ops.bitwise_xor(bits, ops.right_shift(bits, 15))
    bits = bits * ops.cast(0x846CA68B, "uint32")
    return ops.bitwise_xor(bits, ops.right_shift(bits, 16))


def hashed_uniform_bits(shape, seed):
    """uint32 words of `shape` from a seed of two integers, independent-looking across elements and seeds.

    Each element's word is two keyed rounds of `_mix` over its flat index
    (keys from both seed words): `mix(mix(index ^ key0) + key1)`. Seeds that
    differ by one (what a `keras.random.SeedGenerator` hands out step after
    step) give unrelated masks, not the same mask shifted or permuted, as a
    single round of `index ^ key` or `index + key` would.
    """
    seed = ops.cast(seed, "uint32")
    key0 = _mix(seed[0] + ops.cast(GOLDEN, "uint32"))
    key1 = _mix(ops.bitwise_xor(seed[1], key0))
    size = 1
    for dim in shape:
        size = size * dim
    bits = ops.cast(ops.arange(size, dtype="int32"), "uint32")
    bits = _mix(_mix(ops.bitwise_xor(bits, key0)) + key1)
    return ops.reshape(bits, shape)


@keras.saving.register_keras_serializable(package="keras_bertology")
class HashedDropout(keras.layers.Layer):
    """Inverted dropout, as `keras.layers.Dropout`, with its mask hashed from a seed and each element's index.

    Why not Keras's: on TensorFlow its mask comes from a stateless generator
    that XLA's CPU backend inlines into the consuming fusion whenever a mask
    shape is drawn once per step, where it costs about 170 ns a number (it
    made XLNet's compiled step 5x slower than the uncompiled one). A few
    integer multiplies and shifts cost about 1 ns a number wherever they are
    fused, and the same seed gives the same mask on every backend. And a
    recomputed block (`layers.remat`) must draw its masks again from a seed
    tensor, which Keras' random functions do not take.

    Args:
        rate: float in [0, 1), the fraction of elements zeroed in training.
        seed: optional int, the first seed of the layer's `SeedGenerator`.

    Example:
        >>> import numpy as np
        >>> from keras_bertology.layers import HashedDropout
        >>> dropped = HashedDropout(0.25, seed=0)(np.ones((1000, 100), "float32"), training=True)
        >>> round(float(np.mean(np.asarray(dropped) == 0)), 2), float(np.max(dropped))
        (0.25, 1.3333333730697632)
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"HashedDropout rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if rate > 0 else None
        self.supports_masking = True
        self.built = True

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        seed = scoped_dropout_seed()  # inside a block: the block's seed for this call (layers.remat)
        bits = hashed_uniform_bits(ops.shape(inputs), self.seed_generator.next() if seed is None else seed)
        keep = bits >= ops.cast(int(self.rate * 2**32), "uint32")
        return ops.where(keep, inputs / ops.cast(1 - self.rate, inputs.dtype), ops.zeros_like(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return dict(super().get_config(), rate=self.rate, seed=self.seed)
