"""Static masking, the original BERT recipe: masks drawn once, written to a TFRecord file.

Each instance is masked `dupe_factor` times with different masks; training then
cycles through these fixed copies. The file's first record describes every
feature (dtype and per-instance shape, e.g. [L] int32 ids, [L, L] permutation
masks, [P] float32 weights); the others hold the values, flattened into int64
or float lists, and are read back with exactly the masker's dtypes and shapes,
so training code treats static and dynamic data alike.
"""

import json
import os
from collections.abc import Callable, Iterator

import keras
import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from keras_bertology.data.random_draws import step_seed
from keras_bertology.errors import BertologyError, ConfigError

_SPEC_KEY = "feature_spec"
_PARSE_BATCH = 1024

# A masking stage: masker(features, seed=None) -> masked features, every draw fixed by `seed`; one whose
# `takes_step` is true also receives the batch's step (`step=`), as a schedule over the run's steps does.
Masker = Callable[..., dict[str, tf.Tensor]]


def step_argument(masker, step):
    """The keyword arguments that give `masker` the batch's step, if it takes one."""
    return {"step": step} if getattr(masker, "takes_step", False) else {}


# Unpadded packing's numbering of each row's documents (`instances.pack_documents`).
DOCUMENT_IDS = "document_ids"


def documents_as_padding_mask(features):
    """A masked batch as the model reads it: with unpadded packing, the numbered documents of each row
    stand in the padding mask (`layers.documents`); other batches as they are."""
    if DOCUMENT_IDS not in features:
        return features
    features = dict(features)
    features["padding_mask"] = features.pop(DOCUMENT_IDS)
    return features


def write_static_tfrecords(
    instances: dict[str, np.ndarray],
    masker: Masker,
    dupe_factor: int,
    path: str,
    batch_size: int = 256,
    seed: int = 0,
    verbose: int = 1,
    limit: int | None = None,
) -> int:
    """Writes `dupe_factor` differently masked copies of every instance to one TFRecord file (a
    progress bar while it writes, unless `verbose` is 0).

    Batch k of the writing is masked with the seed (seed, k), so the same
    instances and seed always give the same file, and a file cut short by
    `limit` (records, rounded up to whole batches of the writing) is the
    first part of the whole one: a run that reads fewer records than the
    corpus holds writes only those (`pipeline.static_records_read`).

    The file appears at `path` only once complete (written to `path + ".tmp"`,
    then renamed), so a crash never leaves a truncated file that looks valid.
    Returns the number of records written (whole batches: `limit` or more).
    """
    if dupe_factor < 1:
        raise ConfigError(f"dupe_factor={dupe_factor} must be at least 1.")
    num_instances = len(instances["token_ids"])
    if num_instances == 0:
        raise ConfigError("There are no instances to mask.")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit={limit} must be at least 1 record.")
    total = num_instances * dupe_factor if limit is None else min(num_instances * dupe_factor, limit)
    written = 0
    progress = keras.utils.Progbar(total, unit_name="record", verbose=1 if verbose else 0)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temp_path = path + ".tmp"
    try:
        with tf.io.TFRecordWriter(temp_path) as writer:
            for batch in masked_batches(instances, masker, seed, dupe_factor, batch_size):
                if written == 0:
                    writer.write(_spec_record(batch))
                for record in serialize_examples(batch):
                    writer.write(record)
                written += len(batch["token_ids"])
                progress.update(min(written, total))
                if written >= total:
                    break
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.remove(temp_path)
        raise
    return written


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
    spec = _read_spec(path)
    _check_length(path, spec, "token_ids", seq_len, "seq_len")
    _check_length(path, spec, "mask_positions", max_predictions, "max_predictions")
    stored = {key: tf.io.FixedLenFeature(shape, storage_dtype(dtype)) for key, (dtype, shape) in spec.items()}

    @do_not_convert
    def parse(records):
        parsed = tf.io.parse_example(records, stored)
        return {key: tf.cast(value, spec[key][0]) for key, value in parsed.items()}

    return tf.data.TFRecordDataset(path).skip(1).batch(_PARSE_BATCH).map(parse).unbatch()


def masked_batches(instances, masker: Masker, seed: int, dupe_factor: int = 1, batch_size: int = 256,
                   key=None) -> Iterator[dict[str, np.ndarray]]:
    """Masked batches (numpy) of every dupe in turn: batch k masked with the seed (seed, k), folded with
    `key` when given (a shard's number, so every shard draws its own masks); prefetch overlaps masking
    with serialization."""
    dataset = tf.data.Dataset.from_tensor_slices(instances).batch(batch_size).repeat(dupe_factor).enumerate()

    @do_not_convert
    def mask(step, batch):
        step_key = step_seed(seed, step)
        if key is not None:
            step_key = tf.random.experimental.stateless_fold_in(step_key, key)
        return masker(batch, seed=step_key)

    return dataset.map(mask).prefetch(2).as_numpy_iterator()


def storage_dtype(dtype):
    """Floats are stored as float lists, every integer or bool as int64."""
    return tf.float32 if tf.as_dtype(dtype).is_floating else tf.int64


def _spec_record(batch: dict[str, np.ndarray]) -> bytes:
    spec = {key: {"dtype": value.dtype.name, "shape": list(value.shape[1:])} for key, value in batch.items()}
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[json.dumps(spec).encode()]))
    return tf.train.Example(features=tf.train.Features(feature={_SPEC_KEY: feature})).SerializeToString()


def serialize_examples(batch: dict[str, np.ndarray]) -> Iterator[bytes]:
    """One serialized tf.train.Example per row of `batch`, each feature flattened (see `storage_dtype`);
    deterministic, so the same instances give the same bytes in any process (a map's order is not)."""
    # Python lists, made once per batch: a proto's repeated field takes them several times faster than numpy rows.
    floats = {key: value.dtype.kind == "f" for key, value in batch.items()}
    rows = {key: value.reshape(len(value), -1).astype(np.float32 if floats[key] else np.int64).tolist()
            for key, value in batch.items()}
    for row in range(len(batch["token_ids"])):
        feature = {key: tf.train.Feature(float_list=tf.train.FloatList(value=values[row])) if floats[key]
                   else tf.train.Feature(int64_list=tf.train.Int64List(value=values[row]))
                   for key, values in rows.items()}
        yield tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def _read_spec(path: str) -> dict[str, tuple]:
    """{key: (dtype, per-instance shape)} from the file's first record."""
    for record in tf.data.TFRecordDataset(path).take(1):
        stored = tf.train.Example.FromString(record.numpy()).features.feature
        if _SPEC_KEY not in stored:
            raise BertologyError(
                f"Static masking file {path!r} does not start with a feature description; "
                "it was not written by this version of the library: delete it to have it rewritten."
            )
        spec = json.loads(stored[_SPEC_KEY].bytes_list.value[0])
        return {key: (tf.as_dtype(item["dtype"]), item["shape"]) for key, item in spec.items()}
    raise BertologyError(f"Static masking file {path!r} holds no records.")


def _check_length(path: str, spec: dict, key: str, expected: int | None, name: str):
    if key not in spec:
        raise BertologyError(
            f"Static masking file {path!r} has no {key!r} feature; it was not written by this library."
        )
    length = spec[key][1][0]
    if expected is not None and length != expected:
        raise BertologyError(
            f"Static masking file {path!r} was written with {name}={length}, not {expected}."
        )
