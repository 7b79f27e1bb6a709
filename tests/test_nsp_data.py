"""Next-sentence labels stay with their pairs through the real pipelines, and NSP really trains.

Corpora give every token a globally unique id (see `test_instances.Corpus`),
so each decoded pair tells where its B came from: label 0 iff B is taken from
A's own document (B continues A), 1 iff from another document.
"""

import numpy as np
import pytest

from keras_bertology.data.instances import build_nsp_instances
from keras_bertology.data.masking import DynamicMasker, MaskingConfig
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.static_masking import write_static_tfrecords
from keras_bertology.training.pretrain import PretrainOptions, pretrain
from test_instances import CLS, FIRST_ID, PAD, SEP, Corpus, _segments

MASK = 4
SEQ_LEN = 64
BATCH = 64


@pytest.fixture(scope="module")
def corpus():
    return Corpus(np.random.default_rng(11), num_docs=150, sentences_per_doc=(2, 250), sentence_len=(3, 12))


@pytest.fixture(scope="module")
def instances(corpus):
    return build_nsp_instances(corpus.documents, SEQ_LEN, CLS, SEP, PAD, np.random.default_rng(12))


def _masker(corpus):
    vocab_size = FIRST_ID + corpus.num_tokens
    return DynamicMasker(MaskingConfig(max_predictions=10), vocab_size, MASK, PAD, [PAD, 1, CLS, SEP, MASK])


def _unmasked(batch):
    """The batch's token ids with every masked position given its original id back."""
    token_ids = np.array(batch["token_ids"])
    rows, slots = np.nonzero(batch["mask_weights"])
    token_ids[rows, batch["mask_positions"][rows, slots]] = batch["mask_ids"][rows, slots]
    return token_ids


def _true_labels(corpus, token_ids):
    labels = []
    for row in token_ids:
        tokens_a, tokens_b = _segments(row)
        labels.append(int(corpus.doc(tokens_a[0]) != corpus.doc(tokens_b[0])))
    return np.array(labels)


def _pretrainer(corpus):
    from keras_bertology.models import BertBackbone, BertPretrainer

    backbone = BertBackbone(vocab_size=FIRST_ID + corpus.num_tokens, num_layers=1, num_heads=2,
                            hidden_size=8, intermediate_size=16, max_positions=SEQ_LEN)
    return BertPretrainer(backbone)


def _check_batches(corpus, dataset, expected_rows):
    pretrainer = _pretrainer(corpus)
    rows = 0
    for batch in dataset.as_numpy_iterator():
        truth = _true_labels(corpus, _unmasked(batch))
        np.testing.assert_array_equal(batch["nsp_labels"], truth)
        _, y, weights = pretrainer.split_features(batch)
        np.testing.assert_array_equal(np.asarray(y["nsp"]), truth)
        np.testing.assert_array_equal(np.asarray(weights["nsp"]), np.ones(len(truth)))
        np.testing.assert_array_equal(np.asarray(weights["mlm"]), batch["mask_weights"])
        rows += len(truth)
    assert rows == expected_rows and rows >= 1000


