"""T5's span corruption as an in-graph tf.data stage: encoder inputs with sentinel-replaced spans, and the
decoder's inputs and targets that write the spans out, each of a fixed length.

The rule is the original's (Raffel et al., `random_spans_noise_mask`): a row of
n real tokens gets round(n * noise_density) noise tokens (at least 1, at most
n - 1) in round(noise / mean_noise_span_length) spans (at least 1), both
rounded in float32, half to even. Noise and non-noise tokens are each split
into that many non-empty spans, every split equally likely, and the spans
alternate, non-noise first. Each noise span becomes one sentinel in the
inputs; the targets hold each noise span after its sentinel. Sentinels count
down from the last id of the vocabulary (the first span's is V - 1), and both
sequences end with EOS:

    tokens   The cat sat on the mat today
    inputs   The <V-1> on the <V-2> today EOS
    targets  <V-1> cat sat <V-2> mat EOS

`span_corruption_lengths` is the original's `random_spans_helper`: the row
length whose inputs fill `inputs_length`, and its targets length. The masker
checks them against the mask's own float32 counts for every shorter row (see
`SpanCorruptionMasker`), so no row's inputs or targets are ever cut.
"""

import dataclasses

import tensorflow as tf

from keras_bertology.data.random_draws import RandomDraws
from keras_bertology.errors import ConfigError


def span_corruption_lengths(inputs_length, noise_density=0.15, mean_noise_span_length=3.0):
    """(tokens per row, targets length) for encoder inputs of `inputs_length` (EOS included): the longest
    row whose inputs still fit, and the length of its targets. The original computes these counts with
    Python floats (unlike the mask's float32), and so does this."""
    def lengths(tokens):
        noise = int(round(tokens * noise_density))
        spans = int(round(noise / mean_noise_span_length))
        return tokens - noise + spans + 1, noise + spans + 1

    tokens = inputs_length - 1
    while lengths(tokens + 1)[0] <= inputs_length:
        tokens += 1
    targets_length = lengths(tokens)[1]
    if noise_density == 0.5 and targets_length > inputs_length:  # the original's: targets no longer than inputs
        return tokens - 1, targets_length - 1
    return tokens, targets_length


def noise_counts(length, noise_density, mean_noise_span_length):
    """(noise tokens, noise spans) of rows of `length` real tokens ([B] int32), in float32 as the original."""
    length = tf.maximum(tf.cast(length, tf.int32), 2)
    noise = tf.cast(tf.round(tf.cast(length, tf.float32) * noise_density), tf.int32)
    noise = tf.minimum(tf.maximum(noise, 1), length - 1)
    spans = tf.maximum(tf.cast(tf.round(tf.cast(noise, tf.float32) / mean_noise_span_length), tf.int32), 1)
    return noise, spans


def _segment_lengths(items, segments, width, draws):
    """[B, width] lengths of a uniformly random split of `items` [B] into `segments` [B] non-empty parts,
    zeros after the last: of the items - 1 gaps, the segments - 1 with the smallest random keys are cuts."""
    gaps = tf.range(width - 1)[None, :]
    keys = tf.where(gaps < items[:, None] - 1, draws.uniform([tf.shape(items)[0], width - 1]), 2.0)
    rank = tf.argsort(tf.argsort(keys, axis=1), axis=1)
    cut = tf.cast(rank < segments[:, None] - 1, tf.int32)
    # An item starts a segment at 0 or after a cut: segment ids 0..segments-1 over the real items.
    segment = tf.cumsum(tf.pad(cut, [[0, 0], [1, 0]]), axis=1)
    real = tf.range(width)[None, :] < items[:, None]
    rows = tf.range(tf.shape(items)[0])[:, None] * width
    return tf.reshape(tf.math.unsorted_segment_sum(tf.cast(real, tf.int32), rows + segment,
                                                   tf.shape(items)[0] * width), [-1, width])


def random_spans_noise_mask(lengths, width, noise_density=0.15, mean_noise_span_length=3.0, seed=None):
    """[B, width] bool noise mask of rows with `lengths` [B] real tokens (False past them)."""
    draws = RandomDraws(seed)
    lengths = tf.cast(lengths, tf.int32)
    noise, spans = noise_counts(lengths, noise_density, mean_noise_span_length)
    padded = tf.maximum(lengths, 2)  # the original's: a row of one token is masked as one of two, then cut
    room = tf.maximum(width, 2)
    noise_spans = _segment_lengths(noise, spans, room, draws)
    kept_spans = _segment_lengths(padded - noise, spans, room, draws)
    # Non-noise, noise, non-noise, ...: where each span starts, then which span each position is in.
    interleaved = tf.reshape(tf.stack([kept_spans, noise_spans], axis=2), [-1, 2 * room])
    starts = tf.cumsum(interleaved, axis=1)[:, :-1]
    rows = tf.shape(lengths)[0]
    inside = starts < room
    row_ids = tf.broadcast_to(tf.range(rows)[:, None], tf.shape(starts))
    indicator = tf.scatter_nd(tf.stack([tf.boolean_mask(row_ids, inside), tf.boolean_mask(starts, inside)], 1),
                              tf.ones(tf.reduce_sum(tf.cast(inside, tf.int32)), tf.int32), [rows, room])
    is_noise = tf.math.floormod(tf.cumsum(indicator, axis=1), 2) == 1
    return is_noise[:, :width] & (tf.range(width)[None, :] < lengths[:, None])


