"""A run's static masking writes only the records its steps read: the batches it trains on are those of the
whole file, on a corpus larger than that count (the test corpora of the CLI tests are smaller)."""

import numpy as np
import tensorflow as tf

from keras_bertology.data.pipeline import STATIC_SHUFFLE_BUFFER, make_dataset, static_records_read
from keras_bertology.data.static_masking import write_static_tfrecords
from keras_bertology.models import FAMILIES
from keras_bertology.pretraining import pretrain as pretraining
from keras_bertology.pretraining.options import PretrainOptions

STEPS, BATCH, SEQ_LEN = 3, 4, 12


def _run_data(count):
    """BERT's run data of `count` random sentence pairs over a small WordPiece vocabulary."""
    family = FAMILIES["bert"]
    tokenizer = family.train_tokenizer(["the rain falls on Romeo and Juliet in spain"] * 20, 100)
    rng = np.random.default_rng(0)
    token_ids = rng.integers(tokenizer.vocab_size - 20, tokenizer.vocab_size, (count, SEQ_LEN)).astype(np.int32)
    token_ids[:, 0], token_ids[:, 5], token_ids[:, -1] = tokenizer.cls_id, tokenizer.sep_id, tokenizer.sep_id
    segment_ids = np.zeros_like(token_ids)
    segment_ids[:, 6:] = 1
    instances = {"token_ids": token_ids, "segment_ids": segment_ids,
                 "nsp_labels": rng.integers(0, 2, count).astype(np.int32)}
    return family, pretraining._RunData(tokenizer, instances, held_out=[])


def test_a_runs_static_file_holds_what_its_steps_read_and_gives_the_whole_files_batches(tmp_path):
    needed = static_records_read(STEPS, BATCH)
    assert needed == STEPS * BATCH + STATIC_SHUFFLE_BUFFER - 1
    family, data = _run_data(needed + 300)
    options = PretrainOptions(model="bert", preset="bert-tiny", steps=STEPS, batch_size=BATCH, seq_len=SEQ_LEN,
                              masking="static", dupe_factor=1, verbose=0, out=str(tmp_path / "run"))
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    ours = pretraining._masked_dataset(family, data, data_dir, options, 0, 1)
    # The same masker over every instance, written whole.
    whole = str(tmp_path / "whole.tfrecord")
    masker = pretraining.build_masker(family, data.tokenizer, options, 1, data.token_counts)
    assert write_static_tfrecords(data.instances, masker, 1, whole, seed=options.seed, verbose=0) == needed + 300
    theirs = make_dataset(None, BATCH, static_path=whole, seed=options.seed)
    records = [sum(1 for _ in tf.data.TFRecordDataset(path)) for path in (data_dir / "static_masked_x1.tfrecord", whole)]
    assert records[0] < records[1], records  # the run's file was cut
    for step, (a, b) in enumerate(zip(ours.take(STEPS).as_numpy_iterator(), theirs.take(STEPS).as_numpy_iterator(),
                                      strict=True)):
        for name in b:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"step {step}: {name}")
