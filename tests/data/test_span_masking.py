"""Whole-word span masking (ALBERT n-grams, SpanBERT geometric spans): exact laws and large-sample statistics.

Tolerances: every frequency is compared within 5 standard errors of its
binomial (or two-sample) sampling error, so a correct stage fails about once in
a million runs per comparison while a wrong distribution (e.g. uniform n
instead of 1/n, or clamping instead of renormalising the geometric) misses by
dozens of standard errors at these sample sizes.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.random_draws import RandomDraws
from keras_bertology.data.span_masking import SpanMasker, draw_lengths, geometric_span_probs, ngram_probs
from keras_bertology.errors import ConfigError

CLS, SEP, MASK, PAD = 1, 2, 3, 0
VOCAB = 5000
FIRST_CONTINUATION = 2500  # ids from here on continue a word
WORD_STARTS = np.arange(VOCAB) < FIRST_CONTINUATION
# Mean of Geometric(0.2) renormalised on 1..10, in closed form: 3.79710 words.
SPAN_MEAN = (1 - 11 * 0.8**10 + 10 * 0.8**11) / (0.2 * (1 - 0.8**10))


def _cdf(probs):
    """What `Generator.choice(len(probs), p=probs)` searches a uniform draw in: `_draw` gives its values
    from the same random stream, without its per-call checks (most of this file's time when it was used)."""
    cdf = np.cumsum(probs)
    return cdf / cdf[-1]


def _draw(cdf, rng):
    return int(cdf.searchsorted(rng.random(), side="right"))


EXTRA_PIECES_CDF = _cdf([0.7, 0.2, 0.1])  # continuation pieces per word: 0, 1 or 2


def _rows(num_rows, seq_len, rng):
    """[CLS] A [SEP] B [SEP] pad..., words of 1-3 pieces, segments of random length."""
    rows = np.full((num_rows, seq_len), PAD, np.int32)
    for row in rows:
        used = rng.integers(seq_len // 2, seq_len + 1)
        cut = rng.integers(3, used - 2)
        tokens = [CLS]
        while len(tokens) < used - 1:
            if len(tokens) == cut:
                tokens.append(SEP)
            tokens.append(int(rng.integers(10, FIRST_CONTINUATION)))
            tokens.extend(int(rng.integers(FIRST_CONTINUATION, VOCAB)) for _ in range(_draw(EXTRA_PIECES_CDF, rng)))
        tokens = tokens[:used - 1] + [SEP]
        row[:used] = tokens
    return rows


def _masker(probs, **kwargs):
    return SpanMasker(probs, VOCAB, MASK, PAD, [CLS, SEP], WORD_STARTS, boundaries=True, **kwargs)


def _mask(masker, rows, batch=256):
    outs = [masker({"token_ids": tf.constant(rows[i:i + batch])}) for i in range(0, len(rows), batch)]
    return {key: np.concatenate([out[key].numpy() for out in outs]) for key in outs[0]}


def _word_starts(row):
    special = np.isin(row, [CLS, SEP, PAD, MASK])
    after_special = np.concatenate([[True], special[:-1]])
    return WORD_STARTS[row] | special | after_special


def _spans(rows, out):
    """Per span: (row, first position, last position, words), read from the boundary features."""
    spans = set()
    for r in range(len(rows)):
        for slot in np.flatnonzero(out["mask_weights"][r]):
            spans.add((r, out["span_left"][r, slot] + 1, out["span_right"][r, slot] - 1))
    starts = [_word_starts(row) for row in rows]
    return [(r, first, last, int(starts[r][first:last + 1].sum())) for r, first, last in sorted(spans)]


def _reference_spans(rows, probs, rng, mask_rate=0.15, max_predictions=20):
    """The documented placement rule, one row and one candidate at a time (an independent implementation)."""
    lengths, cdf = [], _cdf(probs)
    for row in rows:
        starts = np.flatnonzero(_word_starts(row))
        pieces = np.diff(np.append(starts, len(row)))
        free = ~np.isin(row[starts], [CLS, SEP, PAD, MASK])
        budget = min(max_predictions, math.ceil(round(mask_rate * pieces[free].sum(), 6)))
        used = 0
        for start in rng.permutation(np.flatnonzero(free)):
            want = _draw(cdf, rng) + 1
            words = 0
            while (words < want and start + words < len(starts) and free[start + words]
                   and used + pieces[start + words] <= budget):
                used += pieces[start + words]
                free[start + words] = False
                words += 1
            if words:
                lengths.append(words)
    return np.array(lengths)


def test_length_laws_are_exact():
    np.testing.assert_allclose(ngram_probs(3), [6 / 11, 3 / 11, 2 / 11])
    probs = geometric_span_probs(0.2, 10)
    raw = [0.2 * 0.8 ** (n - 1) for n in range(1, 11)]
    np.testing.assert_allclose(probs, np.array(raw) / sum(raw))
    assert np.dot(np.arange(1, 11), probs) == pytest.approx(SPAN_MEAN, abs=1e-6)


@pytest.mark.parametrize("probs", [ngram_probs(3), geometric_span_probs()], ids=["ngram", "geometric"])
def test_drawn_lengths_follow_the_law(probs):
    draws = 400_000
    lengths = draw_lengths(probs, [draws], RandomDraws()).numpy()
    assert lengths.min() == 1 and lengths.max() <= len(probs)
    frequencies = np.bincount(lengths, minlength=len(probs) + 1)[1:] / draws
    np.testing.assert_array_less(np.abs(frequencies - probs), 5 * np.sqrt(probs * (1 - probs) / draws) + 1e-12)
    mean, expected = lengths.mean(), np.dot(np.arange(1, len(probs) + 1), probs)
    spread = np.sqrt(np.dot((np.arange(1, len(probs) + 1) - expected) ** 2, probs) / draws)
    assert abs(mean - expected) < 5 * spread
    if len(probs) == 10:
        assert abs(mean - SPAN_MEAN) < 5 * spread  # about 0.013 words for 400k draws


@pytest.mark.parametrize("probs", [ngram_probs(3), geometric_span_probs()], ids=["ngram", "geometric"])
def test_spans_are_whole_words_within_budget_and_never_overlap(probs):
    rng = np.random.default_rng(1)
    rows = _rows(2000, 128, rng)
    out = _mask(_masker(probs), rows)
    chosen = np.zeros_like(rows, bool)
    np.put_along_axis(chosen, out["mask_positions"], out["mask_weights"] > 0, axis=1)
    counts = chosen.sum(axis=1)
    np.testing.assert_array_equal(counts, out["mask_weights"].sum(axis=1))
    assert not np.isin(rows[chosen], [CLS, SEP, PAD]).any()
    for r, row in enumerate(rows):
        starts = _word_starts(row)
        word = np.cumsum(starts) - 1
        for w in np.unique(word[chosen[r]]):
            assert chosen[r][word == w].all(), f"row {r}: word {w} is split"
        selectable = int((~np.isin(row, [CLS, SEP, PAD])).sum())
        assert counts[r] <= min(20, math.ceil(round(0.15 * selectable, 6)))
        np.testing.assert_array_equal(out["mask_ids"][r, :counts[r]], row[out["mask_positions"][r, :counts[r]]])
    spans = _spans(rows, out)
    covered = np.zeros_like(rows, int)
    for r, first, last, words in spans:
        covered[r, first:last + 1] += 1
        assert 1 <= words <= len(probs)
        assert not chosen[r, first - 1] or covered[r, first - 1], "span starts inside another span"
    np.testing.assert_array_equal(covered > 0, chosen)
    assert covered.max() == 1, "spans overlap"
    for r in range(len(rows)):
        used = out["mask_weights"][r] > 0
        offsets = out["mask_positions"][r, used] - out["span_left"][r, used] - 1
        np.testing.assert_array_equal(out["span_offset"][r, used], offsets)


@pytest.mark.parametrize("probs", [ngram_probs(3), geometric_span_probs()], ids=["ngram", "geometric"])
def test_placed_span_lengths_match_the_reference_rule(probs):
    """The vectorized stage and a one-candidate-at-a-time reference agree on the law of placed spans.

    The placed lengths are shorter than the drawn ones (the budget and the
    segment ends cut spans), so the comparison is against the rule, not the law.
    """
    rng = np.random.default_rng(2)
    rows = _rows(3000, 128, rng)
    ours = np.array([words for *_, words in _spans(rows, _mask(_masker(probs), rows))])
    reference = _reference_spans(rows, probs, np.random.default_rng(3))
    for length in range(1, len(probs) + 1):
        p1, p2 = np.mean(ours == length), np.mean(reference == length)
        pooled = (np.sum(ours == length) + np.sum(reference == length)) / (len(ours) + len(reference))
        error = math.sqrt(pooled * (1 - pooled) * (1 / len(ours) + 1 / len(reference))) + 1e-12
        assert abs(p1 - p2) < 5 * error, f"length {length}: {p1:.4f} vs reference {p2:.4f}"
    assert abs(len(ours) - len(reference)) < 5 * math.sqrt(len(reference)), "spans per row differ"


def _fates(rows, out):
    """Per chosen token: 0 masked, 1 kept, 2 replaced by another id."""
    used = out["mask_weights"] > 0
    now = np.take_along_axis(out["token_ids"], out["mask_positions"], axis=1)
    original = out["mask_ids"]
    fate = np.where(now == MASK, 0, np.where(now == original, 1, 2))
    return fate, used


def test_spanbert_draws_one_decision_per_span():
    rng = np.random.default_rng(4)
    rows = _rows(3000, 128, rng)
    out = _mask(_masker(geometric_span_probs(), per_span_decision=True), rows)
    fate, used = _fates(rows, out)
    span_fates, randomized = [], []
    for r in range(len(rows)):
        keys = out["span_left"][r, used[r]]
        for key in np.unique(keys):
            members = fate[r, used[r]][keys == key]
            # A random id may equal the original or the mask id (2 in 5000): only randomized spans mix.
            assert set(members) in ({0}, {1}) or 2 in members, f"row {r}: one span, several fates"
            span_fates.append(2 if 2 in members else members[0])
            if 2 in members:
                randomized.extend(members)
    span_fates = np.array(span_fates)
    assert np.sum(np.array(randomized) != 2) <= 2 / VOCAB * len(randomized) + 5 * math.sqrt(2 / VOCAB * len(randomized))
    for value, rate in [(0, 0.8), (2, 0.1)]:
        observed = np.mean(span_fates == value)
        assert abs(observed - rate) < 5 * math.sqrt(rate * (1 - rate) / len(span_fates)), (value, observed)


def test_albert_draws_one_decision_per_token():
    rng = np.random.default_rng(5)
    rows = _rows(3000, 128, rng)
    out = _mask(_masker(ngram_probs(3)), rows)
    fate, used = _fates(rows, out)
    fate = fate[used]
    for value, rate in [(0, 0.8), (1, 0.1 + 0.1 / VOCAB), (2, 0.1 - 0.1 / VOCAB)]:
        observed = np.mean(fate == value)
        assert abs(observed - rate) < 5 * math.sqrt(rate * (1 - rate) / len(fate)), (value, observed)
    # Spans of several tokens mix fates under a per-token draw.
    mixed = sum(len(set(fate_row)) > 1 for fate_row in np.split(fate, np.cumsum(used.sum(1))[:-1]))
    assert mixed > 100


def test_unmasked_features_pass_through_and_shapes_are_fixed():
    rows = _rows(8, 64, np.random.default_rng(6))
    out = _masker(ngram_probs(), max_predictions=12)({"token_ids": tf.constant(rows), "sop_labels": tf.ones(8)})
    assert out["sop_labels"].shape == (8,)
    for key in ("mask_positions", "mask_ids", "mask_weights", "span_left", "span_right", "span_offset"):
        assert out[key].shape == (8, 12)
    np.testing.assert_array_equal(out["padding_mask"].numpy(), rows != PAD)


@pytest.mark.parametrize("bad", [[0.5, 0.4], [-0.1, 1.1], []])
def test_bad_length_laws_are_refused(bad):
    with pytest.raises(ConfigError, match="length_probs"):
        _masker(bad)