def spans_to_sentinels(token_ids, spans, real, first_sentinel, eos_id, length, pad_id=0):
    """[B, length] rows of `token_ids` whose runs of `spans` (bool) each become one sentinel, counting
    down from `first_sentinel`, then EOS, padded with `pad_id` (positions past `real` dropped)."""
    previous = tf.pad(spans[:, :-1], [[0, 0], [1, 0]])
    first = spans & ~previous
    sentinels = first_sentinel + 1 - tf.cumsum(tf.cast(first, tf.int32), axis=1)
    replaced = tf.where(first, sentinels, token_ids)
    kept = tf.ragged.boolean_mask(replaced, real & ~(spans & previous))
    ended = tf.concat([kept, tf.fill([kept.nrows(), 1], tf.constant(eos_id, tf.int32))], axis=1)
    return ended.to_tensor(default_value=pad_id, shape=[None, length])


@dataclasses.dataclass
class SpanCorruptionConfig:
    """T5's defaults: 15% noise in spans of 3 tokens on average."""

    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0

    def __post_init__(self):
        if not 0.0 < self.noise_density < 1.0:
            raise ConfigError(f"noise_density={self.noise_density} must be in (0, 1).")
        if not self.mean_noise_span_length >= 1.0:
            raise ConfigError(f"mean_noise_span_length={self.mean_noise_span_length} must be at least 1.")


def row_lengths(inputs_length, config=None):
    """(tokens per row, targets length) of span corruption into `inputs_length` inputs: the original
    helper's row length (`span_corruption_lengths`), less where the mask's float32 counts would overflow
    the inputs, and the longest targets any row of at most that many tokens gives."""
    config = config or SpanCorruptionConfig()
    tokens, _ = span_corruption_lengths(inputs_length, config.noise_density, config.mean_noise_span_length)
    inputs, targets = _mask_lengths(tokens, config)
    while tokens > 1 and inputs.max() > inputs_length:
        tokens -= 1
        inputs, targets = _mask_lengths(tokens, config)
    if inputs.max() > inputs_length:
        raise ConfigError(f"inputs_length={inputs_length} holds no span-corrupted row")
    return tokens, int(targets.max())


def _mask_lengths(tokens, config):
    """([tokens + 1], [tokens + 1]) inputs and targets lengths of rows of 0..tokens tokens, as the mask
    counts them (a row of fewer than 2 tokens has no noise; its targets: a sentinel if it has one)."""
    rows = tf.range(tokens + 1)
    noise, spans = (value.numpy() for value in noise_counts(rows, config.noise_density,
                                                              config.mean_noise_span_length))
    rows = rows.numpy()
    short = rows < 2
    inputs = rows + 1 + (spans - noise) * ~short
    targets = (noise + spans + 1) * ~short + (rows + 1) * short
    return inputs, targets


class SpanCorruptionMasker:
    """Maps a batch of token rows to span-corrupted encoder inputs and decoder inputs and targets.

    Input: `token_ids` [B, L] int32 (real tokens first, `pad_id` after; no
    special tokens) and an optional `seed` ([2] integers). Output:
        token_ids             [B, inputs_length]   inputs with sentinels, EOS, padding
        padding_mask          [B, inputs_length]   1 on real inputs
        decoder_token_ids     [B, targets_length]  the targets shifted right after `pad_id` (T5's start)
        decoder_padding_mask  [B, targets_length]  1 on the start token and the real targets before the last
        target_ids            [B, targets_length]  sentinels and their spans, EOS, padding
        target_weights        [B, targets_length]  1.0 on real targets
    Rows are cut to `tokens_length` tokens: the original helper's
    (`span_corruption_lengths`), less where the mask's float32 counts would
    overflow the inputs. The targets length is by default the longest that
    any row of at most `tokens_length` tokens gives; the helper's can be 2
    short (inputs of 172: 190 tokens, whose 28.5 noise tokens round to 29 in
    float32, 28 in the helper), where the original cuts the targets.
    """

    def __init__(self, vocab_size, eos_id, inputs_length, targets_length=None, pad_id=0, config=None):
        self.config = config or SpanCorruptionConfig()
        self.tokens_length, needed = row_lengths(inputs_length, self.config)
        self.targets_length = targets_length or needed
        if self.targets_length < needed:
            raise ConfigError(f"targets_length={self.targets_length} is too short for inputs of {inputs_length}: "
                              f"their targets need {needed}")
        self.inputs_length, self.vocab_size, self.eos_id, self.pad_id = inputs_length, vocab_size, eos_id, pad_id

    def __call__(self, features, seed=None):
        token_ids = tf.cast(features["token_ids"][:, :self.tokens_length], tf.int32)
        real = token_ids != self.pad_id
        noise = random_spans_noise_mask(tf.reduce_sum(tf.cast(real, tf.int32), axis=1), tf.shape(token_ids)[1],
                                        self.config.noise_density, self.config.mean_noise_span_length, seed)
        sentinel = self.vocab_size - 1
        inputs = spans_to_sentinels(token_ids, noise, real, sentinel, self.eos_id, self.inputs_length, self.pad_id)
        targets = spans_to_sentinels(token_ids, ~noise & real, real, sentinel, self.eos_id, self.targets_length,
                                     self.pad_id)
        target_real = targets != self.pad_id
        decoder_ids = tf.pad(targets[:, :-1], [[0, 0], [1, 0]], constant_values=self.pad_id)
        out = {key: value for key, value in features.items() if key != "token_ids"}
        out.update(
            token_ids=inputs, padding_mask=tf.cast(inputs != self.pad_id, tf.int32),
            decoder_token_ids=decoder_ids,
            decoder_padding_mask=tf.cast(tf.pad(target_real[:, :-1], [[0, 0], [1, 0]], constant_values=True),
                                         tf.int32),
            target_ids=targets, target_weights=tf.cast(target_real, tf.float32))
        return out
