"""tf.data input pipelines yielding fixed-shape batches of masked-LM features."""

import numpy as np
import tensorflow as tf

from keras_bertology.data.static_masking import Masker, read_static_tfrecords
from keras_bertology.errors import ConfigError


def make_dataset(
    instances: dict[str, np.ndarray] | None,
    batch_size: int,
    masker: Masker | None = None,
    static_path: str | None = None,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = True,
    shuffle_buffer: int = 10_000,
) -> tf.data.Dataset:
    """Batches of masked features, all of fixed shape (drop_remainder=True).

    Dynamic (`masker` given): instances -> shuffle -> repeat -> batch -> masker
    -> prefetch; the mask is drawn after repeat, so each pass sees a new one.
    The whole in-memory instance set is reshuffled on each pass.
    Static (`static_path` given, `instances` None): the TFRecord file ->
    shuffle (buffer of `shuffle_buffer` records) -> repeat -> batch -> prefetch.
    """
    if (masker is None) == (static_path is None):
        raise ConfigError("Pass exactly one of masker (dynamic masking) and static_path (static masking).")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be at least 1.")
    if static_path is not None:
        if instances is not None:
            raise ConfigError("Static masking reads its instances from static_path; pass instances=None.")
        return _static_dataset(static_path, batch_size, shuffle, seed, repeat, shuffle_buffer)
    return _dynamic_dataset(instances, batch_size, masker, shuffle, seed, repeat)


def _dynamic_dataset(instances, batch_size: int, masker: Masker, shuffle: bool, seed: int, repeat: bool):
    """Shuffles and batches indices, then gathers whole batches: cheaper than per-example slicing."""
    num_instances = len(instances["token_ids"])
    if num_instances == 0 or (not repeat and num_instances < batch_size):
        raise ConfigError(f"{num_instances} instances cannot fill one batch of {batch_size}.")
    columns = {key: tf.constant(value) for key, value in instances.items()}
    indices = tf.data.Dataset.range(num_instances)
    if shuffle:
        indices = indices.shuffle(num_instances, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        indices = indices.repeat()
    batches = indices.batch(batch_size, drop_remainder=True)
    batches = batches.map(lambda index: {key: tf.gather(column, index) for key, column in columns.items()})
    return batches.map(masker, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _static_dataset(path: str, batch_size: int, shuffle: bool, seed: int, repeat: bool, shuffle_buffer: int):
    dataset = read_static_tfrecords(path)
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
