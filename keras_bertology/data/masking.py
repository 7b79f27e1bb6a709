"""Masked-LM masking as an in-graph tf.data stage with fixed output shapes.

How many tokens a sequence gets masked (what this module implements):
    n = min(max_predictions, ceil(mask_rate * s))
where s counts the selectable tokens (every id not in special_ids, pad or mask);
the n positions are drawn uniformly without replacement, then each one
independently becomes the mask id (mask_token_rate), a uniformly random id from
the whole vocabulary (random_token_rate) or stays unchanged (the rest). This is
tensorflow_text's RandomItemSelector rule. For comparison:
- BERT (create_pretraining_data): min(max_predictions, max(1, round(mask_rate *
  len))) where len also counts [CLS] and the [SEP]s; the random id may be any
  vocabulary entry, as here.
- RoBERTa (fairseq MaskTokensDataset): int(mask_rate * len + U[0, 1)) over the
  whole sequence including <s> and </s>, with no cap, and random ids drawn from
  non-special entries only. Set max_predictions >= ceil(mask_rate * seq_len) to
  get fairseq's uncapped behaviour.
With `selection_weights` (a weight per vocabulary id) the n positions are
drawn without replacement with probability proportional to their weight
instead (successive draws, as torch.multinomial: each unit's key is an
exponential variable divided by its weight, and the n smallest keys win; a
whole word weighs as its heaviest piece). Whole-word masking uses the same
token budget n: words (a word-start piece plus its continuation pieces) are
taken in random order while their pieces still fit in n, so a selected word
is always masked completely and the count may fall short of n by less than
one word. A batch may carry its own unit boundaries (`UNIT_STARTS`, phrases
or entities marked per instance): its units are then masked whole in place
of words, by the same rule, and 80/10/10 is drawn once per unit.

Every random number of one call comes from its `seed` (see `data.random_draws`):
the input pipeline seeds batch k with (run seed, k), so mapped after
`Dataset.repeat()` each pass over the data is masked anew (RoBERTa's dynamic
masking), and a resumed run masks its batches as the uninterrupted run did.
"""

import dataclasses
import numbers

import numpy as np
import tensorflow as tf

from keras_bertology.data.random_draws import RandomDraws
from keras_bertology.errors import ConfigError

# The selectors compute ceil(s * rate) in float32, where 100 * 0.15 comes out
# just above 15 and would round up to 16; shrinking the rate by one part in a
# million makes the count exact for rates with a few decimals.
_FLOAT32_SLACK = 1.0 - 1e-6
# An instance's own unit boundaries ([B, L] bool, True where a unit starts), read in place of the
# vocabulary's word starts: a phrase or an entity is masked whole, as a word is.
UNIT_STARTS = "unit_starts"


@dataclasses.dataclass
class MaskingConfig:
    """Masked-LM rates; defaults are BERT's (15%, at most 20 predictions, 80/10/10)."""

    mask_rate: float = 0.15
    max_predictions: int = 20
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    whole_word: bool = False

    def __post_init__(self):
        if not 0.0 < self.mask_rate <= 1.0:
            raise ConfigError(f"mask_rate={self.mask_rate} must be in (0, 1].")
        count = self.max_predictions
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise ConfigError(f"max_predictions={count!r} must be a positive integer.")
        for name in ("mask_token_rate", "random_token_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name}={getattr(self, name)} must be between 0 and 1.")
        if self.mask_token_rate + self.random_token_rate > 1.0:
            raise ConfigError(
                f"mask_token_rate + random_token_rate = {self.mask_token_rate + self.random_token_rate} "
                "must not exceed 1 (the rest is the share left unchanged)."
            )


