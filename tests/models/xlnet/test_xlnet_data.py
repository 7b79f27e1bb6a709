"""XLNet's data: the stream layout of `stream_instances` and the permutation-LM stage, exact and statistical.

Tolerances: a frequency (or mean) is compared within 5 standard errors of
its sampling error, computed here from the sample size, so a correct stage
fails about once in a million runs per comparison, while the planted
mistakes these tests are meant to catch (uniform n, n pieces instead of n
words, unshuffled orders) miss by dozens of standard errors at these sizes.
"""

import math
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.builder_contexts import InstanceContext, MaskingContext
from keras_bertology.data.corpus import default_corpus_paths, read_corpus
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.tokenizers.sentencepiece import train_sentencepiece
from keras_bertology.errors import ConfigError
from keras_bertology.models.xlnet.instances import stream_instances
from keras_bertology.models.xlnet.permutation import PermutationMasker, permutation_masker

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIALS = {"cls_id": CLS, "sep_id": SEP, "pad_id": PAD}
FIRST_ID = 10  # ids below are special
VOCAB, FIRST_CONTINUATION = 1000, 500  # synthetic vocabulary: ids from 500 on continue a word
FAKE_TOKENIZER = types.SimpleNamespace(
    vocab_size=VOCAB, cls_id=CLS, sep_id=SEP, pad_id=PAD, mask_id=MASK, special_ids=[PAD, CLS, SEP, MASK],
    word_start_table=np.arange(VOCAB) < FIRST_CONTINUATION)
NGRAM_P = (1 / np.arange(1, 6)) / np.sum(1 / np.arange(1, 6))  # p(n) = (1/n) / H_5


# ---------------------------------------------------------------- the stream layout


class Stream:
    """Documents of globally unique ids, and the stream the spec asks for, built here independently."""

    def __init__(self, rng, num_docs, sentences_per_doc, sentence_len):
        self.documents, tokens, sentence_ids, next_id, sentence = [], [], [], FIRST_ID, 0
        for doc in range(num_docs):
            sentences = []
            for _ in range(rng.integers(*sentences_per_doc, endpoint=True)):
                length = int(rng.integers(*sentence_len, endpoint=True))
                sentences.append(np.arange(next_id, next_id + length, dtype=np.int32))
                tokens += sentences[-1].tolist()
                sentence_ids += [sentence] * length
                next_id += length
                sentence += 1
            self.documents.append(sentences)
            if doc < num_docs - 1:  # the separator joins the document's last sentence (XLNet's <eod>)
                tokens.append(SEP)
                sentence_ids.append(sentence - 1)
        self.tokens, self.sentence_ids = np.array(tokens), np.array(sentence_ids)

    def rows(self, batch_size, bi_data=True, replicas=1):
        """(tokens, sentence ids) [batch_size, steps]: contiguous rows, and with bi_data each replica's
        share of them followed by the same rows reversed."""
        num_rows = batch_size // 2 if bi_data else batch_size
        steps = len(self.tokens) // num_rows
        rows = [x[:num_rows * steps].reshape(num_rows, steps) for x in (self.tokens, self.sentence_ids)]
        if not bi_data:
            return rows
        shares = [np.split(x, replicas) for x in rows]
        return [np.concatenate([part for share in x for part in (share, share[:, ::-1])]) for x in shares]


@pytest.fixture(scope="module")
def stream():
    return Stream(np.random.default_rng(1), num_docs=300, sentences_per_doc=(1, 30), sentence_len=(2, 15))


@pytest.fixture(scope="module")
def streamed(stream):
    return stream_instances(stream.documents, InstanceContext(64, SPECIALS, np.random.default_rng(2), batch_size=8))


