"""In-graph encoding of fine-tuning inputs: texts, words with per-word labels, question-context pairs.

The same functions build the training arrays and run inside the exported
SavedModel, so the served model lays out its inputs exactly as it was
trained. Every layout goes through the family's segment packer; values that
must follow the pieces (which word a piece belongs to) are packed by the same
packer with -1 in place of the special tokens and the padding, so truncation
and padding (on the right for BERT, the left for XLNet) move them together.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from keras_bertology.tokenizers.bert_text import WHITESPACE

IGNORED = -1


def split_words(texts):
    """[B] strings -> ragged [B, W] words, split at Unicode whitespace (what served tagging and answering
    read). Not tensorflow-text's WhitespaceTokenizer: it splits at a byte of a multi-byte space (U+00A0,
    U+2003, U+3000), leaving the other bytes in the words ("inside\\xc2" for "inside\u00a0and")."""
    return tf_text.regex_split(texts, WHITESPACE, "")


def word_pieces(tokenizer, words):
    """Ragged [B, W] words -> (piece ids, word index of each piece, 1 on each word's first piece),
    ragged [B, P] int32 each. Each word is tokenized alone, as a word-aligned tagger must, after the
    tokenizer's `word_prefix` (a space for byte-level BPE), so that it has the pieces it has in text."""
    pieces = tokenizer.tokenize(tf.strings.join([tokenizer.word_prefix, words.flat_values]))
    if isinstance(pieces, tf.Tensor):
        pieces = tf.RaggedTensor.from_tensor(pieces)
    pieces = tf.cast(pieces, tf.int32)
    per_word = pieces.row_lengths()
    index_in_row = tf.range(tf.size(words.flat_values, out_type=tf.int64)) - tf.gather(
        words.row_starts(), words.value_rowids())
    word_of_piece = tf.repeat(tf.cast(index_in_row, tf.int32), per_word)
    first = tf.cast(tf.equal(tf.ragged.range(per_word).flat_values, 0), tf.int32)

    def by_row(flat):
        return tf.RaggedTensor.from_row_lengths(pieces.with_flat_values(flat), words.row_lengths()).merge_dims(1, 2)

    return by_row(pieces.flat_values), by_row(word_of_piece), by_row(first)


def pack_follower(family, segments, seq_len):
    """Per-piece int values laid out like the pieces they follow; -1 on specials and padding."""
    return family.pack_segments(segments, seq_len, IGNORED, IGNORED, IGNORED)["token_ids"]


def encode_texts(family, tokenizer, seq_len, texts, texts_b=None):
    """[B] strings (and second strings) -> backbone inputs [B, seq_len]."""
    return family.pack_text(tokenizer, seq_len, texts, texts_b)


def encode_words(family, tokenizer, seq_len, words):
    """Ragged [B, W] words -> (backbone inputs, first-piece word index [B, seq_len], -1 elsewhere)."""
    pieces, word_of_piece, first = word_pieces(tokenizer, words)
    inputs = family.pack_segments([pieces], seq_len, tokenizer.optional_id("cls"), tokenizer.sep_id, tokenizer.pad_id)
    inputs = family.complete_inputs(tokenizer, inputs)
    first_word = tf.where(first == 1, word_of_piece, IGNORED)
    return inputs, pack_follower(family, [first_word], seq_len)


def encode_question_context(family, tokenizer, seq_len, questions, contexts):
    """[B] questions and contexts -> (backbone inputs, context words ragged [B, W], word index of each
    context piece [B, seq_len], -1 on the question and specials). The question comes first."""
    question_pieces = tf.cast(tokenizer.tokenize(questions), tf.int32)
    words = split_words(contexts)
    pieces, word_of_piece, _ = word_pieces(tokenizer, words)
    inputs = family.pack_segments([question_pieces, pieces], seq_len, tokenizer.optional_id("cls"), tokenizer.sep_id,
                                  tokenizer.pad_id)
    inputs = family.complete_inputs(tokenizer, inputs)
    word_map = pack_follower(family, [question_pieces * 0 + IGNORED, word_of_piece], seq_len)
    return inputs, words, word_map


def word_predictions(position_values, word_map, num_words, default):
    """Values at positions [B, L] -> one per word [B, num_words] via `word_map` (first-piece word
    index, -1 elsewhere); words without a position (cut off, or no pieces) get `default`."""
    rows = tf.shape(word_map)[0]
    keep = word_map >= 0
    batch_index = tf.broadcast_to(tf.range(rows)[:, None], tf.shape(word_map))
    indices = tf.stack([tf.boolean_mask(batch_index, keep), tf.boolean_mask(word_map, keep)], axis=1)
    base = tf.fill([rows, num_words], tf.constant(default, position_values.dtype))
    return tf.tensor_scatter_nd_update(base, indices, tf.boolean_mask(position_values, keep))


def best_spans(start_logits, end_logits, word_map, max_answer_pieces):
    """The answer with the highest start + end logit per row: (start word, end word, score) [B] each,
    over positions inside the context with start <= end < start + max_answer_pieces."""
    length = tf.shape(start_logits)[1]
    offsets = tf.range(length)[None, :] - tf.range(length)[:, None]
    band = (offsets >= 0) & (offsets < max_answer_pieces)
    valid = word_map >= 0
    allowed = band[None] & valid[:, :, None] & valid[:, None, :]
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    scores = tf.where(allowed, scores, tf.constant(-3e38, scores.dtype))
    flat = tf.reshape(scores, [tf.shape(scores)[0], -1])
    best = tf.argmax(flat, axis=1, output_type=tf.int32)
    start, end = best // length, best % length
    start_word = tf.gather(word_map, start, batch_dims=1)
    end_word = tf.gather(word_map, end, batch_dims=1)
    return start_word, end_word, tf.reduce_max(flat, axis=1)


def join_words(words, start_word, end_word):
    """Ragged [B, W] words -> [B] strings: words start..end joined by single spaces ("" when none)."""
    positions = tf.ragged.range(tf.maximum(start_word, 0), tf.maximum(end_word + 1, 0))
    chosen = tf.gather(words, positions, batch_dims=1)
    return tf.strings.reduce_join(chosen, axis=1, separator=" ")
