"""The stream of prepared shards: every pass visits every instance once, a stream started at step k is
the tail of the whole stream, memory is bounded by the shuffle block, and bad shards are refused."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.shards import (
    FORMAT, MANIFEST_FILE, TOKENIZER_DIR, VERSION, read_manifest, sample_instances, shard_dataset, shard_name,
    tokenizer_fingerprint, write_shard)
from keras_bertology.errors import ConfigError, CorpusError

SEQ = 4


def make_data(folder, counts, stream_batch=None, family="roberta"):
    """Shards of instances whose token_ids row i is [n, n, n, n] for instance number n (unique)."""
    (folder / TOKENIZER_DIR).mkdir(parents=True)
    (folder / TOKENIZER_DIR / "vocab.txt").write_text("[PAD]\nword\n")
    fingerprint = tokenizer_fingerprint(folder / TOKENIZER_DIR)
    shards, first = [], 0
    for index, count in enumerate(counts):
        ids = np.repeat(np.arange(first, first + count, dtype=np.int32)[:, None], SEQ, axis=1)
        batches = [{"token_ids": ids[i:i + 7], "weights": np.ones((len(ids[i:i + 7]), 2), np.float32)}
                   for i in range(0, count, 7)]
        header = write_shard(str(folder / shard_name(index, len(counts))), batches,
                             {"family": family, "tokenizer_sha256": fingerprint}, count)
        shards.append({"file": shard_name(index, len(counts)), "instances": count})
        first += count
    recipe = {"model": family, "stream_batches": stream_batch is not None, "batch_size": stream_batch}
    manifest = {"format": FORMAT, "version": VERSION, "recipe": recipe, "tokenizer_sha256": fingerprint,
                "features": header["features"], "shards": shards, "instances": first}
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    return read_manifest(folder)


def instance_numbers(dataset, steps):
    return np.concatenate([batch["token_ids"][:, 0].numpy() for batch in dataset.take(steps)])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    return folder, make_data(folder, [53, 41, 60, 47, 38, 55])


def test_each_pass_visits_every_instance_once_in_a_new_order(data):
    folder, manifest = data
    total = manifest["instances"]  # 294 instances, batches of 7: 42 batches a pass
    numbers = instance_numbers(shard_dataset(folder, manifest, 7, seed=3, shuffle_block=16, cycle_length=2),
                               3 * total // 7)
    passes = numbers.reshape(3, total)
    for visit in passes:
        np.testing.assert_array_equal(np.sort(visit), np.arange(total))
    assert not np.array_equal(passes[0], passes[1]) and not np.array_equal(passes[1], passes[2])
    # The block shuffle mixes records across the interleaved shards: consecutive instances rarely
    # come from one shard's consecutive records.
    assert np.mean(np.diff(passes[0]) == 1) < 0.1


@pytest.mark.parametrize("start", [1, 5, 41, 42, 43, 100])
def test_a_stream_started_at_step_k_is_the_tail_of_the_whole_stream(data, start):
    folder, manifest = data
    settings = dict(seed=11, shuffle_block=16, cycle_length=2)
    whole = instance_numbers(shard_dataset(folder, manifest, 7, **settings), start + 20)
    tail = instance_numbers(shard_dataset(folder, manifest, 7, start_step=start, **settings), 20)
    np.testing.assert_array_equal(tail, whole[start * 7:])


def test_batches_are_masked_with_the_seed_of_their_step(data):
    folder, manifest = data
    seeds = []

    def masker(batch, seed):
        return dict(batch, seed=seed)

    for batch in shard_dataset(folder, manifest, 7, seed=5, start_step=3, masker=masker).take(2):
        seeds.append(batch["seed"].numpy().tolist())
    from keras_bertology.data.random_draws import step_seed
    assert seeds == [step_seed(5, 3).numpy().tolist(), step_seed(5, 4).numpy().tolist()]


def test_stream_shards_are_read_whole_and_in_order(tmp_path):
    manifest = make_data(tmp_path, [8, 12, 4], stream_batch=4, family="xlnet")
    numbers = instance_numbers(shard_dataset(tmp_path, manifest, 4, seed=1), 6).reshape(6, 4)
    starts = numbers[:, 0]
    # Each batch holds 4 consecutive records of one shard; a shard's batches follow each other.
    np.testing.assert_array_equal(numbers - starts[:, None], np.tile(np.arange(4), (6, 1)))
    shard_of = np.searchsorted([8, 20, 24], starts, side="right")
    runs = 1 + np.count_nonzero(np.diff(shard_of))
    assert runs == len(np.unique(shard_of)) == 3  # one pass: each shard once, whole
    for shard in np.unique(shard_of):
        rows = starts[shard_of == shard]
        np.testing.assert_array_equal(np.diff(rows), 4)
    with pytest.raises(ConfigError, match="pretrain with --batch-size 4"):
        shard_dataset(tmp_path, manifest, 8)


def test_sample_instances_reads_the_first_instances_with_their_dtypes(data):
    folder, manifest = data
    sample = sample_instances(folder, manifest, limit=60)
    assert sample["token_ids"].dtype == np.int32 and sample["weights"].dtype == np.float32
    np.testing.assert_array_equal(sample["token_ids"][:, 0], np.arange(60))


def copy_data(source, target):
    shutil.copytree(source, target)
    return target


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / MANIFEST_FILE).unlink(), "has no manifest.json"),
    (lambda d: (d / MANIFEST_FILE).write_text("{not json"), "is not a readable manifest"),
    (lambda d: (d / shard_name(2, 6)).unlink(), "shard-00002-of-00006.tfrecord listed in the manifest is missing"),
    (lambda d: (d / shard_name(1, 6)).write_bytes(b""), "shard-00001-of-00006.tfrecord is empty or damaged"),
    (lambda d: (d / shard_name(1, 6)).write_bytes((d / shard_name(1, 6)).read_bytes()[:30]), "is empty or damaged"),
    (lambda d: (d / TOKENIZER_DIR / "vocab.txt").write_text("[PAD]\nother\n"), "is not the one the shards were made"),
    (lambda d: shutil.copy(d / shard_name(0, 6), d / shard_name(3, 6)), "another instances than its manifest"),
])
def test_damaged_or_foreign_data_is_refused_naming_the_file(data, tmp_path, damage, message):
    folder = copy_data(data[0], tmp_path / "copy")
    damage(folder)
    with pytest.raises(CorpusError, match=message):
        read_manifest(folder)


def test_a_shard_of_other_prepared_data_is_refused(data, tmp_path):
    other = make_data(tmp_path / "other", [53, 41, 60, 47, 38, 55], family="bert")
    assert other
    folder = copy_data(data[0], tmp_path / "copy")
    shutil.copy(tmp_path / "other" / shard_name(4, 6), folder / shard_name(4, 6))
    with pytest.raises(CorpusError, match="shard-00004-of-00006.tfrecord was made with another family"):
        read_manifest(folder)


def test_a_corrupt_record_inside_a_shard_stops_the_stream_with_data_loss(data, tmp_path):
    folder = copy_data(data[0], tmp_path / "copy")
    path = folder / shard_name(0, 6)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    manifest = read_manifest(folder)  # the header is intact
    with pytest.raises(tf.errors.DataLossError):
        instance_numbers(shard_dataset(folder, manifest, 7, cycle_length=6), 42)
