"""Static masking, the original BERT recipe: masks drawn once, written to a TFRecord file.

Each instance is masked `dupe_factor` times with different masks; training then
cycles through these fixed copies. Every feature is stored as an int64 list and
read back with the dtypes and shapes of `DynamicMasker`'s output, so training
code treats static and dynamic data alike.
"""

import os
from collections.abc import Callable, Iterator

import keras
import numpy as np
import tensorflow as tf

from keras_bertology.errors import BertologyError, ConfigError

# Keys holding one value per masked prediction; any other key is per position or per instance.
_PREDICTION_KEYS = ("mask_positions", "mask_ids", "mask_weights")
# Dtypes that int64 storage loses; every other key is int32.
_DTYPES = {"padding_mask": tf.bool, "mask_weights": tf.float32}
_PARSE_BATCH = 1024

Masker = Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]


def write_static_tfrecords(
    instances: dict[str, np.ndarray],
    masker: Masker,
    dupe_factor: int,
    path: str,
    batch_size: int = 256,
) -> int:
    """Writes `dupe_factor` differently masked copies of every instance to one TFRecord file.

    The file appears at `path` only once complete (written to `path + ".tmp"`,
    then renamed), so a crash never leaves a truncated file that looks valid.
    Returns the number of records written.
    """
    if dupe_factor < 1:
        raise ConfigError(f"dupe_factor={dupe_factor} must be at least 1.")
    num_instances = len(instances["token_ids"])
    if num_instances == 0:
        raise ConfigError("There are no instances to mask.")
    total = num_instances * dupe_factor
    progress = keras.utils.Progbar(total, unit_name="record")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temp_path = path + ".tmp"
    try:
        with tf.io.TFRecordWriter(temp_path) as writer:
            for batch in _masked_batches(instances, masker, dupe_factor, batch_size):
                for record in _serialize(batch):
                    writer.write(record)
                progress.add(len(batch["token_ids"]))
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.remove(temp_path)
        raise
    return total


def read_static_tfrecords(
    path: str, seq_len: int | None = None, max_predictions: int | None = None
) -> tf.data.Dataset:
    """Unbatched feature dicts from a file of `write_static_tfrecords`.

    Feature names and lengths come from the first record; `seq_len` and
    `max_predictions`, when given, are checked against them so a file written
    for another configuration fails here rather than inside the model.
    """
    if not os.path.isfile(path):
        raise BertologyError(
            f"Static masking file {path!r} does not exist; write it with write_static_tfrecords."
        )
    lengths = _feature_lengths(path)
    _check_length(path, lengths, "token_ids", seq_len, "seq_len")
    _check_length(path, lengths, "mask_positions", max_predictions, "max_predictions")
    spec = {key: tf.io.FixedLenFeature(_shape(key, length), tf.int64) for key, length in lengths.items()}

    def parse(records):
        parsed = tf.io.parse_example(records, spec)
        return {key: tf.cast(value, _DTYPES.get(key, tf.int32)) for key, value in parsed.items()}

    return tf.data.TFRecordDataset(path).batch(_PARSE_BATCH).map(parse).unbatch()


def _masked_batches(
    instances, masker: Masker, dupe_factor: int, batch_size: int
) -> Iterator[dict[str, np.ndarray]]:
    """Masked batches of every dupe in turn; prefetch overlaps masking with serialization."""
    dataset = tf.data.Dataset.from_tensor_slices(instances).batch(batch_size).repeat(dupe_factor)
    return dataset.map(masker).prefetch(2).as_numpy_iterator()


def _serialize(batch: dict[str, np.ndarray]) -> Iterator[bytes]:
    columns = {key: value.astype(np.int64).reshape(len(value), -1) for key, value in batch.items()}
    for row in range(len(batch["token_ids"])):
        feature = {
            key: tf.train.Feature(int64_list=tf.train.Int64List(value=column[row].tolist()))
            for key, column in columns.items()
        }
        yield tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _feature_lengths(path: str) -> dict[str, int]:
    for record in tf.data.TFRecordDataset(path).take(1):
        example = tf.train.Example.FromString(record.numpy())
        return {key: len(feature.int64_list.value) for key, feature in example.features.feature.items()}
    raise BertologyError(f"Static masking file {path!r} holds no records.")


def _shape(key: str, length: int) -> list[int]:
    """Per-instance values (like nsp_labels) are stored as one-element lists and read as scalars."""
    return [] if length == 1 and key not in _PREDICTION_KEYS else [length]


def _check_length(path: str, lengths: dict[str, int], key: str, expected: int | None, name: str):
    if key not in lengths:
        raise BertologyError(
            f"Static masking file {path!r} has no {key!r} feature; it was not written by this library."
        )
    if expected is not None and lengths[key] != expected:
        raise BertologyError(
            f"Static masking file {path!r} was written with {name}={lengths[key]}, not {expected}."
        )
