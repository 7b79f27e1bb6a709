"""Seeded random numbers for the masking stages, so a batch's masks depend on its seed alone.

Each masking stage takes an optional `seed` ([2] integers) and draws every
random number of one call from a `RandomDraws` of it: stateless ops keyed by
the seed and the draw's rank within the call. The input pipeline seeds batch
k with (run seed, k), so the masks of a run are the same however often it is
interrupted and resumed, and on every worker that builds the batch. Without a
seed, a stage draws a fresh one per call (a new mask each time).
"""

import tensorflow as tf

_MAX_SEED = 2**31 - 1


# Independent seed streams of one run: batch k's masks and epoch e's order.
MASKS, ORDER = 0, 1


def step_seed(seed, index, stream=MASKS):
    """The [2] int32 seed of item `index` (batch or epoch) of `stream` in a run seeded with `seed`."""
    pair = tf.stack([tf.cast(seed, tf.int32), tf.cast(index, tf.int32)])
    return tf.random.experimental.stateless_fold_in(pair, stream)


class RandomDraws:
    """The random numbers of one masking call, each draw keyed by (seed, its rank in the call)."""

    def __init__(self, seed=None):
        if seed is None:
            seed = tf.random.uniform([2], 0, _MAX_SEED, tf.int32)
        self._seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
        self._count = 0

    def _next_key(self):
        key = tf.random.experimental.stateless_fold_in(self._seed, self._count)
        self._count += 1
        return key

    def uniform(self, shape, minval=0, maxval=None, dtype=tf.float32):
        """Like `tf.random.uniform` (floats in [minval, maxval or 1), ints in [minval, maxval))."""
        return tf.random.stateless_uniform(shape, self._next_key(), minval, maxval, dtype)

    def categorical(self, logits, num_samples, dtype=tf.int32):
        """Like `tf.random.categorical`: [rows, num_samples] class indices."""
        return tf.random.stateless_categorical(logits, num_samples, self._next_key(), dtype=dtype)


    def per_iteration(self):
        """iteration -> independent draws, for the body of a loop. The key is taken here, outside the
        body: traced once (graph) or run once per iteration (eager), the body sees the same numbers."""
        key = self._next_key()
        return lambda index: RandomDraws(tf.random.experimental.stateless_fold_in(key, index))
