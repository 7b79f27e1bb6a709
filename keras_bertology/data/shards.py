"""Prepared pretraining data: sharded TFRecord files, the manifest that describes them, and the
`tf.data` stream that trains from them with memory bounded by a shuffle block, not by the corpus.

    DATA_DIR/manifest.json                  what made the shards and what they hold (see `bertology prepare`)
    DATA_DIR/tokenizer/                     the vocabulary the ids are in
    DATA_DIR/shard-00003-of-00016.tfrecord  a header record, then one tf.train.Example per instance

Each shard opens with a header naming its family, tokenizer fingerprint,
features and instance count, so a shard that does not belong to the
manifest, an empty or truncated shard, or one made for another family or
vocabulary is refused before training starts, naming the file.
"""

import hashlib
import json
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert

from keras_bertology.data.random_draws import ORDER, step_seed
from keras_bertology.data.static_masking import (
    documents_as_padding_mask,
    serialize_examples,
    step_argument,
    storage_dtype,
)
from keras_bertology.errors import ConfigError, CorpusError

MANIFEST_FILE = "manifest.json"
TOKENIZER_DIR = "tokenizer"
FORMAT = "keras-bertology-shards"
VERSION = 1
_HEADER_KEY = "shard_header"
# The end of an endless range of passes.
_NEVER = 2**62
# Streams of the per-pass random draws: the order of the shards and the order inside a shuffle block.
_BLOCK_ORDER = 2


def shard_name(index, count):
    return f"shard-{index:05d}-of-{count:05d}.tfrecord"


