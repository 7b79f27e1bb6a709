"""Next-sentence labels stay with their pairs through the real pipelines, and NSP really trains.

Corpora give every token a globally unique id (`test_instances.Corpus`), so
each pair, once its masked positions get their original ids back, tells where
its B came from: label 0 iff B continues A in A's own document, 1 iff B comes
from another document. Every label the pipelines and `split_features` hand to
the model is checked against that provenance.
"""

import numpy as np
import pytest

from instance_corpus import CLS, FIRST_ID, PAD, SEP, Corpus, is_contiguous, segments
from keras_bertology.data.instances import build_nsp_instances
from keras_bertology.data.masking import DynamicMasker, MaskingConfig
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.static_masking import read_static_tfrecords, write_static_tfrecords
from keras_bertology.models import BertBackbone, BertPretrainer
from keras_bertology.pretraining.pretrain import PretrainOptions, pretrain

UNK, MASK = 1, 4
SEQ_LEN = 64
BATCH = 64
# About 1.7 passes over the ~3,800 instances of one build: rows repeat, reshuffled.
NUM_BATCHES = 100
# What _unmasked needs, in its argument order.
MASKED = ("token_ids", "mask_positions", "mask_ids", "mask_weights")


@pytest.fixture(scope="module")
def corpus():
    return Corpus(np.random.default_rng(11), num_docs=150, sentences_per_doc=(2, 250), sentence_len=(3, 12))


@pytest.fixture(scope="module")
def instances(corpus):
    return build_nsp_instances(corpus.documents, SEQ_LEN, CLS, SEP, PAD, np.random.default_rng(12))


def _masker(corpus):
    vocab_size = FIRST_ID + corpus.num_tokens
    return DynamicMasker(MaskingConfig(max_predictions=10), vocab_size, MASK, PAD, [PAD, UNK, CLS, SEP, MASK])


def _pretrainer(corpus):
    backbone = BertBackbone(vocab_size=FIRST_ID + corpus.num_tokens, num_layers=1, num_heads=2,
                            hidden_size=8, intermediate_size=16, max_positions=SEQ_LEN)
    return BertPretrainer(backbone)


def _unmasked(token_ids, mask_positions, mask_ids, mask_weights):
    """Token ids with every real prediction slot's original id put back at its position."""
    token_ids = np.array(token_ids)
    rows, slots = np.nonzero(np.asarray(mask_weights))
    token_ids[rows, np.asarray(mask_positions)[rows, slots]] = np.asarray(mask_ids)[rows, slots]
    return token_ids


def _provenance_labels(corpus, token_ids):
    """Where each row's B came from: 0 if it continues A in A's document, 1 if from another one.

    Decided from the ids alone, as test_instances.test_nsp_segments_come_from_the_source
    does: A and B are contiguous runs of one document each; a B of A's own document
    must continue A (a sentence start between A's last and B's first token).
    """
    labels = np.empty(len(token_ids), np.int32)
    for index, row in enumerate(token_ids):
        tokens_a, tokens_b = segments(row)
        assert is_contiguous(tokens_a) and is_contiguous(tokens_b)
        doc_a, doc_b = corpus.doc(tokens_a[[0, -1]]), corpus.doc(tokens_b[[0, -1]])
        assert doc_a[0] == doc_a[1] and doc_b[0] == doc_b[1]
        if doc_a[0] != doc_b[0]:
            labels[index] = 1
            continue
        gap = np.arange(tokens_a[-1] + 1, tokens_b[0] + 1)
        assert len(gap) and any(corpus.sentence_start(t) for t in gap), "B is from A's document, not after A"
        labels[index] = 0
    return labels