def _parts(token_ids, segment_ids, reuse_len):
    """(reuse, A, B) of one instance, after checking its [SEP] [SEP] [CLS] and segment layout."""
    length = len(token_ids)
    a_end = int(np.sum(segment_ids == 0)) - 1
    np.testing.assert_array_equal(segment_ids, np.repeat([0, 1, 2], [a_end + 1, length - a_end - 2, 1]))
    assert token_ids[a_end] == SEP and token_ids[-2] == SEP and token_ids[-1] == CLS
    assert a_end > reuse_len, "A is empty"
    return token_ids[:reuse_len], token_ids[reuse_len:a_end], token_ids[a_end + 1:-2]


@pytest.mark.parametrize("replicas", [1, 2])
def test_rows_continue_across_batches_and_backward_rows_reverse_forward_rows(stream, streamed, replicas):
    """Instance t * B + r is row r's t-th chunk: its reuse part follows the reuse part of batch t - 1 in
    the stream and A follows the reuse part; rows B/2.. are the forward rows reversed. Shared by two
    replicas, each replica's four rows are two forward rows, then the same two reversed."""
    if replicas > 1:
        streamed = stream_instances(stream.documents, InstanceContext(64, SPECIALS, np.random.default_rng(2),
                                                                      batch_size=8, replicas=replicas))
    rows, _ = stream.rows(8, replicas=replicas)
    steps = rows.shape[1]
    batches = (steps - 64) // 32 + 1
    assert streamed["token_ids"].shape == (batches * 8, 64) and batches > 100
    for key in ("token_ids", "segment_ids", "padding_mask"):
        assert streamed[key].dtype == np.int32 and streamed[key].shape == (batches * 8, 64)
    np.testing.assert_array_equal(streamed["padding_mask"], 1)
    token_ids = streamed["token_ids"].reshape(batches, 8, 64)
    segment_ids = streamed["segment_ids"].reshape(batches, 8, 64)
    for r in range(8):
        reuse = np.concatenate([token_ids[t, r, :32] for t in range(batches)])
        np.testing.assert_array_equal(reuse, rows[r, :32 * batches], err_msg=f"row {r}: reuse parts")
        for t in range(batches):
            _, a, _ = _parts(token_ids[t, r], segment_ids[t, r], 32)
            np.testing.assert_array_equal(a, rows[r, 32 * (t + 1):32 * (t + 1) + len(a)])
    for share in np.split(rows, replicas):
        np.testing.assert_array_equal(share[len(share) // 2:], share[:len(share) // 2, ::-1])
    forward = np.concatenate([share[:len(share) // 2] for share in np.split(rows, replicas)])
    np.testing.assert_array_equal(forward, stream.rows(4, bi_data=False)[0])  # the stream's four rows, in order


def test_b_is_whole_sentences_of_its_row_and_continues_a_half_the_time(stream, streamed):
    """B starts at a sentence start of the same row; with a sentence boundary inside A's budget it
    continues A with probability 1/2 (label 1) and is otherwise a random chunk, which starts at one of
    those boundaries only by chance: at most (budget + longest sentence) / row length of the time."""
    rows, sentences = stream.rows(8)
    steps = rows.shape[1]
    budget = 64 - 32 - 3
    token_ids = streamed["token_ids"].reshape(-1, 8, 64)
    segment_ids = streamed["segment_ids"].reshape(-1, 8, 64)
    continued, choices = 0, 0
    for r in range(8):
        column = np.full(rows.max() + 1, -1)
        real = rows[r] != SEP
        column[rows[r][real]] = np.flatnonzero(real)
        boundaries = np.flatnonzero(np.diff(sentences[r])) + 1
        for t in range(len(token_ids)):
            _, _, b = _parts(token_ids[t, r], segment_ids[t, r], 32)
            first_real = int(np.argmax(b != SEP))
            start = column[b[first_real]] - first_real
            np.testing.assert_array_equal(b, rows[r, start:start + len(b)])
            assert start == 0 or start in boundaries, f"B of row {r}, batch {t} starts inside a sentence"
            begin = 32 * (t + 1)
            cuts = boundaries[(boundaries > begin) & (boundaries < begin + budget)]
            if len(cuts):
                choices += 1
                continued += start in cuts
    assert choices > 1500
    chance = (budget + 15) / steps
    five_sigma = 5 * math.sqrt(0.25 / choices)
    assert 0.5 - five_sigma <= continued / choices <= 0.5 + chance + five_sigma, continued / choices


def test_copies_repeat_the_rows_with_new_b_segments(stream):
    one = stream_instances(stream.documents, InstanceContext(64, SPECIALS, np.random.default_rng(3), batch_size=8))
    two = stream_instances(stream.documents, InstanceContext(64, SPECIALS, np.random.default_rng(3), copies=2,
                                                          batch_size=8))
    n = len(one["token_ids"])
    assert len(two["token_ids"]) == 2 * n
    np.testing.assert_array_equal(two["token_ids"][:n, :32], two["token_ids"][n:, :32])
    assert np.mean(np.any(two["token_ids"][:n] != two["token_ids"][n:], axis=1)) > 0.3
    # The memory starts empty on each row's first chunk of every copy, and nowhere else.
    starts = two["stream_start"].reshape(2, -1, 8)
    assert two["stream_start"].dtype == np.int32
    np.testing.assert_array_equal(starts[:, 0], 1)
    assert not starts[:, 1:].any()


def test_unidirectional_rows_and_odd_batches(stream):
    out = stream_instances(stream.documents, InstanceContext(48, SPECIALS, np.random.default_rng(4), batch_size=3),
                           reuse_len=20, bi_data=False)
    rows, _ = stream.rows(3, bi_data=False)
    token_ids = out["token_ids"].reshape(-1, 3, 48)
    assert len(token_ids) == (rows.shape[1] - 48) // 20 + 1
    for r in range(3):
        np.testing.assert_array_equal(np.concatenate(token_ids[:, r, :20]), rows[r, :20 * len(token_ids)])
    assert np.all(out["segment_ids"][:, 20 + 1] == 0)  # A holds at least one token


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=7), "must be even"),
    (dict(batch_size=6, replicas=2), r"batch per replica \(3\) must be even"),
    (dict(batch_size=6, replicas=4), "batch_size=6 must divide evenly among 4 replicas"),
    (dict(seq_len=4), "seq_len=4 is too small"),
    (dict(reuse_len=0), r"reuse_len=0 must be in \(0, seq_len - 3\)"),
    (dict(reuse_len=61), r"reuse_len=61 must be in \(0, seq_len - 3\) = \(0, 61\)"),
    (dict(batch_size=8, seq_len=512), r"at least 2048\b"),
    (dict(packing="full-sentences"), "packing must be None"),
])
def test_bad_settings_are_refused(kwargs, message):
    documents = [[np.arange(10, 400)], [np.arange(400, 800)]]  # 790 tokens + 1 separator
    settings = {"seq_len": 64, "batch_size": 4, **kwargs}
    options = {name: settings.pop(name) for name in ("reuse_len",) if name in settings}
    with pytest.raises(ConfigError, match=message):
        stream_instances(documents, InstanceContext(specials=SPECIALS, rng=np.random.default_rng(0), **settings),
                         **options)


# ---------------------------------------------------------------- the permutation stage


def _run(masker, batches):
    """Outputs of `masker` (traced once) on each feature dict, concatenated along the batch."""
    call = tf.function(masker)
    outs = [call({key: tf.constant(value) for key, value in batch.items()}) for batch in batches]
    return {key: np.concatenate([out[key].numpy() for out in outs]) for key in outs[0]}


def _features(token_ids):
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": np.ones_like(token_ids)}


def _word_rows(rng, num_rows, length):
    """Rows of two-piece words: a word-start id at even positions, a continuation id at odd ones."""
    rows = np.empty((num_rows, length), np.int32)
    rows[:, 0::2] = rng.integers(FIRST_ID, FIRST_CONTINUATION, size=(num_rows, length // 2))
    rows[:, 1::2] = rng.integers(FIRST_CONTINUATION, VOCAB, size=(num_rows, length // 2))
    return rows


def _bidirectional_batches(forward, batch_size, replicas=1):
    """Batches laid out as stream_instances does: in each replica's share, forward rows, then the same
    rows reversed."""
    half = batch_size // 2 // replicas
    shares = [np.concatenate([forward[i:i + half], forward[i:i + half, ::-1]]) for i in range(0, len(forward), half)]
    return [_features(np.concatenate(shares[i:i + replicas])) for i in range(0, len(shares), replicas)]


def _targets(out):
    """bool [N, L]: the positions target_mapping points at."""
    return out["target_mapping"].sum(axis=1) > 0


def _runs(flags):
    """(starts, ends) of the runs of True in a 1-D array."""
    edges = np.diff(np.concatenate([[0], flags.astype(int), [0]]))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


@pytest.mark.parametrize("unit,replicas", [("word", 1), ("piece", 3)])
def test_first_spans_follow_the_inverse_n_law_and_the_context_rule(unit, replicas):
    """The first span of a half is a clean sample of the span rule.

    Rows of two-piece words (no specials), L = 256, goal 24 (12 per half of
    128): spans place at least 2 pieces per 9 tokens, so the goal is always
    reached by spans (no top-up, no span dropped at the end), and only the
    last span of a half can be cut by the goal. The first span has at most
    5 words = 10 pieces < 12, so it is never cut: its length is n words
    (2n pieces; n pieces for unit="piece") with p(n) = (1/n) / H_5 exactly.
    Its start is the left context, uniform in [0, 6n), moved up to the next
    even position (word start): E[start | n] = (6n - 1) / 2 + 1/2 = 3n.
    Backward rows (the second half of each replica's share of the batch) hold
    reversed rows; read back in reading order they must obey the same law and
    start spans at word starts.
    """
    forward = _word_rows(np.random.default_rng(5), 1500, 256)
    masker = permutation_masker(MaskingContext(FAKE_TOKENIZER, 24, replicas=replicas), ngram_unit=unit)
    out = _run(masker, _bidirectional_batches(forward, 300, replicas))
    targets = _targets(out)
    np.testing.assert_array_equal(out["target_weights"].sum(axis=1), 24)
    backward = np.tile(np.repeat([False, True], 150 // replicas), len(targets) // (300 // replicas))
    lengths, starts = [], []
    for row, is_backward in zip(targets, backward):
        for half in (row[:128], row[128:]):
            reading = half[::-1] if is_backward else half
            assert reading.sum() == 12, "each half holds its share of the goal"
            begin, end = _runs(reading)
            assert np.all(begin % 2 == 0), "a span starts inside a word"
            if unit == "word":
                assert np.all((end[:-1] - begin[:-1]) % 2 == 0), "a span that the goal did not cut ends inside a word"
            lengths.append(end[0] - begin[0])
            starts.append(begin[0])
    lengths, starts = np.array(lengths), np.array(starts)
    n = lengths // 2 if unit == "word" else lengths
    if unit == "word":
        np.testing.assert_array_equal(lengths % 2, 0)
    assert n.min() >= 1 and n.max() <= 5
    frequencies = np.bincount(n, minlength=6)[1:] / len(n)
    five_sigma = 5 * np.sqrt(NGRAM_P * (1 - NGRAM_P) / len(n))
    np.testing.assert_array_less(np.abs(frequencies - NGRAM_P), five_sigma, err_msg=f"{frequencies} vs {NGRAM_P}")
    for k in range(1, 6):
        # start | n: 0 and 6n with probability 1/(6n) each, 2, 4, ..., 6n - 2 with 2/(6n) each.
        values = np.arange(0, 6 * k + 1, 2)
        probs = np.where((values == 0) | (values == 6 * k), 1.0, 2.0) / (6 * k)
        mean, sd = np.dot(values, probs), math.sqrt(np.dot((values - 3 * k) ** 2, probs))
        assert mean == pytest.approx(3 * k)
        observed = starts[n == k]
        assert observed.max() <= 6 * k
        assert abs(observed.mean() - mean) < 5 * sd / math.sqrt(len(observed)), (k, observed.mean())


def test_goal_is_met_by_top_up_and_capped_by_the_selectable_tokens():
    """With a goal larger than spans can reach the top-up fills it; specials never count, so a half
    with fewer selectable tokens than its share gets all of them."""
    rng = np.random.default_rng(6)
    rows = _word_rows(rng, 64, 32)
    rows[:, -3:] = [SEP, SEP, CLS]
    rows[:, 5] = SEP
    context = MaskingContext(FAKE_TOKENIZER, 32)
    dense = _run(permutation_masker(context, partial_k=2), [_features(rows)])  # goal 16: 8 + 8
    np.testing.assert_array_equal(_targets(dense)[:, :16].sum(axis=1), 8)
    np.testing.assert_array_equal(_targets(dense)[:, 16:].sum(axis=1), 8)
    full = _run(permutation_masker(context, partial_k=1), [_features(rows)])  # goal 32: 16 + 16
    np.testing.assert_array_equal(_targets(full)[:, :16].sum(axis=1), 15)  # 16 minus the separator
    np.testing.assert_array_equal(_targets(full)[:, 16:].sum(axis=1), 13)  # 16 minus [SEP] [SEP] [CLS]
    np.testing.assert_array_equal(_targets(full), ~np.isin(rows, [SEP, CLS]))


def test_local_permutations_order_blocks_and_share_one_shuffle():
    """perm_size 16 in halves of 32: the ranks of a half are sigma(k) + 16 m at position 16 m + k, so a
    target of block 1 sees every target of block 0 and not the reverse, and positions k, k' compare as
    k + 16, k' + 16 do. Inside a block the order is uniform: the later of a half's first two block-0
    targets sees the earlier with probability 1/2 (one pair per half keeps the samples independent)."""
    rows = _word_rows(np.random.default_rng(7), 4000, 64)
    out = _run(PermutationMasker(VOCAB, [PAD, CLS, SEP, MASK], FAKE_TOKENIZER.word_start_table, 24, perm_size=16,
                                 partial_k=2.5, bi_data=False),
               [_features(rows[i:i + 500]) for i in range(0, 4000, 500)])
    targets, sees = _targets(out), out["perm_mask"] == 0
    later_sees_earlier, pairs = 0, 0
    for row_targets, row_sees in zip(targets, sees):
        for base in (0, 32):
            t0 = base + np.flatnonzero(row_targets[base:base + 16])
            t1 = base + 16 + np.flatnonzero(row_targets[base + 16:base + 32])
            assert row_sees[np.ix_(t1, t0)].all() and not row_sees[np.ix_(t0, t1)].any()
            shared = t0[row_targets[t0 + 16]]
            np.testing.assert_array_equal(row_sees[np.ix_(shared, shared)], row_sees[np.ix_(shared + 16, shared + 16)])
            if len(t0) >= 2:
                pairs += 1
                later_sees_earlier += row_sees[t0[1], t0[0]]
    assert pairs > 6000
    assert abs(later_sees_earlier / pairs - 0.5) < 5 * math.sqrt(0.25 / pairs)


def _check_factorization_order(perm_mask, targets, functional, reuse_len):
    """Asserts that one row's perm_mask is that of a factorization order, per the XLNet rule.

    Context tokens (neither target nor special) of a half see each other, so
    each half's context is one node; every target and special token is a
    node. Node u must come after node v when u sees v. A topological order
    (Kahn's algorithm) must exist (no cycle), and it must be total: each
    node sees exactly the nodes before it, so it is an order over which
    the mask is the "sees what comes earlier" relation.
    """
    length = len(perm_mask)
    sees = perm_mask == 0
    context = ~targets & ~functional
    second = np.arange(length) >= reuse_len
    np.testing.assert_array_equal(np.diag(sees), ~targets, err_msg="a target sees itself (or another does not)")
    nodes = []
    for half in (False, True):
        members = np.flatnonzero(context & (second == half))
        if len(members):
            block = sees[np.ix_(members, members)]
            assert block.all(), "context tokens of a half do not all see each other"
            assert (sees[members] == sees[members[0]]).all(), "context tokens of a half see different things"
            nodes.append(members)
        nodes += [np.array([i]) for i in np.flatnonzero(~context & (second == half))]
    relation = np.zeros((len(nodes), len(nodes)), bool)  # relation[u, v]: u sees v
    for u, members_u in enumerate(nodes):
        for v, members_v in enumerate(nodes):
            if u != v:
                seen = sees[members_u[0], members_v]
                assert seen.all() or not seen.any(), "a node sees only part of a context"
                relation[u, v] = seen[0]
    remaining, order = relation.sum(axis=1), []
    ready = [u for u in range(len(nodes)) if remaining[u] == 0]
    while ready:
        v = ready.pop()
        order.append(v)
        for u in np.flatnonzero(relation[:, v]):
            remaining[u] -= 1
            if remaining[u] == 0:
                ready.append(u)
    assert len(order) == len(nodes), "the mask has a cycle: no factorization order"
    for position, u in enumerate(order):
        assert set(np.flatnonzero(relation[u])) == set(order[:position]), "the order is not total"
    halves = [bool(second[nodes[u][0]]) for u in order]
    assert halves == sorted(halves), "a node of the rest comes before one of the reuse half"


@pytest.fixture(scope="module")
def tokenizer_and_documents():
    """A unigram SentencePiece model on three plays, and the plays as token ids in documents of 30
    sentences (short documents put separators into the first batches)."""
    sentences = [s for document in read_corpus(default_corpus_paths()[:3]) for s in document]
    tokenizer = train_sentencepiece(sentences, 1000, model_type="unigram")
    ids = tokenizer.tokenize(tf.constant(sentences))
    ids = [ids[i].numpy() for i in range(len(sentences))]
    return tokenizer, [ids[i:i + 30] for i in range(0, len(ids), 30)]


def test_pipeline_on_shakespeare_gives_valid_orders_and_targets(tokenizer_and_documents):
    """Stream instances of a real corpus through make_dataset (unshuffled) and the stage: static shapes,
    inputs untouched, the goal of targets per half, never a special, one-hot target_mapping, and for
    every row a mask that is a factorization order with the halves' rules."""
    tokenizer, documents = tokenizer_and_documents
    specials = {"cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id, "pad_id": tokenizer.pad_id}
    instances = stream_instances(documents, InstanceContext(64, specials, np.random.default_rng(8), batch_size=8))
    masker = permutation_masker(MaskingContext(tokenizer, 12))
    dataset = make_dataset(instances, 8, masker, shuffle=False)
    expected = {"token_ids": ((8, 64), tf.int32), "segment_ids": ((8, 64), tf.int32),
                "padding_mask": ((8, 64), tf.int32), "perm_mask": ((8, 64, 64), tf.float32),
                "target_mapping": ((8, 12, 64), tf.float32), "target_ids": ((8, 12), tf.int32),
                "target_weights": ((8, 12), tf.float32), "stream_start": ((8,), tf.int32)}
    assert {key: (tuple(spec.shape), spec.dtype) for key, spec in dataset.element_spec.items()} == expected
    batches = [{key: value.numpy() for key, value in batch.items()} for batch in dataset.take(40)]
    out = {key: np.concatenate([batch[key] for batch in batches]) for key in expected}
    for key in ("token_ids", "segment_ids", "padding_mask", "stream_start"):
        np.testing.assert_array_equal(out[key], instances[key][:320])
    token_ids, mapping = out["token_ids"], out["target_mapping"]
    special = np.isin(token_ids, tokenizer.special_ids + [tokenizer.cls_id, tokenizer.sep_id])
    assert special[:, :32].any(), "no document separator in a reuse half: the test needs one"
    targets = _targets(out)
    goal = round(64 / 6)
    np.testing.assert_array_equal(targets[:, :32].sum(axis=1), goal - goal // 2)
    np.testing.assert_array_equal(targets[:, 32:].sum(axis=1), goal // 2)
    assert not (targets & special).any(), "a special token is a target"
    np.testing.assert_array_equal(out["target_weights"], np.broadcast_to(np.arange(12) < goal, (320, 12)))
    np.testing.assert_array_equal(mapping.sum(axis=2), out["target_weights"])
    assert set(np.unique(mapping)) == {0.0, 1.0}
    positions = mapping.argmax(axis=2)[:, :goal]
    assert np.all(np.diff(positions, axis=1) > 0), "targets are not in ascending order"
    np.testing.assert_array_equal(out["target_ids"][:, :goal], np.take_along_axis(token_ids, positions, axis=1))
    np.testing.assert_array_equal(out["target_ids"][:, goal:], 0)
    for row in range(len(token_ids)):
        perm = out["perm_mask"][row]
        assert set(np.unique(perm)) <= {0.0, 1.0}
        np.testing.assert_array_equal(perm[:32, 32:], 1, err_msg="the reuse half sees the rest")
        np.testing.assert_array_equal(perm[32:, :32], 0, err_msg="the rest does not see all of the reuse half")
        context = ~targets[row] & ~special[row]
        for start, stop in ((0, 32), (32, 64)):
            np.testing.assert_array_equal(perm[start:, start:stop][:, context[start:stop]], 0,
                                          err_msg="a context token is hidden from a later position")
        _check_factorization_order(perm, targets[row], special[row], 32)


def test_targets_and_orders_are_drawn_anew_at_every_call(tokenizer_and_documents):
    tokenizer, documents = tokenizer_and_documents
    specials = {"cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id, "pad_id": tokenizer.pad_id}
    instances = stream_instances(documents, InstanceContext(128, specials, np.random.default_rng(9), batch_size=16))
    batch = {key: tf.constant(value[:16]) for key, value in instances.items()}
    masker = permutation_masker(MaskingContext(tokenizer, 21))
    first, second = masker(batch), masker(batch)
    assert np.mean(np.any(first["target_mapping"].numpy() != second["target_mapping"].numpy(), axis=(1, 2))) > 0.9
    assert np.mean(np.any(first["perm_mask"].numpy() != second["perm_mask"].numpy(), axis=(1, 2))) > 0.9


@pytest.mark.parametrize("kwargs, message", [
    (dict(perm_size=12), "perm_size=12 must divide reuse_len=32"),
    (dict(reuse_len=64), r"reuse_len=64 must be in \(0, seq_len=64\)"),
    (dict(max_predictions=0), "max_predictions=0 must be a positive integer"),
    (dict(ngram_unit="byte"), "ngram_unit"),
    (dict(mask_alpha=1, mask_beta=2), "mask_alpha=1 must be at least mask_beta=2"),
])
def test_bad_stage_settings_are_refused(kwargs, message):
    args = {"max_predictions": 10, **kwargs}
    with pytest.raises(ConfigError, match=message):
        masker = permutation_masker(MaskingContext(FAKE_TOKENIZER, args.pop("max_predictions")), **args)
        masker(_features(_word_rows(np.random.default_rng(0), 4, 64)))


@pytest.mark.parametrize("rows,replicas,message", [(3, 1, "even batch"), (6, 2, "even batch"),
                                                   (6, 4, "does not divide among 4 replicas")])
def test_bidirectional_batches_must_be_even_per_replica(rows, replicas, message):
    masker = permutation_masker(MaskingContext(FAKE_TOKENIZER, 10, replicas=replicas))
    with pytest.raises(ConfigError, match=message):
        masker(_features(_word_rows(np.random.default_rng(0), rows, 64)))
