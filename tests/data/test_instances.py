"""Instance building: BERT NSP pairs and RoBERTa sentence packing on synthetic corpora.

Every corpus here gives each token a globally unique id (FIRST_ID + its position
in the corpus), so any token of an instance can be traced back to its exact
document and sentence.
"""


import numpy as np
import pytest

from instance_corpus import CLS, FIRST_ID, PAD, SEP, Corpus, is_contiguous, segments
from keras_bertology.data.instances import _cut_counts, build_nsp_instances, pack_sentences
from keras_bertology.errors import ConfigError

@pytest.fixture(scope="module")
def nsp_corpus():
    # Long documents (up to 600 sentences) keep forced random-next instances rare (see the balance test).
    return Corpus(np.random.default_rng(1), num_docs=450, sentences_per_doc=(1, 600), sentence_len=(3, 12))


@pytest.fixture(scope="module")
def nsp_instances(nsp_corpus):
    return build_nsp_instances(
        nsp_corpus.documents, 64, CLS, SEP, PAD, np.random.default_rng(2), short_seq_prob=0.0
    )


def test_nsp_layout(nsp_instances):
    token_ids, segment_ids = nsp_instances["token_ids"], nsp_instances["segment_ids"]
    assert token_ids.dtype == segment_ids.dtype == nsp_instances["nsp_labels"].dtype == np.int32
    assert token_ids.shape == segment_ids.shape and token_ids.shape[1] == 64
    assert np.all(token_ids[:, 0] == CLS)
    assert np.all(np.sum(token_ids == SEP, axis=1) == 2)
    assert np.all(np.sum(token_ids == CLS, axis=1) == 1)
    position = np.arange(64)
    first_sep = np.argmax(token_ids == SEP, axis=1)[:, None]
    second_sep = 63 - np.argmax((token_ids == SEP)[:, ::-1], axis=1)[:, None]
    assert np.all(second_sep > first_sep + 1) and np.all(first_sep > 1)  # A and B are non-empty
    in_b = (position > first_sep) & (position <= second_sep)
    np.testing.assert_array_equal(segment_ids, in_b.astype(np.int32))
    np.testing.assert_array_equal(token_ids == PAD, position > second_sep)
    assert set(np.unique(nsp_instances["nsp_labels"])) == {0, 1}


def test_nsp_label_balance(nsp_corpus, nsp_instances):
    """Half the pairs get a random B, plus the forced ones.

    A chunk of one sentence is always paired with a random B. With sentences
    (<= 12 tokens) shorter than the target (61) that only happens for the last
    chunk of a document, so at most one forced instance per document: the
    expected rate lies in [0.5, 0.5 + 0.5 * docs / N]. Tolerance: 5 binomial sigmas.
    """
    labels = nsp_instances["nsp_labels"]
    n = len(labels)
    assert n >= 20_000
    five_sigma = 5 * np.sqrt(0.25 / n)
    forced_bound = 0.5 * len(nsp_corpus.documents) / n
    assert 0.5 - five_sigma <= labels.mean() <= 0.5 + forced_bound + five_sigma


def test_nsp_segments_come_from_the_source(nsp_corpus, nsp_instances):
    """Actual-next B continues A at a sentence boundary of the same document; random B is from another."""
    max_tokens = 64 - 3
    for row, label in zip(nsp_instances["token_ids"], nsp_instances["nsp_labels"]):
        tokens_a, tokens_b = segments(row)
        assert is_contiguous(tokens_a) and is_contiguous(tokens_b)
        doc_a, doc_b = nsp_corpus.doc(tokens_a[[0, -1]]), nsp_corpus.doc(tokens_b[[0, -1]])
        assert doc_a[0] == doc_a[1] and doc_b[0] == doc_b[1]
        if label == 1:
            assert doc_a[0] != doc_b[0]
            continue
        assert doc_a[0] == doc_b[0]
        # Truncation trims only outer or inner ends, so A's end and B's start bracket a sentence start.
        gap = np.arange(tokens_a[-1] + 1, tokens_b[0] + 1)
        assert len(gap) and any(nsp_corpus.sentence_start(t) for t in gap)
        if len(tokens_a) + len(tokens_b) < max_tokens:  # untruncated: exactly whole sentences
            assert tokens_b[0] == tokens_a[-1] + 1
            assert nsp_corpus.sentence_start(tokens_a[0]) and nsp_corpus.sentence_start(tokens_b[0])
            assert nsp_corpus.sentence_end(tokens_b[-1])


