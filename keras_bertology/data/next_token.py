"""The data stage of causal LMs: next-token targets, nothing masked.

It takes the place of a masking stage (`DataRecipe.masker_path`) and is
mapped over batches the same way, but it draws nothing: position t's target
is the token at t + 1 of the same row, weighed 1 when both are real tokens,
so a row's last position and padding (on either side) count for nothing.
Instances that know what follows their last token (a stream cut into
segments) bring their own `next_token_ids`, and every real position counts.
"""

import numpy as np
import tensorflow as tf

from keras_bertology.data.instances import Documents, _clean_documents

from keras_bertology.errors import ConfigError


def token_stream(documents: Documents, end_id: int) -> np.ndarray:
    """Every document's sentences run on, each document followed by `end_id` (end of text): int32 [T]."""
    end = np.array([end_id], np.int32)
    return np.concatenate([piece for document in _clean_documents(documents)
                           for piece in (*document, end)]).astype(np.int32)


def stream_blocks(stream: np.ndarray, seq_len: int, pad_id: int, copies: int = 1) -> dict:
    """A token stream cut into rows of `seq_len` tokens, the last row padded, repeated `copies` times:
    token_ids and padding_mask [N, seq_len] int32."""
    rows = -(-len(stream) // seq_len)
    token_ids = np.full(rows * seq_len, pad_id, np.int32)
    token_ids[:len(stream)] = stream
    padding_mask = (np.arange(rows * seq_len) < len(stream)).astype(np.int32)
    blocks = {"token_ids": token_ids.reshape(rows, seq_len), "padding_mask": padding_mask.reshape(rows, seq_len)}
    return {key: np.concatenate([value] * copies) for key, value in blocks.items()}


class NextTokenTargets:
    """batch (`token_ids`, optional `padding_mask` [B, L], optional `next_token_ids`) -> the batch with
    `next_token_ids` and `next_token_weights` [B, L]; a batch without `padding_mask` is all real tokens."""

    def __call__(self, batch, seed=None):
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        mask = tf.cast(batch["padding_mask"], tf.int32) if "padding_mask" in batch else tf.ones_like(token_ids)
        if "next_token_ids" in batch:
            next_ids, weights = tf.cast(batch["next_token_ids"], tf.int32), mask
        else:
            end = tf.zeros_like(token_ids[:, :1])
            next_ids = tf.concat([token_ids[:, 1:], end], axis=1)
            weights = tf.concat([mask[:, :-1] * mask[:, 1:], end], axis=1)
        return {**batch, "padding_mask": mask, "next_token_ids": next_ids, "next_token_weights": weights}


def next_token_stage(context):
    """The stage for `ModelFamily.build_masker`: a causal LM predicts every token, so masking settings do
    not apply to it (nor does how the context's `replicas` share a batch of streams: nothing is drawn)."""
    if context.whole_word:
        raise ConfigError("--whole-word does not apply to a causal LM, which predicts every token")
    return NextTokenTargets()
