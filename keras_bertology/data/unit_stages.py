"""What a masked-LM masks whole (`--masking-units`): tokens, words, phrases or entities, or a schedule of them.

A schedule ("words,phrases,entities", ERNIE 1.0's) splits the run's steps
into equal shares, one per level in order: level k (from 0) starts at step
floor(k * steps / levels). At the phrase level, a phrase the instance marks
(`data.knowledge_units`; its tokens carry the code in UNIT_JOINS) is one
unit and every other word is a unit of its own; at the entity level the
same with entities; at the word level words, at the token level tokens. The
family's masking stage then takes whole units by its rule with the batch's
UNIT_STARTS, and draws 80/10/10 once per unit.
"""

import tensorflow as tf

from keras_bertology.data.knowledge_units import LEVEL_CODES, UNIT_JOINS, level_boundaries
from keras_bertology.data.masking import UNIT_STARTS


class UnitStage:
    """Sets a batch's UNIT_STARTS for the level of its step, then masks it with `masker` (a stage that
    reads UNIT_STARTS: `DynamicMasker`, `SpanMasker`); the output drops UNIT_JOINS and UNIT_STARTS.

    Called as `stage(batch, seed=..., step=k)`: the input pipeline passes the batch's step when
    `takes_step` (a schedule), so a resumed run masks its batches as the uninterrupted run did.
    """

    def __init__(self, masker, word_start_table, levels, total_steps=1):
        self.masker, self.levels = masker, tuple(levels)
        self.takes_step = len(self.levels) > 1
        self._codes = tf.constant([LEVEL_CODES[level] for level in self.levels], tf.int32)
        self._bounds = tf.constant(level_boundaries(self.levels, total_steps) or [0], tf.int64)
        self._start_table = tf.constant(word_start_table, tf.bool)

    def __call__(self, features, seed=None, step=0):
        features = dict(features)
        token_ids = tf.convert_to_tensor(features["token_ids"], tf.int32)
        joins = features.pop(UNIT_JOINS, None)
        joins = tf.zeros_like(token_ids) if joins is None else tf.cast(joins, tf.int32)
        level = tf.reduce_sum(tf.cast(tf.cast(step, tf.int64) >= self._bounds, tf.int32)) if self.takes_step else 0
        code = self._codes[level]
        continues_unit = (code > 0) & tf.equal(joins, code)
        starts = (code < 0) | (tf.gather(self._start_table, token_ids) & ~continues_unit)
        masked = dict(self.masker({**features, UNIT_STARTS: starts}, seed=seed))
        masked.pop(UNIT_STARTS, None)
        return masked


def split_unit_joins(instances, vocab_size):
    """Instances built from ids that carry their unit code (`id + vocab_size * code`, see
    `recipe.tokenize_documents`) -> plain ids and UNIT_JOINS."""
    ids = instances["token_ids"]
    return {**instances, "token_ids": ids % vocab_size, UNIT_JOINS: ids // vocab_size}
