"""Batches are a function of (seed, step): what makes a resumed run continue exactly where it stopped."""

import types

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.pipeline import batch_indices, make_dataset
from keras_bertology.data.static_masking import write_static_tfrecords
from keras_bertology.models.registry import FAMILIES

VOCAB, PAD, UNK, CLS, SEP, MASK = 500, 0, 1, 2, 3, 4
SEQ_LEN, BATCH = 32, 8


def _tokenizer():
    """What the maskers read from a tokenizer; a third of the ids continue a word."""
    starts = np.random.default_rng(0).random(VOCAB) > 0.3
    starts[:5] = True
    return types.SimpleNamespace(vocab_size=VOCAB, pad_id=PAD, cls_id=CLS, sep_id=SEP, mask_id=MASK,
                                 special_ids=[PAD, UNK, CLS, SEP, MASK], word_start_table=starts)


def _instances(rows, seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, VOCAB, (rows, SEQ_LEN)).astype(np.int32)
    token_ids[:, 0], token_ids[:, -1] = CLS, SEP
    token_ids[rows // 2:, -6:] = PAD
    return {"token_ids": token_ids, "row": np.arange(rows, dtype=np.int32)}


def _equal(first, second):
    return first.keys() == second.keys() and all(np.array_equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("name", sorted(name for name, family in FAMILIES.items() if family.data.masks_tokens))
def test_a_seed_fixes_every_draw_of_each_family_masking(name):
    """(A causal LM's data stage draws nothing: `test_gpt.py` checks its targets.)"""
    masker = FAMILIES[name].build_masker(_tokenizer(), max_predictions=6)
    batch = {"token_ids": tf.constant(_instances(BATCH)["token_ids"])}

    def mask(seed=None):
        return {key: value.numpy() for key, value in masker(batch, seed=seed).items()}

    first = mask(seed=[7, 3])
    assert _equal(first, mask(seed=[7, 3]))
    assert not _equal(first, mask(seed=[7, 4]))
    assert not _equal(first, mask(seed=[8, 3]))
    assert not _equal(mask(), mask())  # without a seed, a new mask at every call
    # Inside a tf.data graph (where the pipeline runs it) the seed gives the same draws as eagerly.
    graph = tf.data.Dataset.from_tensors(batch).map(lambda b: masker(b, seed=tf.constant([7, 3])))
    assert _equal(first, next(graph.as_numpy_iterator()))


def _batches(*args, **kwargs):
    return np.stack(list(batch_indices(*args, **kwargs).as_numpy_iterator()))


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_pass_visits_each_instance_once_in_a_new_order(shuffle):
    rows = 50  # passes straddle batches: 50 is not a multiple of 8
    stream = _batches(rows, 8, seed=5, shuffle=shuffle, passes=4)
    assert stream.shape == (25, 8)  # 200 positions = 4 passes
    passes = stream.reshape(4, rows)
    for visit in passes:
        assert sorted(visit) == list(range(rows))
    if shuffle:
        assert len({tuple(visit) for visit in passes}) == 4
    else:
        assert all(list(visit) == list(range(rows)) for visit in passes)
    # Started later: the same batches, without the ones before.
    np.testing.assert_array_equal(_batches(rows, 8, seed=5, shuffle=shuffle, start_step=7, passes=4), stream[7:])
    # Fewer instances than one batch: a batch holds several passes, each complete.
    small = _batches(3, 9, seed=5, passes=6).reshape(6, 3)
    assert all(sorted(visit) == [0, 1, 2] for visit in small)


def test_shuffled_order_is_uniform_over_positions():
    """Each instance's position in a pass, over many passes, is uniform over the pass (chi-square)."""
    rows, passes = 10, 4000
    counts = np.zeros((rows, rows))
    for visit in _batches(rows, rows, seed=1, passes=passes):
        counts[np.arange(rows), visit] += 1
    expected = passes / rows
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # 81 degrees of freedom ((10 - 1)^2); its 99.9% quantile is 127.
    assert chi2 < 127, chi2


def test_a_stream_started_at_step_k_is_the_rest_of_the_full_stream(tmp_path):
    instances = _instances(21)  # 21 rows, batches of 8: every third batch straddles two passes
    masker = FAMILIES["bert"].build_masker(_tokenizer(), max_predictions=6)
    full = list(make_dataset(instances, BATCH, masker=masker, seed=3).take(9).as_numpy_iterator())
    resumed = list(make_dataset(instances, BATCH, masker=masker, seed=3, start_step=5).take(4).as_numpy_iterator())
    assert all(_equal(a, b) for a, b in zip(full[5:], resumed))
    other_seed = next(make_dataset(instances, BATCH, masker=masker, seed=4).as_numpy_iterator())
    assert not _equal(full[0], other_seed)
    # Masks differ from pass to pass (dynamic masking), also for the same rows.
    unshuffled = list(make_dataset(instances, 7, masker=masker, shuffle=False).take(6).as_numpy_iterator())
    assert np.array_equal(unshuffled[0]["row"], unshuffled[3]["row"])
    assert not np.array_equal(unshuffled[0]["token_ids"], unshuffled[3]["token_ids"])

    path = str(tmp_path / "static.tfrecord")
    write_static_tfrecords(instances, masker, 2, path, batch_size=8, seed=3)
    again = str(tmp_path / "again.tfrecord")
    write_static_tfrecords(instances, masker, 2, again, batch_size=8, seed=3)
    assert open(path, "rb").read() == open(again, "rb").read()
    static = list(make_dataset(None, BATCH, static_path=path, seed=3).take(9).as_numpy_iterator())
    resumed = list(make_dataset(None, BATCH, static_path=path, seed=3, start_step=5).take(4).as_numpy_iterator())
    assert all(_equal(a, b) for a, b in zip(static[5:], resumed))
