"""HashedDropout: the library's dropout, its masks hashed from a seed and each element's index.

Statistical checks draw 4M elements, where a keep rate's standard deviation
at rate 0.1 is sqrt(0.09 / 4e6) = 1.5e-4: the tolerances are 5 of those.
"""

import pathlib

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers import HashedDropout, hashed_uniform_bits

RATE = 0.1
SHAPE = (2000, 2000)
FIVE_SIGMA = 5 * np.sqrt(RATE * (1 - RATE) / np.prod(SHAPE))


@np.errstate(over="ignore")
def _mix(words):
    """The 32-bit finaliser, in NumPy's wrapping uint32 arithmetic."""
    words = words ^ (words >> np.uint32(16))
    words = words * np.uint32(0x7FEB352D)
    words = words ^ (words >> np.uint32(15))
    words = words * np.uint32(0x846CA68B)
    return words ^ (words >> np.uint32(16))


@np.errstate(over="ignore")
def _reference_bits(shape, seed):
    """The documented construction: two keyed rounds over each element's flat index."""
    seed = np.asarray(seed).astype(np.uint32)
    key0 = _mix(seed[0] + np.uint32(0x9E3779B9))
    key1 = _mix(seed[1] ^ key0)
    words = np.arange(np.prod(shape), dtype=np.uint32)
    return _mix(_mix(words ^ key0) + key1).reshape(shape)


def _keep(seed, shape=SHAPE):
    return ops.convert_to_numpy(hashed_uniform_bits(shape, np.asarray(seed, "int32"))) >= np.uint32(RATE * 2**32)


@pytest.mark.parametrize("seed", [(0, 0), (7, 123456), (-1, -2147483648)])
def test_bits_are_the_documented_hash_on_every_backend(seed):
    """The same words in NumPy's arithmetic: masks do not depend on the backend (the JAX subset runs this)."""
    bits = ops.convert_to_numpy(hashed_uniform_bits((3, 5, 7), np.asarray(seed, "int32")))
    assert bits.dtype == np.uint32
    np.testing.assert_array_equal(bits, _reference_bits((3, 5, 7), seed))


def test_a_layer_drops_its_rate_and_scales_the_rest_up():
    layer = HashedDropout(RATE, seed=5)
    inputs = np.full(SHAPE, 2.0, "float32")
    outputs = ops.convert_to_numpy(layer(inputs, training=True))
    dropped = outputs == 0
    assert abs(dropped.mean() - RATE) < FIVE_SIGMA
    np.testing.assert_allclose(outputs[~dropped], 2.0 / (1 - RATE), rtol=1e-6)
    # Every row drops about its share: 2000 elements a row, five of their standard deviations.
    assert np.abs(dropped.mean(axis=1) - RATE).max() < 5 * np.sqrt(RATE * (1 - RATE) / SHAPE[1])
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(inputs)), inputs)
    np.testing.assert_array_equal(ops.convert_to_numpy(HashedDropout(0.0)(inputs, training=True)), inputs)


def test_words_are_uniform_in_their_high_and_low_bits():
    """A chi-square over 64 bins of the top and of the bottom 6 bits: 63 degrees of freedom, whose
    0.9999 quantile is 115."""
    bits = ops.convert_to_numpy(hashed_uniform_bits(SHAPE, np.asarray((3, 9), "int32"))).ravel()
    expected = bits.size / 64
    for bins in (bits >> np.uint32(26), bits & np.uint32(63)):
        counts = np.bincount(bins.astype(np.int64), minlength=64)
        assert ((counts - expected) ** 2 / expected).sum() < 115


def test_masks_of_neighbouring_seeds_and_elements_are_independent():
    """Two independent masks agree on (1 - p)^2 + p^2 of their elements. A seed generator hands out seeds
    one apart, where a hash of `index ^ seed` or `index + seed` would give the same mask permuted or
    shifted: the agreement is also checked after swapping neighbours and shifting by one."""
    expected = (1 - RATE) ** 2 + RATE**2
    first = _keep((11, 40)).ravel()
    for other_seed in ((11, 41), (12, 40)):
        other = _keep(other_seed).ravel()
        swapped = other.reshape(-1, 2)[:, ::-1].ravel()
        for agreement in ((first == other).mean(), (first == swapped).mean(), (first[1:] == other[:-1]).mean()):
            assert abs(agreement - expected) < FIVE_SIGMA
    assert abs((first[1:] & first[:-1]).mean() - (1 - RATE) ** 2) < FIVE_SIGMA


def test_successive_calls_draw_new_masks_that_a_saved_seed_state_repeats():
    layer = HashedDropout(RATE, seed=1)
    inputs = np.ones((500, 400), "float32")
    state = ops.convert_to_numpy(layer.seed_generator.state)
    first, second = (ops.convert_to_numpy(layer(inputs, training=True)) == 0 for _ in range(2))
    assert not np.array_equal(first, second)
    layer.seed_generator.state.assign(state)
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(inputs, training=True)) == 0, first)


def test_a_compiled_function_draws_the_masks_of_an_uncompiled_one():
    """Under XLA the hash is the same integer arithmetic: a compiled step drops what an uncompiled one would."""
    if keras.config.backend() != "tensorflow":
        pytest.skip("XLA's tf.function: the JAX backend compiles everything")
    import tensorflow as tf

    layer = HashedDropout(RATE, seed=2)
    inputs = np.ones((64, 4, 32, 32), "float32")
    state = ops.convert_to_numpy(layer.seed_generator.state)
    eager = ops.convert_to_numpy(layer(inputs, training=True))
    layer.seed_generator.state.assign(state)
    compiled = tf.function(lambda x: layer(x, training=True), jit_compile=True)(inputs)
    np.testing.assert_array_equal(compiled.numpy(), eager)


def test_mixed_precision_keeps_the_dtype_and_scale():
    outputs = HashedDropout(0.5, seed=3, dtype="mixed_bfloat16")(ops.ones((100, 100), "bfloat16"), training=True)
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    assert set(np.unique(ops.convert_to_numpy(ops.cast(outputs, "float32")))) == {0.0, 2.0}


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5])
def test_a_rate_outside_zero_to_one_is_refused(rate):
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\)"):
        HashedDropout(rate)


def test_model_code_draws_every_mask_through_the_hashed_layer():
    """Keras' Dropout on TensorFlow is what made XLNet's compiled CPU step 6x slower: none is left."""
    package = pathlib.Path(__file__).resolve().parents[2] / "keras_bertology"
    offenders = [str(path.relative_to(package)) for path in package.rglob("*.py")
                 if path.name != "dropout.py" and any(call in path.read_text(encoding="utf-8")
                                                      for call in ("layers.Dropout(", "random.dropout("))]
    assert offenders == []
