"""T5's span corruption: the counts of a NumPy port of the original rule, the law of its spans (every split
equally likely), sentinels counting down from the end of the vocabulary, and inputs and targets that give
back the original text exactly.

Sample sizes: 4,000 rows of 100 tokens (20,000 noise spans) for the span-length law, 20,000 rows of 40
tokens for the per-position rate; each bin is held within 4.5 standard errors of the exact probability
(with 11-40 bins per test, a false alarm about once in 10,000 runs)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.data.span_corruption import (
    SpanCorruptionConfig,
    SpanCorruptionMasker,
    random_spans_noise_mask,
    span_corruption_lengths,
)
from keras_bertology.errors import ConfigError

VOCAB, EOS, PAD = 500, 1, 0


def reference_counts(length, noise_density=0.15, mean_noise_span_length=3.0):
    """The original's (noise tokens, noise spans), ported to NumPy: float32, rounded half to even."""
    length = max(length, 2)
    noise = int(np.round(np.float32(length) * np.float32(noise_density)))
    noise = min(max(noise, 1), length - 1)
    return noise, max(int(np.round(np.float32(noise) / np.float32(mean_noise_span_length))), 1)


def _spans(row):
    """(start, length) of each run of True in a bool row."""
    edges = np.flatnonzero(np.diff(np.r_[0, row.astype(np.int8), 0]))
    return list(zip(edges[::2], edges[1::2] - edges[::2]))


def _within(observed, expected, samples, name):
    standard_errors = np.sqrt(np.clip(expected * (1 - expected), 0, None) / samples)
    worst = np.max(np.abs(observed - expected) / np.maximum(standard_errors, 1e-9))
    assert worst < 4.5, f"{name}: {worst:.1f} standard errors off"


def test_lengths_are_the_originals_helpers():
    assert span_corruption_lengths(512) == (568, 114)  # T5's pretraining lengths
    assert span_corruption_lengths(64) == (70, 14)
    # At density 0.5 the original takes one token less so that the targets are no longer than the inputs.
    assert span_corruption_lengths(128, noise_density=0.5, mean_noise_span_length=1.0) == (126, 128)


def test_every_length_gets_the_originals_counts_and_spans_that_alternate_from_non_noise():
    lengths = np.arange(0, 400)
    mask = random_spans_noise_mask(tf.constant(lengths), 400, seed=[0, 1]).numpy()
    for length, row in zip(lengths, mask):
        assert not row[length:].any()
        if length < 2:
            assert not row.any()  # one token is masked as one of two, then cut: never noise
            continue
        noise, spans = reference_counts(int(length))
        found = _spans(row[:length])
        assert (row.sum(), len(found)) == (noise, spans), length
        assert found[0][0] > 0 and found[-1][0] + found[-1][1] == length  # non-noise first, noise last


def test_noise_span_lengths_follow_the_law_of_a_uniform_split():
    mask = random_spans_noise_mask(tf.fill([4000], 100), 100, seed=[2, 3]).numpy()
    lengths = np.array([length for row in mask for _, length in _spans(row)])
    noise, spans = reference_counts(100)  # 15 noise tokens in 5 spans
    assert len(lengths) == 4000 * spans
    # A uniformly random split of n items into k non-empty parts: P(a part has l) = C(n-l-1, k-2) / C(n-1, k-1).
    support = np.arange(1, noise - spans + 2)
    law = np.array([math.comb(noise - l - 1, spans - 2) for l in support]) / math.comb(noise - 1, spans - 1)
    observed = np.array([(lengths == l).mean() for l in support])
    _within(observed, law, len(lengths), "span lengths")
    assert lengths.mean() == pytest.approx(noise / spans)  # the spans of a row always add up to its noise


def test_each_position_is_noise_as_often_as_under_every_equally_likely_mask():
    # 40 tokens: 6 noise tokens in 2 spans; the 33 x 5 ways to split both kinds are equally likely.
    mask = random_spans_noise_mask(tf.fill([20000], 40), 40, seed=[4, 5]).numpy()
    exact = np.zeros(40)
    for first_kept in range(1, 34):
        for first_noise in range(1, 6):
            row = np.zeros(40)
            row[first_kept:first_kept + first_noise] = 1
            row[40 - (6 - first_noise):] = 1
            exact += row / (33 * 5)
    _within(mask.mean(axis=0), exact, len(mask), "per-position noise rate")


