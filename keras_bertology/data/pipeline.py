"""tf.data input pipelines yielding fixed-shape batches of masked-LM features."""

import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from keras_bertology.data.random_draws import ORDER, step_seed
from keras_bertology.data.static_masking import (
    Masker,
    documents_as_padding_mask,
    read_static_tfrecords,
    step_argument,
)
from keras_bertology.errors import ConfigError

# The end of an endless range of steps.
_NEVER = 2**62
# Records a static file's reading shuffles among (a seeded buffer: the same file and seed, the same order).
STATIC_SHUFFLE_BUFFER = 10_000


def make_dataset(
    instances: dict[str, np.ndarray] | None,
    batch_size: int,
    masker: Masker | None = None,
    static_path: str | None = None,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = True,
    shuffle_buffer: int = STATIC_SHUFFLE_BUFFER,
    start_step: int = 0,
) -> tf.data.Dataset:
    """Batches of masked features, all of fixed shape (drop_remainder=True), from batch `start_step` on.

    Dynamic (`masker` given): batch k holds the instances at positions
    k * batch_size ... of an endless stream of passes over the instances,
    each pass in its own random order (when `shuffle`), masked with the
    seed (seed, k). A batch is thus a function of (seed, k) alone: a run
    resumed at step k continues exactly where it stopped, without replaying
    the steps before.
    Static (`static_path` given, `instances` None): the TFRecord file ->
    shuffle (buffer of `shuffle_buffer` records, seeded) -> repeat -> batch,
    the first `start_step` batches skipped -> prefetch.
    """
    if (masker is None) == (static_path is None):
        raise ConfigError("Pass exactly one of masker (dynamic masking) and static_path (static masking).")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be at least 1.")
    if static_path is not None:
        if instances is not None:
            raise ConfigError("Static masking reads its instances from static_path; pass instances=None.")
        return _static_dataset(static_path, batch_size, shuffle, seed, repeat, shuffle_buffer, start_step)
    return _dynamic_dataset(instances, batch_size, masker, shuffle, seed, repeat, start_step)


def _dynamic_dataset(instances, batch_size, masker, shuffle, seed, repeat, start_step):
    """Gathers whole batches by index: cheaper than per-example slicing."""
    num_instances = len(instances["token_ids"])
    if num_instances == 0 or (not repeat and num_instances < batch_size):
        raise ConfigError(f"{num_instances} instances cannot fill one batch of {batch_size}.")
    columns = {key: tf.constant(value) for key, value in instances.items()}

    @do_not_convert
    def masked_batch(step, rows):
        return documents_as_padding_mask(masker({key: tf.gather(column, rows) for key, column in columns.items()},
                                                seed=step_seed(seed, step), **step_argument(masker, step)))

    rows = batch_indices(num_instances, batch_size, seed, shuffle, start_step, None if repeat else 1)
    steps = tf.data.Dataset.range(start_step, _NEVER)
    return tf.data.Dataset.zip(steps, rows).map(masked_batch, num_parallel_calls=tf.data.AUTOTUNE) \
        .prefetch(tf.data.AUTOTUNE)


def batch_indices(num_instances, batch_size, seed, shuffle=True, start_step=0, passes=None):
    """[batch_size] instance indices of batches start_step, start_step + 1, ... of a stream of passes.

    Pass e visits every instance once, in the order of a random permutation
    seeded by (seed, e) (in index order without `shuffle`); batches run on
    across passes. Starting at a later step costs at most one pass skipped
    within, not the steps before. `passes` limits the stream (None: endless).
    """
    first_pass, offset = divmod(start_step * batch_size, num_instances)

    @do_not_convert
    def visit(index):
        if not shuffle:
            return tf.data.Dataset.range(num_instances)
        keys = tf.random.stateless_uniform([num_instances], step_seed(seed, index, ORDER))
        return tf.data.Dataset.from_tensor_slices(tf.argsort(keys))

    stop = _NEVER if passes is None else passes
    stream = tf.data.Dataset.range(first_pass, stop).flat_map(visit).skip(offset)
    return stream.batch(batch_size, drop_remainder=True)


def static_records_read(steps: int, batch_size: int, shuffle_buffer: int = STATIC_SHUFFLE_BUFFER) -> int:
    """How many of a static file's first records `steps` batches read: a seeded shuffle fills its buffer,
    then refills it before each draw, so the last record drawn comes after at most this many. A file of
    only these records gives those batches exactly as the whole file does (tests/data/test_masking.py)."""
    return steps * batch_size + shuffle_buffer - 1


def _static_dataset(path, batch_size, shuffle, seed, repeat, shuffle_buffer, start_step):
    dataset = read_static_tfrecords(path)
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=True).skip(start_step).map(documents_as_padding_mask) \
        .prefetch(tf.data.AUTOTUNE)
