"""Whole-word span masking as an in-graph tf.data stage: ALBERT's n-grams and SpanBERT's spans.

The rule (both recipes; only the length distribution and the replacement
decision differ):
1. Words are a word-start piece plus its continuation pieces; every special
   id (CLS, SEP, pad, mask, ...) is a word of its own that is never masked.
2. The token budget is n = min(max_predictions, ceil(mask_rate * s)), s being
   the selectable tokens of the row (as in `data.masking`).
3. Every selectable word is a candidate start, visited in uniformly random
   order. Each candidate draws a length ell in words from `length_probs`
   (ell = 1 + index) and takes the longest run of words from its start, at
   most ell long, that (a) holds no special word, so a span never crosses
   [SEP] or the padding, (b) holds no word already taken, and (c) still fits
   the remaining budget with every piece of every word. A candidate whose
   start is taken, or whose first word alone exceeds the budget, adds nothing.
   Spans are therefore whole words, never overlap and never exceed n tokens. (A batch that marks its
   own units, `masking.UNIT_STARTS`, has spans of whole units.)
4. Each chosen token becomes the mask id (mask_token_rate), a uniformly random
   id (random_token_rate) or stays (the rest): one draw per span for
   SpanBERT (`per_span_decision=True`), one per token for ALBERT.

Differences from the originals, kept because they make spans exact units:
ALBERT (create_pretraining_data.py) shortens an n-gram that exceeds the budget
(as here) but skips one that overlaps a masked word (here it is cut before the
overlap) and lets n-grams cross [SEP]; SpanBERT (fairseq masking.py) may cut
the last span inside a word at the budget and lets spans run into spans
masked earlier.

SpanBERT's span boundary objective needs, per prediction, the external
boundaries of its span: with `boundaries=True` the stage adds `span_left`
(position s - 1), `span_right` (e + 1) and `span_offset` (position - s).
"""

import numpy as np
import tensorflow as tf

from keras_bertology.data.masking import (
    UNIT_STARTS,
    MaskingConfig,
    masked_features,
    replace_chosen,
    token_budget,
    word_tables,
    word_units,
)
from keras_bertology.data.random_draws import RandomDraws
from keras_bertology.errors import ConfigError


def ngram_probs(max_n=3):
    """ALBERT's n-gram lengths: p(n) proportional to 1/n for n = 1..max_n (6/11, 3/11, 2/11 for 3)."""
    weights = 1.0 / np.arange(1, max_n + 1)
    return weights / weights.sum()


def geometric_span_probs(p=0.2, max_length=10):
    """SpanBERT's span lengths: Geometric(p) on 1..max_length, renormalised after the clip.

    For p = 0.2 and max_length = 10 the mean is
    (1 - 11 * 0.8**10 + 10 * 0.8**11) / (0.2 * (1 - 0.8**10)) = 3.79710 words
    (the paper's "mean 3.8").
    """
    lengths = np.arange(1, max_length + 1)
    weights = p * (1 - p) ** (lengths - 1)
    return weights / weights.sum()


def draw_lengths(length_probs, shape, draws):
    """int32 lengths 1..len(length_probs) drawn independently from `length_probs`."""
    logits = tf.math.log(tf.constant(np.asarray(length_probs, np.float32)))[None, :]
    flat = draws.categorical(logits, tf.reduce_prod(shape))
    return tf.reshape(flat, shape) + 1


