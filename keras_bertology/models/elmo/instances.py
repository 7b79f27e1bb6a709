"""ELMo's pretraining instances and data stage: sentence streams, spelled, with targets in both directions."""

import numpy as np
import tensorflow as tf

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.instances import Documents, _clean_documents
from keras_bertology.data.next_token import stream_blocks
from keras_bertology.errors import ConfigError
from keras_bertology.models.elmo.characters import word_characters


def sentence_instances(documents: Documents, context: InstanceContext) -> dict:
    """Every sentence as <S> words </S> (bilm-tf's), the sentences of the corpus run on, cut into rows of
    `seq_len` words; the last row is padded. Deterministic, so `copies` repeat the same rows.

    Returns token_ids and padding_mask [N, seq_len] int32.
    """
    specials = context.specials
    begin, end = np.array([specials["cls_id"]], np.int32), np.array([specials["sep_id"]], np.int32)
    stream = np.concatenate([piece for document in _clean_documents(documents) for sentence in document
                             for piece in (begin, sentence, end)]).astype(np.int32)
    return stream_blocks(stream, context.seq_len, specials["pad_id"], context.copies)


class BidirectionalTargets:
    """batch (`token_ids`, `padding_mask` [B, L]) -> the batch with each word's `char_ids` [B, L, 50] (all 0
    for padding), the forward LM's `next_token_ids` and the backward LM's `previous_token_ids` with their
    weights [B, L]: a target counts where it is a real word of the same row; a word outside the predicted
    vocabulary is the unknown word as a target and itself, spelled, as an input. Nothing is drawn.
    """

    def __init__(self, spellings, vocab_size, unk_id):
        self.spellings = tf.constant(spellings, tf.int32)  # [every word's id, 50]
        self.vocab_size, self.unk_id = vocab_size, unk_id

    def __call__(self, batch, seed=None):
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        mask = tf.cast(batch["padding_mask"], tf.int32) if "padding_mask" in batch else tf.ones_like(token_ids)
        char_ids = tf.gather(self.spellings, token_ids) * mask[:, :, tf.newaxis]
        targets = tf.where(token_ids < self.vocab_size, token_ids, self.unk_id)
        edge = tf.zeros_like(token_ids[:, :1])
        return {**batch, "padding_mask": mask, "char_ids": char_ids,
                "next_token_ids": tf.concat([targets[:, 1:], edge], axis=1),
                "next_token_weights": tf.concat([mask[:, :-1] * mask[:, 1:], edge], axis=1),
                "previous_token_ids": tf.concat([edge, targets[:, :-1]], axis=1),
                "previous_token_weights": tf.concat([edge, mask[:, 1:] * mask[:, :-1]], axis=1)}


def bidirectional_stage(context):
    """The data stage for `ModelFamily.build_masker`: each direction predicts every word, so masking
    settings do not apply."""
    if context.whole_word:
        raise ConfigError("--whole-word does not apply to ELMo, whose language models predict every word")
    tokenizer = context.tokenizer
    spellings = word_characters(tf.constant(tokenizer.vocabulary)).numpy()
    return BidirectionalTargets(spellings, tokenizer.vocab_size, tokenizer.unk_id)