def _check_batches(corpus, instances, dataset):
    """Every label of NUM_BATCHES batches, as read and as split_features gives it, matches its pair.

    Also: each unmasked row is a row the builder made, the NSP sample weight is 1
    for every example (NSP trains on all of them) and the MLM weights are the
    mask weights over their batch mean. Returns the unmasked rows in the order read.
    """
    pretrainer = _pretrainer(corpus)
    row_index = {row.tobytes(): index for index, row in enumerate(instances["token_ids"])}
    seen = []
    for batch in dataset.take(NUM_BATCHES).as_numpy_iterator():
        token_ids = _unmasked(*(batch[key] for key in MASKED))
        truth = _provenance_labels(corpus, token_ids)
        np.testing.assert_array_equal(batch["nsp_labels"], truth)
        built = np.array([row_index[row.tobytes()] for row in token_ids])
        np.testing.assert_array_equal(instances["nsp_labels"][built], truth)

        x, y, weights = pretrainer.split_features(batch)
        x, y, weights = ({key: np.asarray(value) for key, value in part.items()} for part in (x, y, weights))
        # What the model is given: its inputs, unmasked with its MLM targets, are the same pairs.
        model_view = _unmasked(x["token_ids"], x["mask_positions"], y["mlm"], weights["mlm"])
        np.testing.assert_array_equal(model_view, token_ids)
        np.testing.assert_array_equal(x["segment_ids"], batch["segment_ids"])
        np.testing.assert_array_equal(y["nsp"], truth)
        assert weights["nsp"].shape == (BATCH,)
        np.testing.assert_array_equal(weights["nsp"], np.ones(BATCH, np.float32))
        # The mask weights over their batch mean (losses average over the global batch's targets).
        np.testing.assert_allclose(weights["mlm"], batch["mask_weights"] / batch["mask_weights"].mean(), rtol=1e-6)
        assert batch["mask_weights"].sum() >= BATCH  # every row has predictions
        seen.append(built)
    seen = np.concatenate(seen)
    assert len(seen) == NUM_BATCHES * BATCH > 1.5 * len(instances["token_ids"])
    first_pass = seen[: len(instances["token_ids"]) // 2]
    assert not np.all(np.diff(first_pass) > 0), "the pipeline did not shuffle"
    assert 0.4 < instances["nsp_labels"][seen].mean() < 0.6


def test_labels_follow_their_pairs_through_the_dynamic_pipeline(corpus, instances):
    """The real dynamic pipeline (shuffle, repeat, batch, mask) and split_features keep each label on its pair."""
    dataset = make_dataset(instances, BATCH, masker=_masker(corpus), shuffle=True, seed=3)
    _check_batches(corpus, instances, dataset)


def test_labels_follow_their_pairs_through_the_static_pipeline(corpus, instances, tmp_path):
    """Written masked once, read back through the real static pipeline (shuffle, repeat, batch)."""
    path = str(tmp_path / "static.tfrecord")
    write_static_tfrecords(instances, _masker(corpus), 1, path)
    dataset = make_dataset(None, BATCH, static_path=path, shuffle=True, seed=3)
    _check_batches(corpus, instances, dataset)


def test_split_features_weighs_every_nsp_example_once(corpus, instances):
    """NSP has no weight key: split_features must weigh every example 1.0 (0 would never train NSP)."""
    batch = next(make_dataset(instances, BATCH, masker=_masker(corpus), seed=4).as_numpy_iterator())
    _, y, weights = _pretrainer(corpus).split_features(batch)
    assert set(weights) == set(y) == {"mlm", "nsp"}
    nsp_weights = np.asarray(weights["nsp"])
    assert nsp_weights.dtype == np.float32 and nsp_weights.shape == (BATCH,)
    np.testing.assert_array_equal(nsp_weights, np.ones(BATCH, np.float32))
    mask_weights = batch["mask_weights"]
    np.testing.assert_allclose(np.asarray(weights["mlm"]), mask_weights / mask_weights.mean(), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(y["mlm"]), batch["mask_ids"])


def test_random_next_rate_is_one_half():
    """Forced random pairs are counted exactly; the free coin flips must be fair.

    With one-token sentences and short_seq_prob=0 the target is always
    seq_len - 3 = 5 tokens, a chunk holds one sentence only when it is the last
    sentence of its document, and A is a strict prefix of every longer chunk.
    Nothing is ever truncated (a chunk or A plus its random B has at most 5
    tokens). So a pair was forced to a random B iff A ends at its document's
    last token; every other pair's label is a fresh rng.random() < 0.5.

    The free labels sum to a martingale of fair coin flips (their number depends
    on earlier flips only through which chunks are built), so their mean has
    sigma = sqrt(0.25 / n); with n >= 200,000 free pairs (about 293,000 here)
    sigma <= 0.0011. The bound 4.5 sigma (<= 0.005) fails a correct builder with
    probability about 7e-6 (two-sided normal tail); a 52% rate is off by 0.02,
    about 18 sigma, and always fails.
    """
    corpus = Corpus(np.random.default_rng(13), num_docs=1000, sentences_per_doc=(20, 200), sentence_len=(1, 1))
    built = build_nsp_instances(corpus.documents, 8, CLS, SEP, PAD, np.random.default_rng(14),
                                short_seq_prob=0.0, dupe_factor=10)
    token_ids, labels = built["token_ids"], built["nsp_labels"]
    first_sep = np.argmax(token_ids == SEP, axis=1)
    assert np.all(first_sep >= 2) and np.all(np.sum(token_ids >= FIRST_ID, axis=1) <= 5)
    a_last = token_ids[np.arange(len(token_ids)), first_sep - 1]
    last_token = np.array([doc[-1][-1] for doc in corpus.documents])
    forced = a_last == last_token[corpus.doc(a_last)]
    # At most one forced pair per document and build (the document's last sentence).
    assert 0 < forced.sum() <= 10 * len(corpus.documents)
    assert np.all(labels[forced] == 1)
    free = labels[~forced]
    assert len(free) >= 200_000
    sigma = np.sqrt(0.25 / len(free))
    assert abs(free.mean() - 0.5) <= 4.5 * sigma, f"free random-next rate {free.mean():.4f}, sigma {sigma:.4f}"


def _split_points(corpus, token_ids):
    """Per row, A's document and the sentence start after A's last token (where the builder ended A)."""
    sentence_starts = np.flatnonzero(corpus.starts)
    first_sep = np.argmax(token_ids == SEP, axis=1)
    a_last = token_ids[np.arange(len(token_ids)), first_sep - 1]
    return corpus.doc(a_last), sentence_starts[np.searchsorted(sentence_starts, a_last - FIRST_ID, side="right")]


def _dupe_statistics(corpus, token_ids, labels, copies):
    """Distinct (A, B) pairs, random-next Bs and split points, as multiples of one build's count.

    K identical copies give 1.0 for each; K independent segmentations give
    nearly K. Also the smallest per-document ratio (documents with >= 5 pairs per build).
    """
    per_copy = len(token_ids) / copies
    pairs, random_bs = set(), set()
    for row, label in zip(token_ids, labels):
        tokens_a, tokens_b = segments(row)
        pairs.add((tuple(tokens_a), tuple(tokens_b)))
        if label == 1:
            random_bs.add(tuple(tokens_b))
    docs, splits = _split_points(corpus, token_ids)
    pairs_per_doc = np.bincount(docs, minlength=len(corpus.documents)) / copies
    distinct_splits = np.zeros(len(corpus.documents))
    np.add.at(distinct_splits, [doc for doc, _ in set(zip(docs, splits))], 1)
    counted = pairs_per_doc >= 5
    return {
        "pairs": len(pairs) / per_copy,
        "random_bs": len(random_bs) / (labels.sum() / copies),
        "splits": distinct_splits.sum() / per_copy,
        "worst_document_splits": (distinct_splits[counted] / pairs_per_doc[counted]).min(),
    }


def test_dupes_segment_the_corpus_anew(corpus, tmp_path):
    """Each of K builds draws new targets, split points and random-next sentences, as
    create_pretraining_data does, so most pairs of one build appear in no other.

    With K = 5 this corpus gives about 5.0x distinct pairs, 4.6x random Bs, 3.4x
    split points (at least 1.9x in every document) of one build; K identical copies give 1.0x.
    The same holds for the static file the real run writes (built K times, masked once)
    and reads back, whose labels still match their pairs.
    """
    copies = 5
    built = build_nsp_instances(corpus.documents, SEQ_LEN, CLS, SEP, PAD, np.random.default_rng(15),
                                dupe_factor=copies)
    stats = _dupe_statistics(corpus, built["token_ids"], built["nsp_labels"], copies)
    assert stats["pairs"] > 3.0 and stats["random_bs"] > 3.0 and stats["splits"] > 2.5, stats
    assert stats["worst_document_splits"] > 1.5, stats

    # As pretrain's _masked_dataset does with static masking: the K builds masked once, to a file.
    path = str(tmp_path / "dupes.tfrecord")
    assert write_static_tfrecords(built, _masker(corpus), 1, path) == len(built["token_ids"])
    read = {key: [] for key in (*MASKED, "nsp_labels")}
    for batch in read_static_tfrecords(path, SEQ_LEN, 10).batch(4096).as_numpy_iterator():
        for key, values in read.items():
            values.append(batch[key])
    read = {key: np.concatenate(values) for key, values in read.items()}
    token_ids = _unmasked(*(read[key] for key in MASKED))
    np.testing.assert_array_equal(read["nsp_labels"], _provenance_labels(corpus, token_ids))
    np.testing.assert_array_equal(np.sort(token_ids.view(f"V{4 * SEQ_LEN}").ravel()),
                                  np.sort(built["token_ids"].view(f"V{4 * SEQ_LEN}").ravel()))
    assert _dupe_statistics(corpus, token_ids, read["nsp_labels"], copies) == stats


def _topic_corpus(path, rng, documents=4, sentences=400, words=12):
    """Documents each written in their own made-up words: a B from another document shares none with A."""
    syllables = ["ka", "lo", "mi", "ne", "pu", "ra", "si", "to", "vu", "ze", "bo", "da", "fe", "gi", "hu", "je"]
    seen, texts = set(), []
    for _ in range(documents):
        vocabulary = []
        while len(vocabulary) < words:
            word = "".join(rng.choice(syllables, 3))
            if word not in seen:
                seen.add(word)
                vocabulary.append(word)
        texts.append(" ".join(" ".join(rng.choice(vocabulary, rng.integers(5, 9))).capitalize() + "."
                              for _ in range(sentences)))
    path.write_text("\n\n".join(texts) + "\n")


@pytest.mark.slow
def test_nsp_learns_when_random_next_pairs_are_easy_to_spot(tmp_path):
    """Chance is 0.5 (about half the pairs are random-next). With NSP wired right, the
    last logged window scores about 0.99 (0.99-1.0 over seeds 0-2; above 0.9 from step
    ~120-160 of 200). Labels rolled or shuffled against their pairs leave it near 0.5;
    an NSP sample weight of 0 never trains NSP (and the weighted accuracy reads 0.0)."""
    corpus = tmp_path / "topics.txt"
    _topic_corpus(corpus, np.random.default_rng(0))
    metrics = pretrain(PretrainOptions(
        model="bert", preset="bert-tiny", corpus=[str(corpus)], steps=200, batch_size=32, seq_len=32,
        vocab_size=1000, learning_rate=2e-3, out=str(tmp_path / "run"), no_export=True,
        verbose=0, masking="dynamic", seed=0))
    nsp = metrics["objectives"]["nsp"]
    assert nsp["last"]["accuracy"] >= 0.9, nsp