def test_short_seq_prob_draws_short_targets_per_document():
    """short_seq_prob picks a document's target length, as in the original (drawn per document).

    With one-token sentences every instance has exactly the target length, except
    the shorter ones at a document's end or where a random document runs out. So a
    document has an instance of the full 29 tokens iff its target is 29, which
    happens unless the short draw (p=0.1) picks one of 27 lengths in [2, 28]:
    P(short document) = 0.1 * 27 / 28. Tolerance: 5 binomial sigmas over documents.
    """
    corpus = Corpus(np.random.default_rng(3), num_docs=6000, sentences_per_doc=(100, 140), sentence_len=(1, 1))
    instances = build_nsp_instances(corpus.documents, 32, CLS, SEP, PAD, np.random.default_rng(4))
    lengths = np.sum(instances["token_ids"] >= FIRST_ID, axis=1)
    docs = corpus.doc(instances["token_ids"][:, 1])
    longest = np.zeros(len(corpus.documents), int)
    np.maximum.at(longest, docs, lengths)
    assert longest.max() == 29
    short_docs = np.mean(longest < 29)
    expected = 0.1 * 27 / 28
    assert abs(short_docs - expected) <= 5 * np.sqrt(expected * (1 - expected) / len(corpus.documents))


def test_nsp_dupe_factor_segments_the_corpus_again(nsp_corpus):
    args = (nsp_corpus.documents, 64, CLS, SEP, PAD)
    once = build_nsp_instances(*args, np.random.default_rng(5))
    twice = build_nsp_instances(*args, np.random.default_rng(5), dupe_factor=2)
    assert 1.8 < len(twice["token_ids"]) / len(once["token_ids"]) < 2.2


def test_a_chunk_and_a_random_next_segment_end_at_the_first_sentence_that_reaches_their_length():
    """Sentences of 3 tokens and a target of 6 (seq_len 9, no short targets): a chunk is two sentences, one
    for A and one for B, and a random next B needs 6 - 3 tokens, one sentence. A chunk or a B that took one
    sentence more would be cut to fit, so every pair is two whole sentences and nothing is cut."""
    corpus = Corpus(np.random.default_rng(11), num_docs=40, sentences_per_doc=(2, 30), sentence_len=(3, 3))
    instances = build_nsp_instances(corpus.documents, 9, CLS, SEP, PAD, np.random.default_rng(12), short_seq_prob=0.0)
    assert len(instances["token_ids"]) > 300 and 0.3 < instances["nsp_labels"].mean() < 0.7
    for row in instances["token_ids"]:
        for tokens in segments(row):
            assert len(tokens) == 3 and corpus.sentence_start(tokens[0]) and is_contiguous(tokens), row


def test_cut_counts_match_bert_truncation_loop():
    """The closed form equals truncate_seq_pair's loop: trim the longer segment, B on ties."""

    def loop(len_a, len_b, max_total):
        cut_a = cut_b = 0
        while len_a + len_b > max_total:
            if len_a > len_b:
                len_a, cut_a = len_a - 1, cut_a + 1
            else:
                len_b, cut_b = len_b - 1, cut_b + 1
        return cut_a, cut_b

    for len_a in range(1, 40):
        for len_b in range(1, 40):
            for max_total in range(2, 80, 3):
                assert _cut_counts(len_a, len_b, max_total) == loop(len_a, len_b, max_total)