class DynamicMasker:
    """Maps a batched feature dict to a masked one; use it in `Dataset.map` after `batch`.

    Input: `token_ids` [B, L] int32 plus any other keys (passed through), and
    optionally the batch's `seed` ([2] integers; a fresh one per call if None).
    Output adds or replaces:
        token_ids       [B, L] int32    masked ids
        padding_mask    [B, L] bool     original token_ids != pad_id
        mask_positions  [B, P] int32    ascending positions, 0 where unused
        mask_ids        [B, P] int32    original ids at mask_positions, 0 where unused
        mask_weights    [B, P] float32  1.0 for a real prediction, 0.0 for filler
    with P = config.max_predictions.
    """

    def __init__(
        self,
        config: MaskingConfig,
        vocab_size: int,
        mask_id: int,
        pad_id: int,
        special_ids: list[int],
        word_start_table: np.ndarray | None = None,
        selection_weights: np.ndarray | None = None,
    ):
        ids = [mask_id, pad_id, *special_ids]
        if vocab_size < 1 or any(not 0 <= i < vocab_size for i in ids):
            raise ConfigError(f"mask, pad and special ids {ids} must lie in [0, vocab_size={vocab_size}).")
        self.config = config
        self.vocab_size, self.mask_id, self.pad_id = vocab_size, mask_id, pad_id
        if not config.whole_word:  # every token is a word of its own
            word_start_table = np.ones(vocab_size, np.bool_)
        self._start_table, self._special_table = word_tables(word_start_table, vocab_size, sorted(set(ids)))
        self._weights = None
        if selection_weights is not None:
            weights = np.asarray(selection_weights, np.float32)
            if weights.shape != (vocab_size,) or not np.all(np.isfinite(weights)) or np.any(weights <= 0):
                raise ConfigError(f"selection_weights must be {vocab_size} positive finite numbers, one per "
                                  f"vocabulary id (got shape {weights.shape})")
            self._weights = tf.constant(weights)

    def __call__(self, features: dict[str, tf.Tensor], seed=None) -> dict[str, tf.Tensor]:
        draws = RandomDraws(seed)
        token_ids = tf.convert_to_tensor(features["token_ids"], tf.int32)
        word_of_token, word_pieces, word_free = word_units(token_ids, self._start_table, self._special_table,
                                                           features.get(UNIT_STARTS))
        budget = token_budget(word_pieces, word_free, self.config.mask_rate, self.config.max_predictions)
        keys = self._selection_keys(token_ids, word_of_token, word_free, draws.uniform(tf.shape(word_pieces)))
        order = tf.argsort(keys, axis=1, stable=True)
        # Words in random order while the running total of their pieces fits the budget.
        taken_in_order = tf.cumsum(tf.gather(word_pieces, order, batch_dims=1), axis=1) <= budget[:, None]
        taken_in_order &= tf.gather(word_free, order, batch_dims=1)
        taken = tf.gather(taken_in_order, tf.argsort(order, axis=1), batch_dims=1)
        chosen = tf.gather(taken, word_of_token, batch_dims=1)
        decisions = draws.uniform(tf.shape(token_ids))
        if UNIT_STARTS in features:  # one draw per unit (a phrase is masked, replaced or kept whole)
            decisions = tf.gather(decisions, word_of_token, batch_dims=1)
        masked = replace_chosen(token_ids, chosen, decisions, draws, self.vocab_size, self.mask_id,
                                self.config.mask_token_rate, self.config.random_token_rate)
        return {**features, **masked_features(token_ids, masked, chosen, self.pad_id, self.config.max_predictions)}

    def _selection_keys(self, token_ids, word_of_token, word_free, uniform):
        """[B, L] per word: taken in ascending order. Uniform draws, or with weights exponential ones
        divided by the word's weight (its heaviest piece's); words that cannot be taken sort last."""
        if self._weights is None:
            return tf.where(word_free, uniform, 2.0)
        batch, length = tf.shape(token_ids)[0], tf.shape(token_ids)[1]
        segments = tf.reshape(word_of_token + tf.range(batch)[:, None] * length, [-1])
        weights = tf.reshape(tf.math.unsorted_segment_max(
            tf.reshape(tf.gather(self._weights, token_ids), [-1]), segments, batch * length), [batch, length])
        race = -tf.math.log(uniform) / tf.where(word_free, weights, 1.0)
        return tf.where(word_free, race, float("inf"))


def word_units(token_ids, start_table, special_table, unit_starts=None):
    """Word index of each token [B, L], pieces per word [B, L] and selectable words [B, L].

    Word w of a row is the w-th word start and its continuation pieces; rows
    have fewer than L words, the rest having 0 pieces. A word holding a
    special id is not selectable. `unit_starts` ([B, L] bool, where an instance
    marks its own units: phrases, entities) replaces the vocabulary's starts.
    """
    starts, is_special = word_starts(token_ids, start_table, special_table, unit_starts)
    word_of_token = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
    batch, length = tf.shape(token_ids)[0], tf.shape(token_ids)[1]
    segments = tf.reshape(word_of_token + tf.range(batch)[:, None] * length, [-1])
    word_pieces = tf.reshape(tf.math.unsorted_segment_sum(
        tf.ones_like(segments), segments, batch * length), [batch, length])
    has_special = tf.reshape(tf.math.unsorted_segment_max(
        tf.reshape(tf.cast(is_special, tf.int32), [-1]), segments, batch * length), [batch, length])
    return word_of_token, word_pieces, (word_pieces > 0) & (has_special <= 0)


