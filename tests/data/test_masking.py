"""Masked-LM masking: dynamic (tf.data stage), static (TFRecord) and the input pipeline.

Batches are synthetic `[CLS] A [SEP] B [SEP] pad...` rows of random ids
(vocabulary 1000, special ids 0..4, a sprinkling of [UNK]), so no tokenizer is
needed. Statistical checks use at least 1M tokens and 5-sigma binomial bounds:
a correct implementation fails one of them with probability below 1e-6 each
(below 1e-4 for the 128-position uniformity check taken together).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data import static_masking
from keras_bertology.data.masking import DynamicMasker, MaskingConfig
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.static_masking import read_static_tfrecords, write_static_tfrecords
from keras_bertology.errors import BertologyError, ConfigError

VOCAB = 1000
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = [PAD, UNK, CLS, SEP, MASK]
SEQ_LEN = 128
ROWS = 12288  # rows of 64..128 tokens: about 1.1M selectable tokens


def synthetic_instances(rng, rows, min_len, seq_len=SEQ_LEN):
    """Rows of random length with [CLS], two [SEP]s, ~2% [UNK] and padding."""
    lengths = rng.integers(min_len, seq_len + 1, rows)
    token_ids = rng.integers(5, VOCAB, (rows, seq_len))
    token_ids[rng.random((rows, seq_len)) < 0.02] = UNK
    token_ids[np.arange(seq_len) >= lengths[:, None]] = PAD
    token_ids[:, 0] = CLS
    token_ids[np.arange(rows), lengths // 2] = SEP
    token_ids[np.arange(rows), lengths - 1] = SEP
    segment_ids = ((np.arange(seq_len) > lengths[:, None] // 2) & (token_ids != PAD)).astype(np.int32)
    nsp_labels = rng.integers(0, 2, rows).astype(np.int32)
    return {"token_ids": token_ids.astype(np.int32), "segment_ids": segment_ids, "nsp_labels": nsp_labels}


def word_start_table(rng):
    """30% of the ordinary ids are continuation pieces."""
    table = rng.random(VOCAB) > 0.3
    table[SPECIALS] = True
    return table


def make_masker(max_predictions=40, whole_word=False, table=None):
    config = MaskingConfig(max_predictions=max_predictions, whole_word=whole_word)
    return DynamicMasker(config, VOCAB, MASK, PAD, SPECIALS, table)


def mask_all(masker, instances, batch_size=1024):
    """Runs the masker over every row as a tf.data stage and returns numpy arrays."""
    dataset = tf.data.Dataset.from_tensor_slices(instances).batch(batch_size).map(masker)
    batches = list(dataset.as_numpy_iterator())
    return {key: np.concatenate([batch[key] for batch in batches]) for key in batches[0]}


def selectable(token_ids):
    return token_ids >= 5


def masked_counts(out):
    return out["mask_weights"].sum(axis=1).astype(int)


def budget(token_ids, max_predictions):
    """min(max_predictions, ceil(0.15 * selectable tokens)) in exact integer arithmetic."""
    return np.minimum(max_predictions, (selectable(token_ids).sum(axis=1) * 15 + 99) // 100)


def selected_matrix(out):
    """[N, L] bool: which positions hold a real prediction."""
    selected = np.zeros(out["token_ids"].shape, bool)
    rows, slots = np.nonzero(out["mask_weights"])
    selected[rows, out["mask_positions"][rows, slots]] = True
    return selected


@pytest.fixture(scope="module")
def instances():
    return synthetic_instances(np.random.default_rng(0), ROWS, min_len=64)


@pytest.fixture(scope="module")
def table():
    return word_start_table(np.random.default_rng(1))


@pytest.fixture(scope="module")
def token_masked(instances):
    return mask_all(make_masker(), instances)


@pytest.fixture(scope="module")
def word_masked(instances, table):
    return mask_all(make_masker(whole_word=True, table=table), instances)


def test_selection_count_and_rate(instances, token_masked):
    """Each row masks exactly ceil(15% of its selectable tokens) (40 never caps a 128-token row).

    Only the ceiling separates the overall rate from 15%: it adds less than one
    token per row, so the rate lies in [0.15, 0.15 + rows / selectable tokens].
    """
    token_ids = instances["token_ids"]
    counts = masked_counts(token_masked)
    np.testing.assert_array_equal(counts, budget(token_ids, 40))
    total_selectable = selectable(token_ids).sum()
    assert total_selectable > 1_000_000
    rate = counts.sum() / total_selectable
    assert 0.15 <= rate <= 0.15 + len(token_ids) / total_selectable


def test_selection_is_uniform_over_positions(instances, token_masked):
    """A selectable position of row r is chosen with probability k_r / s_r, independently across rows.

    Per position the count of selections has mean sum_r k_r/s_r and variance
    sum_r p_r (1 - p_r) over the rows where it is selectable: every position
    must lie within 5 sigmas.
    """
    token_ids = instances["token_ids"]
    can = selectable(token_ids)
    p = budget(token_ids, 40) / can.sum(axis=1)
    probability = np.where(can, p[:, None], 0.0)
    expected = probability.sum(axis=0)
    sigma = np.sqrt((probability * (1 - probability)).sum(axis=0))
    observed = selected_matrix(token_masked).sum(axis=0)
    check = sigma > 0
    assert np.all(np.abs(observed - expected)[check] <= 5 * sigma[check])


def test_replacement_split(instances, token_masked):
    """80% [MASK], 10% random id, 10% unchanged among selected tokens.

    A random id drawn uniformly from the vocabulary equals [MASK] or the original
    id with probability 1/V each, hence the exact expected shares below.
    """
    weights = token_masked["mask_weights"] > 0
    original = token_masked["mask_ids"][weights]
    rows = np.nonzero(weights)[0]
    now = token_masked["token_ids"][rows, token_masked["mask_positions"][weights]]
    n = len(now)
    assert n > 150_000
    shares = {
        "mask": (np.mean(now == MASK), 0.8 + 0.1 / VOCAB),
        "unchanged": (np.mean(now == original), 0.1 + 0.1 / VOCAB),
        "random": (np.mean((now != MASK) & (now != original)), 0.1 * (1 - 2 / VOCAB)),
    }
    for name, (observed, expected) in shares.items():
        assert abs(observed - expected) <= 5 * np.sqrt(expected * (1 - expected) / n), name
    replaced = now[(now != MASK) & (now != original)]
    # Uniform ids on [0, V): mean (V - 1) / 2, standard deviation V / sqrt(12).
    assert abs(replaced.mean() - (VOCAB - 1) / 2) <= 5 * VOCAB / np.sqrt(12 * len(replaced))


def check_consistency(out, instances, table, whole_word, max_predictions):
    """Shapes, dtypes, cap, filler slots, labels, specials never chosen, other tokens untouched."""
    token_ids = instances["token_ids"]
    rows = len(token_ids)
    assert out["token_ids"].shape == (rows, SEQ_LEN) and out["token_ids"].dtype == np.int32
    assert out["padding_mask"].dtype == bool
    np.testing.assert_array_equal(out["padding_mask"], token_ids != PAD)
    for key in ("segment_ids", "nsp_labels"):
        np.testing.assert_array_equal(out[key], instances[key])
    for key, dtype in (("mask_positions", np.int32), ("mask_ids", np.int32), ("mask_weights", np.float32)):
        assert out[key].shape == (rows, max_predictions) and out[key].dtype == dtype

    weights = out["mask_weights"]
    counts = masked_counts(out)
    assert set(np.unique(weights)) <= {0.0, 1.0}
    np.testing.assert_array_equal(weights, (np.arange(max_predictions) < counts[:, None]).astype(np.float32))
    if whole_word:
        check_word_budget(counts, token_ids, table, max_predictions)
    else:
        np.testing.assert_array_equal(counts, budget(token_ids, max_predictions))

    real = weights > 0
    positions = np.where(real, out["mask_positions"], -1)
    assert np.all(np.diff(positions, axis=1)[real[:, 1:]] > 0)  # ascending, no duplicates
    assert not out["mask_positions"][~real].any() and not out["mask_ids"][~real].any()
    original = token_ids[np.nonzero(real)[0], out["mask_positions"][real]]
    np.testing.assert_array_equal(out["mask_ids"][real], original)
    assert np.all(original >= 5)  # never a special token or padding
    selected = selected_matrix(out)
    np.testing.assert_array_equal(out["token_ids"][~selected], token_ids[~selected])


@pytest.mark.parametrize("whole_word", [False, True])
def test_outputs_are_consistent(instances, table, token_masked, word_masked, whole_word):
    """Uncapped on the large sample, and capped at 5 on rows as short as [CLS] [SEP] [SEP]."""
    check_consistency(word_masked if whole_word else token_masked, instances, table, whole_word, 40)
    short_rows = synthetic_instances(np.random.default_rng(2), 2048, min_len=3)
    capped = mask_all(make_masker(5, whole_word, table), short_rows)
    check_consistency(capped, short_rows, table, whole_word, 5)


def word_ids(token_ids, table):
    """[N, L] word index unique over the batch: a word starts at a word-start id, a special id, or after one."""
    special = np.isin(token_ids, SPECIALS)
    after_special = np.pad(special[:, :-1], ((0, 0), (1, 0)), constant_values=True)
    starts = table[token_ids] | special | after_special
    return np.cumsum(starts.ravel()).reshape(token_ids.shape)


def check_word_budget(counts, token_ids, table, max_predictions):
    """Words are added in random order until the next one would overflow the budget.

    So a row never exceeds its budget and falls short of it by less than its longest selectable word.
    """
    words = word_ids(token_ids, table)
    word_length = np.bincount(words.ravel())[words]
    longest = np.max(word_length * selectable(token_ids), axis=1)
    limit = budget(token_ids, max_predictions)
    assert np.all(counts <= limit)
    assert np.all((counts == limit) | (limit - counts < longest))


def test_whole_word_masks_complete_words(instances, table, word_masked):
    """Every word is either fully selected or not at all, within the token budget."""
    token_ids = instances["token_ids"]
    words = word_ids(token_ids, table).ravel()
    pieces = np.bincount(words)
    chosen = np.bincount(words, weights=selected_matrix(word_masked).ravel())
    assert np.all((chosen == 0) | (chosen == pieces))
    assert np.any((chosen == pieces) & (pieces >= 3))  # multi-piece words do get masked
    check_word_budget(masked_counts(word_masked), token_ids, table, 40)


def test_whole_word_replacement_split(word_masked):
    """The 80/10/10 decision is per piece, as in BERT; same 5-sigma bound on the [MASK] share."""
    real = word_masked["mask_weights"] > 0
    now = word_masked["token_ids"][np.nonzero(real)[0], word_masked["mask_positions"][real]]
    expected = 0.8 + 0.1 / VOCAB
    assert abs(np.mean(now == MASK) - expected) <= 5 * np.sqrt(expected * (1 - expected) / len(now))


def test_dynamic_masks_change_between_epochs(instances):
    """After repeat(), the same instance gets a new mask on each pass (RoBERTa's dynamic masking)."""
    subset = {key: value[:512] for key, value in instances.items()}
    dataset = make_dataset(subset, 64, masker=make_masker(), shuffle=False)
    batches = list(dataset.take(16).as_numpy_iterator())
    first, second = batches[:8], batches[8:]
    for one, two in zip(first, second):
        for key in ("padding_mask", "segment_ids", "nsp_labels"):  # the same instances, in the same order
            np.testing.assert_array_equal(one[key], two[key])
        same = np.all(one["mask_positions"] == two["mask_positions"], axis=1)
        assert not same.any()


def test_pipeline_shapes_are_static(instances):
    dataset = make_dataset(instances, 32, masker=make_masker())
    spec = dataset.element_spec
    assert all(value.shape.is_fully_defined() for value in spec.values())
    assert spec["token_ids"].shape == (32, SEQ_LEN) and spec["mask_positions"].shape == (32, 40)
    batch = next(iter(dataset))
    assert batch["mask_weights"].dtype == tf.float32 and batch["padding_mask"].dtype == tf.bool


@pytest.fixture(scope="module")
def static_file(tmp_path_factory, instances):
    subset = {key: value[:1000] for key, value in instances.items()}
    path = str(tmp_path_factory.mktemp("static") / "masked.tfrecord")
    count = write_static_tfrecords(subset, make_masker(), 3, path, batch_size=128)
    return path, subset, count


def test_static_writing_shows_its_progress_unless_quiet(tmp_path, instances, capsys):
    subset = {key: value[:64] for key, value in instances.items()}
    for verbose in (1, 0):
        path = tmp_path / f"masked-{verbose}.tfrecord"
        write_static_tfrecords(subset, make_masker(), 1, str(path), batch_size=32, verbose=verbose)
        assert ("64/64" in capsys.readouterr().out) == bool(verbose) and path.stat().st_size > 0


def test_static_records_hold_k_different_masks(static_file):
    path, subset, count = static_file
    assert count == 3000 and os.listdir(os.path.dirname(path)) == ["masked.tfrecord"]
    records = next(read_static_tfrecords(path, SEQ_LEN, 40).batch(count).as_numpy_iterator())
    restored = records["token_ids"].copy()
    real = records["mask_weights"] > 0
    rows = np.nonzero(real)[0]
    restored[rows, records["mask_positions"][real]] = records["mask_ids"][real]
    for dupe in range(3):
        np.testing.assert_array_equal(restored[dupe * 1000 : (dupe + 1) * 1000], subset["token_ids"])
        np.testing.assert_array_equal(records["nsp_labels"][dupe * 1000 : (dupe + 1) * 1000], subset["nsp_labels"])
    masks = records["mask_positions"].reshape(3, 1000, -1)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not np.all(masks[a] == masks[b], axis=1).any()
    np.testing.assert_array_equal(masked_counts(records), np.tile(budget(subset["token_ids"], 40), 3))


def test_static_matches_dynamic_specs(static_file):
    path, subset, _ = static_file
    static = make_dataset(None, 32, static_path=path)
    dynamic = make_dataset(subset, 32, masker=make_masker())
    assert static.element_spec == dynamic.element_spec
    batch = next(iter(static))
    assert batch["token_ids"].shape == (32, SEQ_LEN)


def test_static_read_errors(static_file, tmp_path):
    path, _, _ = static_file
    with pytest.raises(BertologyError, match="does not exist"):
        read_static_tfrecords(str(tmp_path / "missing.tfrecord"), SEQ_LEN, 40)
    with pytest.raises(BertologyError, match="seq_len=128"):
        read_static_tfrecords(path, 512, 40)
    with pytest.raises(BertologyError, match="max_predictions=40"):
        read_static_tfrecords(path, SEQ_LEN, 20)


def test_static_write_is_atomic(instances, tmp_path, monkeypatch):
    """A failure half-way leaves neither a partial file nor the temporary one; an old file survives."""
    subset = {key: value[:512] for key, value in instances.items()}
    path = tmp_path / "masked.tfrecord"
    path.write_bytes(b"previous run")
    real_serialize = static_masking.serialize_examples
    calls = []

    def failing_serialize(batch):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_serialize(batch)

    monkeypatch.setattr(static_masking, "serialize_examples", failing_serialize)
    with pytest.raises(OSError, match="disk full"):
        write_static_tfrecords(subset, make_masker(), 2, str(path), batch_size=128)
    assert path.read_bytes() == b"previous run"
    assert os.listdir(tmp_path) == ["masked.tfrecord"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mask_rate": 0.0},
        {"mask_rate": 1.5},
        {"max_predictions": 0},
        {"max_predictions": 2.5},
        {"mask_token_rate": -0.1},
        {"mask_token_rate": 0.8, "random_token_rate": 0.3},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(ConfigError):
        MaskingConfig(**kwargs)


def test_masker_validation(table):
    config = MaskingConfig(whole_word=True)
    with pytest.raises(ConfigError, match="word_start_table"):
        DynamicMasker(config, VOCAB, MASK, PAD, SPECIALS)
    with pytest.raises(ConfigError, match="shape"):
        DynamicMasker(config, VOCAB, MASK, PAD, SPECIALS, table[:10])
    with pytest.raises(ConfigError, match="vocab_size"):
        DynamicMasker(MaskingConfig(), VOCAB, VOCAB, PAD, SPECIALS)


def test_make_dataset_validation(instances, static_file):
    path, _, _ = static_file
    with pytest.raises(ConfigError, match="exactly one"):
        make_dataset(instances, 32)
    with pytest.raises(ConfigError, match="exactly one"):
        make_dataset(instances, 32, masker=make_masker(), static_path=path)
    with pytest.raises(ConfigError, match="instances=None"):
        make_dataset(instances, 32, static_path=path)
    with pytest.raises(ConfigError, match="cannot fill"):
        make_dataset({key: value[:10] for key, value in instances.items()}, 32, masker=make_masker(), repeat=False)


def test_static_records_keep_each_features_dtype_and_shape(tmp_path):
    """Matrices, floats and bools come back as written: XLNet-style [L, L] masks, float targets."""
    rng = np.random.default_rng(0)
    instances = {"token_ids": rng.integers(5, 50, size=(40, 6)).astype(np.int32)}

    def masker(features, seed=None):
        ids = features["token_ids"]
        return {
            "token_ids": ids,
            "permutation_mask": tf.cast(ids[:, :, None] < ids[:, None, :], tf.float32),
            "is_even": tf.equal(ids % 2, 0),
            "mask_positions": tf.cast(ids[:, :2], tf.int64),
            "targets": tf.cast(ids, tf.float32) / 7.0,
            "label": ids[:, 0] % 3,
        }

    path = str(tmp_path / "masked.tfrecord")
    write_static_tfrecords(instances, masker, 1, path, batch_size=16)
    dataset = read_static_tfrecords(path, 6, 2)
    expected = masker({"token_ids": tf.constant(instances["token_ids"])})
    assert {key: (spec.dtype, spec.shape) for key, spec in dataset.element_spec.items()} == {
        key: (value.dtype, value.shape[1:]) for key, value in expected.items()
    }
    read = next(dataset.batch(40).as_numpy_iterator())
    for key, value in expected.items():
        np.testing.assert_array_equal(read[key], value.numpy(), err_msg=key)


def test_static_files_without_a_description_are_refused(tmp_path):
    path = str(tmp_path / "old.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))
        writer.write(tf.train.Example(features=tf.train.Features(feature={"token_ids": feature})).SerializeToString())
    with pytest.raises(BertologyError, match="feature description"):
        read_static_tfrecords(path)


def test_units_marked_per_instance_are_masked_whole_and_fill_the_budget():
    """Per-instance units (`UNIT_STARTS`, 1 to 4 tokens each, drawn at random, phrase-like) replace the
    vocabulary's words: a unit is masked entirely or not at all, the count never passes the budget and
    falls short of it by less than one unit (at most 3 tokens), and every unit length is taken."""
    from keras_bertology.data.masking import UNIT_STARTS

    rng = np.random.default_rng(21)
    instances = synthetic_instances(rng, 4096, 64)
    starts = np.zeros_like(instances["token_ids"], bool)
    lengths = np.zeros_like(instances["token_ids"])
    for row in range(len(starts)):
        position = 0
        while position < SEQ_LEN:
            size = int(rng.integers(1, 5))
            starts[row, position] = True
            lengths[row, position:position + size] = size
            position += size
    masked = mask_all(make_masker(max_predictions=SEQ_LEN), {**instances, UNIT_STARTS: starts})
    chosen = np.zeros_like(starts)
    for row, (positions, weights) in enumerate(zip(masked["mask_positions"], masked["mask_weights"])):
        chosen[row, positions[weights > 0]] = True
    ids = instances["token_ids"]
    real = ~np.isin(ids, SPECIALS)
    unit = np.cumsum(starts | ~real | np.pad(~real[:, :-1], [[0, 0], [1, 0]], constant_values=True), axis=1)
    for row in range(0, len(ids), 97):  # every unit of a sample of rows: all of it chosen, or none
        for index in np.unique(unit[row][chosen[row]]):
            members = (unit[row] == index)
            assert chosen[row][members].all(), (row, index)
    budget = np.ceil(real.sum(1) * 0.15 * (1 - 1e-6))
    count = chosen.sum(1)
    assert np.all(count <= budget) and np.all(count >= budget - 3)
    assert set(np.unique(lengths[chosen & starts])) == {1, 2, 3, 4}


def test_a_static_file_cut_to_what_a_run_reads_gives_that_runs_batches(tmp_path, instances):
    """A run writes only the records its steps read (the shuffle buffer included): its batches must be the
    whole file's, for any seed, and one record fewer than `static_records_read` must already change them."""
    from keras_bertology.data.pipeline import static_records_read

    subset = {key: value[:600] for key, value in instances.items()}
    steps, batch, buffer = 7, 16, 40
    whole, cut = str(tmp_path / "whole.tfrecord"), str(tmp_path / "cut.tfrecord")
    assert write_static_tfrecords(subset, make_masker(), 2, whole, batch_size=32, verbose=0) == 1200
    needed = static_records_read(steps, batch, buffer)
    written = write_static_tfrecords(subset, make_masker(), 2, cut, batch_size=32, verbose=0, limit=needed)
    assert needed == 151 and written == 160  # whole batches of the writing: 5 of 32

    def batches(path, seed):
        dataset = make_dataset(None, batch, static_path=path, seed=seed, shuffle_buffer=buffer)
        return [batch["token_ids"] for batch in dataset.take(steps).as_numpy_iterator()]

    for seed in (0, 5):
        for ours, theirs in zip(batches(cut, seed), batches(whole, seed), strict=True):
            np.testing.assert_array_equal(ours, theirs)
    # The count is tight: the whole file's first records but the last of them read differently.
    short = str(tmp_path / "short.tfrecord")
    with tf.io.TFRecordWriter(short) as writer:  # its description, then needed - 1 records
        for record in tf.data.TFRecordDataset(whole).take(needed).as_numpy_iterator():
            writer.write(record)
    assert any(not np.array_equal(a, b) for a, b in zip(batches(short, 0), batches(whole, 0), strict=True))
    with pytest.raises(ConfigError, match="limit=0"):
        write_static_tfrecords(subset, make_masker(), 1, str(tmp_path / "none.tfrecord"), limit=0)