def tokenizer_fingerprint(tokenizer_dir):
    """SHA-256 over the files of a saved tokenizer: equal fingerprints, the same ids for the same text."""
    digest = hashlib.sha256()
    for path in sorted(Path(tokenizer_dir).rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(tokenizer_dir).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def feature_spec(columns):
    """{name: {"dtype", "shape"}} of per-instance arrays (the leading axis is the instance)."""
    return {key: {"dtype": np.asarray(value).dtype.name, "shape": list(np.shape(value)[1:])}
            for key, value in columns.items()}


def write_shard(path, batches, header, count):
    """Write a header record, then one record per instance of `batches` (dicts of per-instance arrays,
    `count` instances in all); the file appears at `path` only complete, on any file system TensorFlow
    knows (local, gs://, hdfs://). Returns the header, with the features and the count."""
    batches = iter(batches)
    first = next(batches)
    header = dict(header, instances=count, features=feature_spec(first))
    staging = f"{path}.tmp"
    written = 0
    with tf.io.TFRecordWriter(staging) as writer:
        writer.write(_header_record(header))
        for batch in (first, *batches):
            for record in serialize_examples(batch):
                writer.write(record)
                written += 1
    if written != count:
        tf.io.gfile.remove(staging)
        raise ValueError(f"{path}: {written} instances written, {count} announced")
    tf.io.gfile.rename(staging, path, overwrite=True)
    return header


def read_manifest(data_dir):
    """The manifest of DATA_DIR, checked: its format, and every shard it lists present and headed by
    the same family, tokenizer and features. Raises CorpusError naming what is wrong."""
    data_dir = Path(data_dir)
    path = data_dir / MANIFEST_FILE
    if not data_dir.is_dir():
        raise CorpusError(f"--data {data_dir} is not a folder; make one with `bertology prepare`")
    if not path.is_file():
        raise CorpusError(f"--data {data_dir} has no {MANIFEST_FILE}: it was not made by `bertology prepare` "
                          "(or its preparation did not finish)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise CorpusError(f"{path} is not a readable manifest: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CorpusError(f"{path} is not a manifest of prepared shards")
    if manifest.get("version") != VERSION:
        raise CorpusError(f"{path} has version {manifest.get('version')}; this library reads version {VERSION}: "
                          "prepare the corpus again")
    if not (data_dir / TOKENIZER_DIR).is_dir():
        raise CorpusError(f"--data {data_dir} has no {TOKENIZER_DIR}/ folder")
    if tokenizer_fingerprint(data_dir / TOKENIZER_DIR) != manifest["tokenizer_sha256"]:
        raise CorpusError(f"the tokenizer in {data_dir / TOKENIZER_DIR} is not the one the shards were made with")
    for shard in manifest["shards"]:
        _check_header(data_dir / shard["file"], manifest, shard["instances"])
    return manifest


def shard_dataset(data_dir, manifest, batch_size, *, seed=0, start_step=0, masker=None, shuffle_block=4096,
                  cycle_length=4, pipeline=(0, 1)):
    """Fixed-shape batches start_step, start_step + 1, ... of an endless stream of passes over the shards.

    Pass e reads the shards in a random order seeded by (seed, e), `cycle_length`
    at a time interleaved record by record; every `shuffle_block` records
    are put in a random order of their own (a bounded shuffle, also seeded),
    so memory holds one block, not the corpus. Batch k is then masked with
    the seed (seed, k) by `masker` (dynamic masking; None for shards that hold
    masked copies already). Everything is a function of (seed, k): a run
    resumed at step k starts here, re-reading at most one group of
    `cycle_length` shards, and masks nothing twice.
    Stream shards (XLNet) are read one at a time in order, without the shuffle,
    so row r of a batch continues row r of the one before.
    `pipeline` (index, count): input pipeline `index` of `count` (a worker of
    a cluster) reads shards index, index + count, ... only, with masks of its own.
    """
    recipe = manifest["recipe"]
    index, count = pipeline
    if count > 1:
        if recipe.get("stream_batches"):
            raise ConfigError("stream shards lay out whole global batches: they cannot be split among workers")
        if len(manifest["shards"]) < count:
            raise ConfigError(f"the {len(manifest['shards'])} shards in {data_dir} cannot be shared by {count} "
                              f"workers: prepare at least {count} (--shards)")
        manifest = dict(manifest, shards=manifest["shards"][index::count])
    if recipe.get("stream_batches"):
        if batch_size != recipe["batch_size"]:
            raise ConfigError(f"the shards in {data_dir} hold streams laid out for batches of {recipe['batch_size']}; "
                              f"pretrain with --batch-size {recipe['batch_size']}")
        cycle_length, shuffle_block = 1, 1
    paths = tf.constant([str(Path(data_dir) / shard["file"]) for shard in manifest["shards"]])
    counts = tf.constant([shard["instances"] for shard in manifest["shards"]], tf.int64)
    total = int(sum(shard["instances"] for shard in manifest["shards"]))
    if total < batch_size:
        raise ConfigError(f"the {total} instances in {data_dir} cannot fill one batch of {batch_size}")
    first_pass, offset = divmod(start_step * batch_size, total)
    groups = -(-len(manifest["shards"]) // cycle_length)

    def group_records(epoch, order, group, skip):
        """The records of shard group `group` of pass `epoch` (shards in `order`), the first `skip` left out."""
        members = order[group * cycle_length:(group + 1) * cycle_length]
        records = tf.data.Dataset.from_tensor_slices(tf.gather(paths, members)).interleave(
            do_not_convert(lambda path: tf.data.TFRecordDataset(path).skip(1)),
            cycle_length=cycle_length, block_length=1)
        first_block = skip // shuffle_block
        blocks = records.skip(first_block * shuffle_block).batch(shuffle_block).enumerate(first_block)

        @do_not_convert
        def shuffled(index, block):
            key = tf.random.experimental.stateless_fold_in(step_seed(seed, epoch, _BLOCK_ORDER),
                                                           group * (2**20) + index)
            return tf.gather(block, tf.argsort(tf.random.stateless_uniform(tf.shape(block), key)))

        return blocks.map(shuffled).unbatch().skip(skip - first_block * shuffle_block)

    @do_not_convert
    def pass_records(epoch):
        """Pass `epoch`'s records; the first pass of the run starts `offset` records in."""
        skip = tf.where(epoch == first_pass, tf.constant(offset, tf.int64), 0)
        order = tf.argsort(tf.random.stateless_uniform([len(manifest["shards"])], step_seed(seed, epoch, ORDER)))
        sizes = tf.math.segment_sum(tf.gather(counts, order), tf.range(len(manifest["shards"])) // cycle_length)
        ends = tf.cumsum(sizes)
        starts = ends - sizes
        live = tf.data.Dataset.range(groups).filter(do_not_convert(lambda group: ends[group] > skip))
        return live.flat_map(do_not_convert(
            lambda group: group_records(epoch, order, group, tf.maximum(skip - starts[group], 0))))

    parse = _parser(manifest)

    @do_not_convert
    def parsed(step, records):
        batch = parse(records)
        if masker is None:  # masked when prepared
            return documents_as_padding_mask(batch)
        return documents_as_padding_mask(masker(
            batch, seed=tf.random.experimental.stateless_fold_in(step_seed(seed, step), index) if count > 1
            else step_seed(seed, step), **step_argument(masker, step)))

    records = tf.data.Dataset.range(first_pass, _NEVER).flat_map(pass_records)
    batches = records.batch(batch_size, drop_remainder=True)
    return tf.data.Dataset.zip(tf.data.Dataset.range(start_step, _NEVER), batches) \
        .map(parsed, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def sample_instances(data_dir, manifest, limit=20_000):
    """The first `limit` instances of the shards, in file order, as numpy columns (for statistics)."""
    paths = [str(Path(data_dir) / shard["file"]) for shard in manifest["shards"]]
    records = tf.data.Dataset.from_tensor_slices(paths).flat_map(
        do_not_convert(lambda path: tf.data.TFRecordDataset(path).skip(1)))
    return {key: value.numpy() for key, value in _parser(manifest)(next(iter(records.take(limit).batch(limit)))).items()}


def _parser(manifest):
    """Serialized records [N] -> {feature: [N, ...] tensor of the manifest's dtype and shape}."""
    features = manifest["features"]
    stored = {key: tf.io.FixedLenFeature(item["shape"], storage_dtype(item["dtype"])) for key, item in features.items()}

    def parse(records):
        return {key: tf.cast(value, features[key]["dtype"])
                for key, value in tf.io.parse_example(records, stored).items()}

    return parse


def _header_record(header):
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[json.dumps(header).encode()]))
    return tf.train.Example(features=tf.train.Features(feature={_HEADER_KEY: feature})).SerializeToString()


def _check_header(path, manifest, instances):
    """Refuse a shard that is missing, empty, not ours, or made for other shards."""
    if not path.is_file():
        raise CorpusError(f"shard {path} listed in the manifest is missing")
    try:
        first = next(iter(tf.data.TFRecordDataset(str(path)).take(1)), None)
        header = json.loads(tf.train.Example.FromString(first.numpy()).features.feature[_HEADER_KEY]
                            .bytes_list.value[0]) if first is not None else None
    except (tf.errors.OpError, ValueError, IndexError, KeyError):
        header = None
    if header is None:
        raise CorpusError(f"shard {path} is empty or damaged (no readable header record): prepare the corpus again")
    expected = {"family": manifest["recipe"]["model"], "tokenizer_sha256": manifest["tokenizer_sha256"],
                "features": manifest["features"], "instances": instances}
    for key, value in expected.items():
        if header.get(key) != value:
            raise CorpusError(f"shard {path} was made with another {key.replace('_', ' ')} than its manifest "
                              f"({header.get(key)!r}, not {value!r}): it belongs to other prepared data")