@pytest.mark.parametrize(
    "documents, message",
    [
        ([[np.arange(5, 9)], [np.arange(9, 12)]], "two sentences"),
        ([[np.arange(5, 9), np.arange(9, 12)]], "two non-empty documents"),
        ([[], [np.array([], np.int32)]], "no tokens"),
    ],
)
def test_nsp_rejects_unusable_corpora(documents, message):
    with pytest.raises(ConfigError, match=message):
        build_nsp_instances(documents, 16, CLS, SEP, PAD, np.random.default_rng(0))


def test_seq_len_too_small():
    documents = [[np.arange(5, 9), np.arange(9, 12)], [np.arange(12, 20)]]
    with pytest.raises(ConfigError, match="seq_len"):
        build_nsp_instances(documents, 4, CLS, SEP, PAD, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="seq_len"):
        pack_sentences(documents, 2, CLS, SEP, PAD)


@pytest.fixture(scope="module")
def pack_corpus():
    return Corpus(np.random.default_rng(6), num_docs=800, sentences_per_doc=(1, 40), sentence_len=(1, 20))


def _body(row):
    """Tokens between <cls> and the final <sep>."""
    return row[1 : np.flatnonzero(row == SEP)[-1]]


def test_full_sentences_fill_sequences_and_keep_every_token(pack_corpus):
    """A sequence closes only when the next sentence (<= 20 tokens, + 1 separator) does not fit.

    So a row wastes at most 20 of its 256 slots (fill >= 92%) and on average
    about half a sentence: the mean fill must exceed 95%.
    """
    packed = pack_sentences(pack_corpus.documents, 256, CLS, SEP, PAD, cross_documents=True)
    token_ids = packed["token_ids"]
    assert token_ids.shape[1] == 256 and token_ids.dtype == np.int32
    assert not packed["segment_ids"].any()
    assert np.all(token_ids[:, 0] == CLS)
    assert np.mean(token_ids != PAD) > 0.95
    np.testing.assert_array_equal(token_ids[token_ids >= FIRST_ID], pack_corpus.all_tokens())


def test_full_sentences_separate_documents(pack_corpus):
    """Inside a row, the document changes exactly where an extra separator stands; rows hold whole sentences."""
    packed = pack_sentences(pack_corpus.documents, 256, CLS, SEP, PAD, cross_documents=True)
    crossings = 0
    for row in packed["token_ids"]:
        body = _body(row)
        is_sep = body == SEP
        tokens = body[~is_sep]
        changes = np.flatnonzero(np.diff(pack_corpus.doc(tokens)))
        np.testing.assert_array_equal(changes + 1, np.flatnonzero(is_sep) - np.arange(is_sep.sum()))
        assert pack_corpus.sentence_start(tokens[0]) and pack_corpus.sentence_end(tokens[-1])
        crossings += len(changes)
    assert crossings > 0


def test_doc_sentences_never_cross_documents(pack_corpus):
    packed = pack_sentences(pack_corpus.documents, 256, CLS, SEP, PAD, cross_documents=False)
    token_ids = packed["token_ids"]
    assert np.all(np.sum(token_ids == SEP, axis=1) == 1)
    for row in token_ids:
        assert len(set(pack_corpus.doc(_body(row)))) == 1
    np.testing.assert_array_equal(token_ids[token_ids >= FIRST_ID], pack_corpus.all_tokens())
    full = pack_sentences(pack_corpus.documents, 256, CLS, SEP, PAD, cross_documents=True)
    assert len(token_ids) > len(full["token_ids"])


@pytest.mark.parametrize("cross_documents", [True, False])
def test_long_sentences_are_cut_into_full_chunks(cross_documents):
    documents = [[np.arange(5, 8)], [np.arange(100, 1100), np.arange(2000, 2003)]]
    token_ids = pack_sentences(documents, 64, CLS, SEP, PAD, cross_documents)["token_ids"]
    lengths = np.sum(token_ids != PAD, axis=1)
    assert list(lengths) == [3 + 2] + [64] * 16 + [(1000 - 16 * 62) + 3 + 2]
    expected = np.concatenate([np.concatenate(doc) for doc in documents])
    np.testing.assert_array_equal(token_ids[token_ids >= FIRST_ID], expected)
