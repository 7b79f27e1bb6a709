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
Whole-word masking uses the same token budget n: words (a word-start piece
plus its continuation pieces) are taken in random order while their pieces
still fit in n, so a selected word is always masked completely and the count
may fall short of n by less than one word.

The random ops are stateful, so every call draws a fresh mask: mapped after
`Dataset.repeat()`, each pass over the data is masked anew (RoBERTa's dynamic
masking). Masks are not reproducible from run to run, not even after
`tf.random.set_seed` (checked with TensorFlow 2.21 in tf.data).
"""

import dataclasses
import numbers

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_bertology.errors import ConfigError

# The selectors compute ceil(s * rate) in float32, where 100 * 0.15 comes out
# just above 15 and would round up to 16; shrinking the rate by one part in a
# million makes the count exact for rates with a few decimals.
_FLOAT32_SLACK = 1.0 - 1e-6


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

    Input: `token_ids` [B, L] int32 plus any other keys (passed through).
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
    ):
        ids = [mask_id, pad_id, *special_ids]
        if vocab_size < 1 or any(not 0 <= i < vocab_size for i in ids):
            raise ConfigError(f"mask, pad and special ids {ids} must lie in [0, vocab_size={vocab_size}).")
        self.config = config
        self.pad_id = pad_id
        unselectable = sorted(set(ids))
        rate = config.mask_rate * _FLOAT32_SLACK
        if config.whole_word:
            self._start_table, self._special_table = word_tables(word_start_table, vocab_size, unselectable)
            self._selector = _WholeWordSelector(config.max_predictions, rate, unselectable)
        else:
            self._selector = tf_text.RandomItemSelector(config.max_predictions, rate, unselectable)
        self._chooser = tf_text.MaskValuesChooser(
            vocab_size, mask_id, config.mask_token_rate, config.random_token_rate
        )

    def __call__(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        token_ids = tf.convert_to_tensor(features["token_ids"], tf.int32)
        units = self._words(token_ids) if self.config.whole_word else tf.RaggedTensor.from_tensor(token_ids)
        masked, positions, original = tf_text.mask_language_model(units, self._selector, self._chooser, axis=1)
        shape = [token_ids.shape[0], self.config.max_predictions]
        return {
            **features,
            "token_ids": tf.reshape(masked.flat_values, tf.shape(token_ids)),
            "padding_mask": tf.not_equal(token_ids, self.pad_id),
            "mask_positions": tf.cast(positions, tf.int32).to_tensor(0, shape=shape),
            "mask_ids": original.to_tensor(0, shape=shape),
            "mask_weights": tf.ones_like(positions, tf.float32).to_tensor(0.0, shape=shape),
        }

    def _words(self, token_ids: tf.Tensor) -> tf.RaggedTensor:
        """[B, L] -> [B, (words), (pieces)]; every special id is a word of its own."""
        starts, _ = word_starts(token_ids, self._start_table, self._special_table)
        words = tf.RaggedTensor.from_row_starts(
            tf.reshape(token_ids, [-1]), tf.where(tf.reshape(starts, [-1]))[:, 0], validate=False
        )
        words_per_row = tf.reduce_sum(tf.cast(starts, tf.int64), axis=1)
        return tf.RaggedTensor.from_row_lengths(words, words_per_row, validate=False)


def token_masker(tokenizer, max_predictions, whole_word=False, **rates):
    """BERT's masking stage for `tokenizer`: 15% of tokens (or whole words), 80/10/10 unless
    `rates` (MaskingConfig's mask_token_rate, random_token_rate, ...) say otherwise."""
    return DynamicMasker(
        MaskingConfig(max_predictions=max_predictions, whole_word=whole_word, **rates),
        vocab_size=tokenizer.vocab_size,
        mask_id=tokenizer.mask_id,
        pad_id=tokenizer.pad_id,
        special_ids=tokenizer.special_ids,
        word_start_table=tokenizer.word_start_table,
    )


def word_starts(token_ids, start_table, special_table):
    """(token starts a word, token is special) [B, L]: specials and the token after one start words."""
    is_special = tf.gather(special_table, token_ids)
    after_special = tf.pad(is_special[:, :-1], [[0, 0], [1, 0]], constant_values=True)
    return tf.gather(start_table, token_ids) | after_special, is_special


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


class _WholeWordSelector(tf_text.RandomItemSelector):
    """Selects random whole words of [B, (words), (pieces)] within a token budget.

    RandomItemSelector alone would count words, not tokens, against
    max_predictions; here the budget min(max_predictions, ceil(rate * selectable
    tokens)) is in tokens, and words are taken in random order while the running
    total of their pieces fits.
    """

    def get_selection_mask(self, input_ids, axis=1):
        selectable = self.get_selectable(input_ids, axis).to_tensor(False)
        pieces = tf.cast(input_ids.row_lengths(axis=2).to_tensor(0), tf.int32)
        pieces = tf.where(selectable, pieces, 0)
        budget = tf.math.ceil(tf.cast(tf.reduce_sum(pieces, axis=1), tf.float32) * self.selection_rate)
        budget = tf.minimum(tf.cast(budget, tf.int32), self.max_selections_per_batch)
        # Unselectable words and row padding sort after every real word.
        keys = tf.where(selectable, tf.random.uniform(tf.shape(pieces)), 2.0)
        order = tf.argsort(keys, axis=1)
        taken_in_order = tf.cumsum(tf.gather(pieces, order, batch_dims=1), axis=1) <= budget[:, None]
        taken_in_order &= tf.gather(selectable, order, batch_dims=1)
        taken = tf.gather(taken_in_order, tf.argsort(order, axis=1), batch_dims=1)
        return tf.RaggedTensor.from_tensor(taken, lengths=input_ids.row_lengths())