def test_labels_follow_their_pairs_through_the_dynamic_pipeline(corpus, instances):
    assert 0.4 < instances["nsp_labels"].mean() < 0.6
    dataset = make_dataset(instances, BATCH, masker=_masker(corpus), shuffle=True, repeat=False, seed=3)
    _check_batches(corpus, dataset, len(instances["token_ids"]) // BATCH * BATCH)


def test_labels_follow_their_pairs_through_the_static_pipeline(corpus, instances, tmp_path):
    path = str(tmp_path / "static.tfrecord")
    write_static_tfrecords(instances, _masker(corpus), 1, path)
    dataset = make_dataset(None, BATCH, static_path=path, shuffle=True, repeat=False, seed=3,
                           shuffle_buffer=512)
    _check_batches(corpus, dataset, len(instances["token_ids"]) // BATCH * BATCH)


def test_random_next_rate_is_one_half():
    """Forced random pairs are counted exactly; the free draws must be Bernoulli(1/2).

    With one-token sentences and no short targets, a chunk has a single
    sentence only at the end of a document, and A is a strict prefix of every
    longer chunk, so a pair was forced iff A ends at its document's last
    token. Among n >= 100,000 free pairs one binomial sigma is sqrt(0.25 / n)
    <= 0.0016; the bound of 4.5 sigma (<= 0.0071) fails a correct builder
    with probability below 1e-5 and a 52% one almost surely.
    """
    corpus = Corpus(np.random.default_rng(13), num_docs=1000, sentences_per_doc=(20, 200), sentence_len=(1, 1))
    last_token = np.array([doc[-1][-1] for doc in corpus.documents])
    built = build_nsp_instances(corpus.documents, 16, CLS, SEP, PAD, np.random.default_rng(14),
                                short_seq_prob=0.0, dupe_factor=10)
    a_last = np.array([_segments(row)[0][-1] for row in built["token_ids"]])
    forced = a_last == last_token[corpus.doc(a_last)]
    labels = built["nsp_labels"]
    assert np.all(labels[forced] == 1)
    free = labels[~forced]
    assert len(free) >= 100_000
    sigma = np.sqrt(0.25 / len(free))
    assert abs(free.mean() - 0.5) <= 4.5 * sigma, f"free random-next rate {free.mean():.4f}"


def _pair_keys(token_ids):
    """(first and last id of A, first and last id of B) per row: a pair's identity."""
    keys = []
    for row in token_ids:
        tokens_a, tokens_b = _segments(row)
        keys.append((tokens_a[0], tokens_a[-1], tokens_b[0], tokens_b[-1]))
    return keys


def test_dupes_segment_the_corpus_anew(corpus, instances, tmp_path):
    """Each of K builds draws new split points, targets and random-next sentences, as
    create_pretraining_data does: most pairs of one build appear in no other."""
    copies = 5
    built = build_nsp_instances(corpus.documents, SEQ_LEN, CLS, SEP, PAD, np.random.default_rng(15),
                                dupe_factor=copies)
    per_build = len(instances["token_ids"])
    assert abs(len(built["token_ids"]) / per_build - copies) < 0.5
    keys = _pair_keys(built["token_ids"])
    assert len(set(keys)) > 2.5 * per_build
    random_b = {key[2] for key, label in zip(keys, built["nsp_labels"]) if label == 1}
    assert len(random_b) > 2.5 * instances["nsp_labels"].sum()

    # The same holds for what the static pipeline writes and reads back.
    path = str(tmp_path / "dupes.tfrecord")
    write_static_tfrecords(built, _masker(corpus), 1, path)
    read = make_dataset(None, BATCH, static_path=path, shuffle=False, repeat=False)
    token_ids = np.concatenate([_unmasked(batch) for batch in read.as_numpy_iterator()])
    assert len(set(_pair_keys(token_ids))) > 2.5 * per_build


def _topic_corpus(path, rng, documents=4, sentences=400, words=12):
    """Documents each written in their own made-up words: a B from another document shares none."""
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
    """Chance is 0.5; a working pipeline and NSP loss reach > 0.9 in 300 steps (about 0.99 seen).
    Labels detached from their pairs, or an NSP weight of 0, stay near 0.5."""
    corpus = tmp_path / "topics.txt"
    _topic_corpus(corpus, np.random.default_rng(0))
    metrics = pretrain(PretrainOptions(
        model="bert", preset="bert-tiny", corpus=[str(corpus)], steps=300, batch_size=32, seq_len=32,
        vocab_size=1000, out=str(tmp_path / "run"), export=str(tmp_path / "export"), verbose=0,
        masking="dynamic"))
    nsp = metrics["objectives"]["nsp"]
    assert nsp["first"]["accuracy"] < 0.7
    assert nsp["last"]["accuracy"] > 0.9