def token_budget(word_pieces, word_free, mask_rate, max_predictions):
    """[B] tokens to mask: min(max_predictions, ceil(mask_rate * selectable tokens))."""
    selectable_tokens = tf.reduce_sum(tf.where(word_free, word_pieces, 0), axis=1)
    budget = tf.math.ceil(tf.cast(selectable_tokens, tf.float32) * (mask_rate * _FLOAT32_SLACK))
    return tf.minimum(tf.cast(budget, tf.int32), max_predictions)


def replace_chosen(token_ids, chosen, decisions, draws, vocab_size, mask_id, mask_token_rate, random_token_rate):
    """Chosen tokens become the mask id, a uniformly random id or stay, by `decisions` in [0, 1)."""
    random_ids = draws.uniform(tf.shape(token_ids), 0, vocab_size, tf.int32)
    replaced = tf.where(decisions < mask_token_rate, mask_id,
                        tf.where(decisions < mask_token_rate + random_token_rate, random_ids, token_ids))
    return tf.where(chosen, replaced, token_ids)


def masked_features(token_ids, masked_ids, chosen, pad_id, max_predictions):
    """The masked-LM features of a batch whose `chosen` tokens [B, L] (at most max_predictions a row)
    were replaced by `masked_ids`."""
    everywhere = tf.broadcast_to(tf.range(tf.shape(token_ids)[1]), tf.shape(token_ids))
    slots = [token_ids.shape[0], max_predictions]
    positions = tf.ragged.boolean_mask(everywhere, chosen).to_tensor(0, shape=slots)
    used = tf.sequence_mask(tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1), max_predictions)
    return {
        "token_ids": masked_ids,
        "padding_mask": tf.not_equal(token_ids, pad_id),
        "mask_positions": positions,
        "mask_ids": tf.where(used, tf.gather(token_ids, positions, batch_dims=1), 0),
        "mask_weights": tf.cast(used, tf.float32),
    }


def token_masker(context, selection_weights=None, **rates):
    """BERT's masking stage for the `context`'s tokenizer (a `builder_contexts.MaskingContext`): 15% of tokens
    (or whole words), 80/10/10 unless `rates` (MaskingConfig's mask_token_rate, random_token_rate, ...) say
    otherwise; chosen uniformly, or in proportion to `selection_weights` (one per vocabulary id)."""
    tokenizer = context.tokenizer
    return DynamicMasker(
        MaskingConfig(max_predictions=context.max_predictions, whole_word=context.whole_word, **rates),
        vocab_size=tokenizer.vocab_size,
        mask_id=tokenizer.mask_id,
        pad_id=tokenizer.pad_id,
        special_ids=tokenizer.special_ids,
        word_start_table=tokenizer.word_start_table,
        selection_weights=selection_weights,
    )


def word_starts(token_ids, start_table, special_table, unit_starts=None):
    """(token starts a word, token is special) [B, L]: specials and the token after one start words; the
    others by the vocabulary's `start_table`, or by the instance's own `unit_starts`."""
    is_special = tf.gather(special_table, token_ids)
    after_special = tf.pad(is_special[:, :-1], [[0, 0], [1, 0]], constant_values=True)
    own = tf.gather(start_table, token_ids) if unit_starts is None else tf.cast(unit_starts, tf.bool) | is_special
    return own | after_special, is_special


def word_tables(word_start_table, vocab_size: int, special_ids: list[int]):
    """Lookup tables: id starts a word (specials always do), and id is special."""
    if word_start_table is None:
        raise ConfigError("whole_word masking needs a word_start_table (bool per vocabulary id).")
    table = np.asarray(word_start_table)
    if table.shape != (vocab_size,) or table.dtype != np.bool_:
        raise ConfigError(
            f"word_start_table must be a bool array of shape ({vocab_size},), got {table.dtype} {table.shape}."
        )
    special = np.zeros(vocab_size, np.bool_)
    special[special_ids] = True
    return tf.constant(table | special), tf.constant(special)
