"""The data stage of causal LMs: next-token targets, nothing masked.

It takes the place of a masking stage (`ModelFamily.masker_path`) and is
mapped over batches the same way, but it draws nothing: position t's target
is the token at t + 1 of the same row, weighed 1 when both are real tokens,
so a row's last position and padding (on either side) count for nothing.
"""

import tensorflow as tf

from keras_bertology.errors import ConfigError


class NextTokenTargets:
    """batch (`token_ids`, optional `padding_mask` [B, L]) -> the batch with `next_token_ids` and
    `next_token_weights` [B, L]; a batch without `padding_mask` is all real tokens."""

    def __call__(self, batch, seed=None):
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        mask = tf.cast(batch["padding_mask"], tf.int32) if "padding_mask" in batch else tf.ones_like(token_ids)
        end = tf.zeros_like(token_ids[:, :1])
        next_ids = tf.concat([token_ids[:, 1:], end], axis=1)
        weights = tf.concat([mask[:, :-1] * mask[:, 1:], end], axis=1)
        return {**batch, "padding_mask": mask, "next_token_ids": next_ids, "next_token_weights": weights}


def next_token_stage(tokenizer, max_predictions=None, whole_word=False):
    """The stage for `ModelFamily.build_masker`: a causal LM predicts every token, so masking settings do
    not apply to it."""
    if whole_word:
        raise ConfigError("--whole-word does not apply to a causal LM, which predicts every token")
    return NextTokenTargets()