class SpanMasker:
    """Maps batched features to masked ones by whole-word spans; use in `Dataset.map` after `batch`.

    Input: `token_ids` [B, L] int32 plus any other keys (passed through).
    Output: what `data.masking.DynamicMasker` gives (`token_ids`,
    `padding_mask`, `mask_positions`, `mask_ids`, `mask_weights` with P =
    max_predictions slots) and, with `boundaries`, `span_left`, `span_right`,
    `span_offset` [B, P] int32 (0 in unused slots).

    Args:
        length_probs: probabilities of span lengths 1, 2, ... in words.
        vocab_size, mask_id, pad_id, special_ids: the tokenizer's.
        word_start_table: bool [vocab_size], True where an id starts a word.
        mask_rate, max_predictions, mask_token_rate, random_token_rate: as in
            `data.masking.MaskingConfig`.
        per_span_decision: one mask/random/keep draw per span, not per token.
        boundaries: add the span boundary features.
    """

    def __init__(self, length_probs, vocab_size, mask_id, pad_id, special_ids, word_start_table,
                 mask_rate=0.15, max_predictions=20, mask_token_rate=0.8, random_token_rate=0.1,
                 per_span_decision=False, boundaries=False):
        MaskingConfig(mask_rate, max_predictions, mask_token_rate, random_token_rate)  # validates the rates
        probs = np.asarray(length_probs, np.float64)
        if probs.ndim != 1 or len(probs) < 1 or np.any(probs < 0) or not np.isclose(probs.sum(), 1.0):
            raise ConfigError(f"length_probs must be probabilities of lengths 1, 2, ... (got {length_probs!r})")
        ids = [mask_id, pad_id, *special_ids]
        if any(not 0 <= i < vocab_size for i in ids):
            raise ConfigError(f"mask, pad and special ids {ids} must lie in [0, vocab_size={vocab_size}).")
        self.length_probs = probs
        self.vocab_size, self.mask_id, self.pad_id = vocab_size, mask_id, pad_id
        self.mask_rate, self.max_predictions = mask_rate, max_predictions
        self.mask_token_rate, self.random_token_rate = mask_token_rate, random_token_rate
        self.per_span_decision, self.boundaries = per_span_decision, boundaries
        self._start_table, self._special_table = word_tables(word_start_table, vocab_size, sorted(set(ids)))

    @classmethod
    def for_tokenizer(cls, tokenizer, length_probs, max_predictions, **kwargs):
        """A span masker with `tokenizer`'s vocabulary, special ids and word starts."""
        return cls(length_probs, tokenizer.vocab_size, tokenizer.mask_id, tokenizer.pad_id,
                   tokenizer.special_ids, tokenizer.word_start_table, max_predictions=max_predictions, **kwargs)

    def __call__(self, features, seed=None):
        """Masked features of a batch; `seed` ([2] integers) fixes every draw (a fresh one if None)."""
        draws = RandomDraws(seed)
        token_ids = tf.convert_to_tensor(features["token_ids"], tf.int32)
        word_of_token, word_pieces, word_free = word_units(token_ids, self._start_table, self._special_table,
                                                           features.get(UNIT_STARTS))
        span_of_word = self._choose_spans(word_pieces, word_free, draws)
        span_of_token = tf.gather(span_of_word, word_of_token, batch_dims=1)
        chosen = span_of_token >= 0
        decisions = draws.uniform(tf.shape(token_ids))
        if self.per_span_decision:  # one draw per span, shared by its tokens
            decisions = tf.gather(decisions, tf.maximum(span_of_token, 0), batch_dims=1)
        masked = replace_chosen(token_ids, chosen, decisions, draws, self.vocab_size, self.mask_id,
                                self.mask_token_rate, self.random_token_rate)
        # The budget keeps the chosen tokens within the prediction slots.
        out = {**features, **masked_features(token_ids, masked, chosen, self.pad_id, self.max_predictions)}
        if self.boundaries:
            used = out["mask_weights"] > 0
            out.update(self._boundary_features(span_of_token, chosen, out["mask_positions"], used))
        return out

    def _choose_spans(self, word_pieces, word_free, draws):
        """Span id (the candidate's visit step) of every word [B, W], -1 for words left alone."""
        batch, width = tf.shape(word_pieces)[0], tf.shape(word_pieces)[1]
        budget = token_budget(word_pieces, word_free, self.mask_rate, self.max_predictions)
        keys = tf.where(word_free, draws.uniform(tf.shape(word_pieces)), 2.0)
        order = tf.argsort(keys, axis=1, stable=True)
        candidates = tf.reduce_sum(tf.cast(word_free, tf.int32), axis=1)
        wanted = draw_lengths(self.length_probs, tf.shape(word_pieces), draws)
        padded_pieces = tf.pad(word_pieces, [[0, 0], [0, len(self.length_probs)]])
        padded_free = tf.pad(word_free, [[0, 0], [0, len(self.length_probs)]])
        word_index = tf.range(width)[None, :]

        def visit(step, span_of_word, used):
            start, want = order[:, step], wanted[:, step]
            active = (step < candidates) & (used < budget)
            free = padded_free & tf.pad(span_of_word < 0, [[0, 0], [0, len(self.length_probs)]],
                                        constant_values=False)
            taken_words, taken_pieces, still_growing = tf.zeros_like(start), tf.zeros_like(start), active
            for k in range(len(self.length_probs)):
                word = start + k
                pieces = tf.gather(padded_pieces, word, batch_dims=1)
                grows = (still_growing & (k < want) & tf.gather(free, word, batch_dims=1)
                         & (used + taken_pieces + pieces <= budget))
                taken_words += tf.cast(grows, tf.int32)
                taken_pieces += tf.where(grows, pieces, 0)
                still_growing = grows
            in_span = (word_index >= start[:, None]) & (word_index < (start + taken_words)[:, None])
            return step + 1, tf.where(in_span, step, span_of_word), used + taken_pieces

        def more(step, span_of_word, used):
            return (step < width) & tf.reduce_any((step < candidates) & (used < budget))

        _, span_of_word, _ = tf.while_loop(
            more, visit, (tf.constant(0), -tf.ones([batch, width], tf.int32), tf.zeros([batch], tf.int32)))
        return span_of_word

    def _boundary_features(self, span_of_token, chosen, positions, used):
        """Per prediction: the positions just outside its span, and its offset inside the span."""
        batch, length = tf.shape(span_of_token)[0], tf.shape(span_of_token)[1]
        position = tf.broadcast_to(tf.range(length), [batch, length])
        # Span ids are visit steps < length, so (row, span) pairs index rows * length segments.
        segments = tf.where(chosen, span_of_token + tf.range(batch)[:, None] * length, batch * length)
        first = tf.math.unsorted_segment_min(tf.reshape(position, [-1]), tf.reshape(segments, [-1]),
                                             batch * length + 1)
        last = tf.math.unsorted_segment_max(tf.reshape(position, [-1]), tf.reshape(segments, [-1]),
                                            batch * length + 1)
        span_segments = tf.gather(segments, positions, batch_dims=1)
        start, end = tf.gather(first, span_segments), tf.gather(last, span_segments)
        return {
            "span_left": tf.where(used, start - 1, 0),
            "span_right": tf.where(used, tf.minimum(end + 1, length - 1), 0),
            "span_offset": tf.where(used, positions - start, 0),
        }