def test_inputs_and_targets_give_back_the_text_with_sentinels_counting_down():
    masker = SpanCorruptionMasker(VOCAB, EOS, inputs_length=64)
    rng = np.random.default_rng(0)
    rows = rng.integers(2, VOCAB - 100, (300, masker.tokens_length)).astype("int32")
    lengths = rng.integers(0, masker.tokens_length + 1, 300)
    rows[np.arange(masker.tokens_length)[None, :] >= lengths[:, None]] = PAD
    out = {key: value.numpy() for key, value in masker({"token_ids": rows}, seed=[6, 7]).items()}
    assert out["token_ids"].shape == (300, 64) and out["target_ids"].shape == (300, masker.targets_length)
    for index, length in enumerate(lengths):
        inputs = out["token_ids"][index][out["padding_mask"][index] == 1]
        targets = out["target_ids"][index][out["target_weights"][index] == 1]
        assert inputs[-1] == targets[-1] == EOS and EOS not in inputs[:-1] and EOS not in targets[:-1]
        sentinels = inputs[inputs >= VOCAB - 100]
        np.testing.assert_array_equal(sentinels, VOCAB - 1 - np.arange(len(sentinels)))
        # From 2 tokens on the last is noise, so the targets' sentinels are the inputs'; a row of one token has
        # no noise, and its targets one sentinel for the non-noise span (as the original's).
        expected = sentinels if length >= 2 else [VOCAB - 1] * int(length)
        np.testing.assert_array_equal(targets[targets >= VOCAB - 100], expected)
        # Each sentinel of the inputs stands for what follows it in the targets, up to the next sentinel.
        pieces = np.split(targets[:-1], np.flatnonzero(targets[:-1] >= VOCAB - 100))[1:]
        spans = {piece[0]: piece[1:] for piece in pieces}
        rebuilt = np.concatenate([spans[token] if token in spans else [token] for token in inputs[:-1]] or [[]])
        np.testing.assert_array_equal(rebuilt, rows[index][:length])
        if length >= 2:
            assert len(sentinels) == reference_counts(int(length))[1]
    # Teacher forcing: the decoder reads the targets shifted right after the start token (the pad id).
    np.testing.assert_array_equal(out["decoder_token_ids"][:, 1:], out["target_ids"][:, :-1])
    assert (out["decoder_token_ids"][:, 0] == PAD).all() and (out["decoder_padding_mask"][:, 0] == 1).all()
    np.testing.assert_array_equal(out["decoder_padding_mask"][:, 1:], out["target_weights"][:, :-1])


def test_a_seed_fixes_the_corruption():
    masker = SpanCorruptionMasker(VOCAB, EOS, inputs_length=32)
    rows = np.random.default_rng(1).integers(2, 300, (64, masker.tokens_length)).astype("int32")
    first, again, other = (masker({"token_ids": rows}, seed=seed)["token_ids"].numpy()
                           for seed in ([8, 9], [8, 9], [8, 10]))
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()


@pytest.mark.parametrize("options, words", [
    ({"noise_density": 0.0}, "noise_density"),
    ({"noise_density": 1.0}, "noise_density"),
    ({"mean_noise_span_length": 0.5}, "mean_noise_span_length"),
])
def test_bad_rates_are_refused(options, words):
    with pytest.raises(ConfigError, match=words):
        SpanCorruptionConfig(**options)


def test_targets_too_short_for_the_inputs_are_refused():
    with pytest.raises(ConfigError, match="targets_length=100 is too short"):
        SpanCorruptionMasker(VOCAB, EOS, inputs_length=512, targets_length=100)


@pytest.mark.parametrize("inputs_length", [8, 64, 172, 316, 512])
def test_no_row_length_overflows_the_inputs_or_targets(inputs_length):
    """Every row length up to the masker's gives inputs and targets that fit, EOS included: at 172 the
    original's helper (Python floats) allows 38 targets where the mask's float32 counts need 40."""
    masker = SpanCorruptionMasker(VOCAB, EOS, inputs_length=inputs_length)
    lengths = np.arange(masker.tokens_length + 1)
    rows = np.where(np.arange(masker.tokens_length)[None, :] < lengths[:, None], 7, PAD).astype("int32")
    out = {key: value.numpy() for key, value in masker({"token_ids": rows}, seed=[1, 1]).items()}
    real_inputs, real_targets = out["padding_mask"].sum(axis=1), out["target_weights"].sum(axis=1).astype(int)
    assert (out["token_ids"][np.arange(len(rows)), real_inputs - 1] == EOS).all()
    assert (out["target_ids"][np.arange(len(rows)), real_targets - 1] == EOS).all()
    assert real_targets.max() == masker.targets_length
    if inputs_length == 172:
        assert span_corruption_lengths(172) == (190, 38) and masker.targets_length == 40
