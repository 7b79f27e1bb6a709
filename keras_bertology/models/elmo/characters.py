"""ELMo's character ids of words, in-graph: bilm-tf's spelling of a token, which its checkpoints were trained on.

A word becomes `MAX_CHARACTERS` ids: begin-of-word, its UTF-8 bytes (the
first `MAX_CHARACTERS - 2`), end-of-word, then the padding character. The
sentence marks <S> and </S> are spelled as one mark character between
begin- and end-of-word. Every id is bilm-tf's plus one, as its batcher feeds
the model, so that 0 stays free for padding tokens (all-zero rows).
"""

import numpy as np
import tensorflow as tf

MAX_CHARACTERS = 50
# bilm-tf's marks (bytes are 0-255), before the batcher's +1.
BEGIN_SENTENCE, END_SENTENCE, BEGIN_WORD, END_WORD, PAD_CHARACTER = 256, 257, 258, 259, 260
SENTENCE_MARKS = {"<S>": BEGIN_SENTENCE, "</S>": END_SENTENCE}


def mark_spelling(mark):
    """The [MAX_CHARACTERS] ids of a sentence mark (BEGIN_SENTENCE or END_SENTENCE), as fed to the model."""
    code = np.full(MAX_CHARACTERS, PAD_CHARACTER, np.int32)
    code[:3] = (BEGIN_WORD, mark, END_WORD)
    return code + 1


def word_characters(words):
    """Character ids [..., MAX_CHARACTERS] int32 of a string tensor of words (any shape, ragged included)."""
    if isinstance(words, tf.RaggedTensor):
        return words.with_flat_values(word_characters(words.flat_values))
    words = tf.convert_to_tensor(words, tf.string)
    kept = MAX_CHARACTERS - 2
    flat = tf.reshape(words, [-1])
    lengths = tf.minimum(tf.strings.length(flat), kept)  # bytes
    raw = tf.cast(tf.io.decode_raw(flat, tf.uint8, fixed_length=kept), tf.int32)  # zero-filled past the end
    positions = tf.range(kept)[tf.newaxis, :]
    spelled = tf.where(positions < lengths[:, tf.newaxis], raw, PAD_CHARACTER)
    spelled = tf.where(positions == lengths[:, tf.newaxis], END_WORD, spelled)
    last = tf.where(lengths == kept, END_WORD, PAD_CHARACTER)[:, tf.newaxis]  # a word cut at 48 bytes ends here
    rows = tf.concat([tf.fill([tf.shape(flat)[0], 1], BEGIN_WORD), spelled, last], axis=1) + 1
    for mark, code in SENTENCE_MARKS.items():
        rows = tf.where((flat == mark)[:, tf.newaxis], tf.constant(mark_spelling(code))[tf.newaxis, :], rows)
    return tf.reshape(rows, tf.concat([tf.shape(words), [MAX_CHARACTERS]], axis=0))


def pack_sentences(segments, seq_len, cls_id, sep_id, pad_id):
    """One or two ragged [B, *] id segments -> ELMo's layout, [B, seq_len] int32: each segment a sentence of
    the stream bilm-tf trains on, <S> A </S> (<S> B </S>), trimmed as BERT trims a pair. Returns
    `token_ids`, `segment_ids` (0, then 1 for the second sentence) and `padding_mask`; per-piece values
    (labels with -1 specials) land where their words do."""
    from keras_bertology.data.packing import lay_out, trimmed_segments

    dense, lengths = trimmed_segments(segments, seq_len - 2 * len(segments))
    pieces = [piece for segment, (values, length) in enumerate(zip(dense, lengths))
              for piece in ((cls_id, 1, segment), (values, length, segment), (sep_id, 1, segment))]
    return lay_out(pieces, seq_len, pad_id, pad_segment=0)


def pack_spelled_words(tokenizer, seq_len, first, second=None):
    """Strings [B] (and a second sentence each) -> ELMo's inputs [B, seq_len] as `pack_sentences` lays
    them out: `token_ids` (the word ids, for the language models' scores), `segment_ids`, `padding_mask`,
    and `char_ids` [B, seq_len, MAX_CHARACTERS], spelled from the text itself, so a word outside the
    vocabulary keeps its characters."""
    texts = [first] if second is None else [first, second]
    packed = pack_sentences([tokenizer.tokenize(text) for text in texts], seq_len, tokenizer.cls_id,
                            tokenizer.sep_id, tokenizer.pad_id)
    # The words laid out the same way, as indices into one flat list: the two marks, then the batch's words.
    words = [tokenizer.words(text) for text in texts]
    flat = tf.concat([tf.constant(list(SENTENCE_MARKS))] + [segment.flat_values for segment in words], axis=0)
    sizes = [tf.size(segment.flat_values) for segment in words]
    starts = [len(SENTENCE_MARKS), len(SENTENCE_MARKS) + sizes[0]]
    indices = [segment.with_flat_values(tf.range(size) + start) for segment, size, start in zip(words, sizes, starts)]
    positions = pack_sentences(indices, seq_len, 0, 1, 0)["token_ids"]  # <S> is 0, </S> 1 (padding: masked)
    char_ids = word_characters(tf.gather(flat, positions)) * packed["padding_mask"][:, :, tf.newaxis]
    return dict(packed, char_ids=char_ids)


def spell_ids(tokenizer, packed):
    """Laid-out word ids -> the same with `char_ids`, each id's word spelled (0 for padding): for inputs
    built from ids alone, where a word outside the vocabulary is <UNK> and spelled so."""
    words = tf.gather(tf.constant(tokenizer.vocabulary), packed["token_ids"])
    return dict(packed, char_ids=word_characters(words) * packed["padding_mask"][:, :, tf.newaxis])
