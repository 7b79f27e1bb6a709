"""XLNet's input layout for raw text: A <sep> [B <sep>] <cls>, padded on the left.

The summary token comes last, so a left-padded batch keeps it at position
L - 1 for every row; segment ids are 0 for A and its <sep>, 1 for B and its
<sep>, 2 for <cls> and 3 for padding (the original's SEG_ID_PAD).
"""

import tensorflow as tf
import tensorflow_text as tf_text


CLS_SEGMENT, PAD_SEGMENT = 2, 3


def _column(rows, value):
    """A [rows, 1] ragged column of `value`."""
    return tf.RaggedTensor.from_tensor(tf.fill([rows, 1], tf.constant(value, tf.int32)))


def _left_pad(ragged, seq_len, value):
    """Ragged [B, <= seq_len] -> [B, seq_len], the padding before each row."""
    dense = tf.reverse(ragged, axis=[1]).to_tensor(default_value=value, shape=[None, seq_len])
    return tf.reverse(dense, axis=[1])


def pack_segments(segments, seq_len, cls_id, sep_id, pad_id):
    """One or two ragged [B, *] id segments -> `token_ids`, `segment_ids`, `padding_mask` [B, seq_len]
    in XLNet's layout (see `data.packing.pack_segments` for packing labels the same way)."""
    segments = [tf.cast(segment, tf.int32) for segment in segments]
    trimmer = tf_text.ShrinkLongestTrimmer if len(segments) > 1 else tf_text.WaterfallTrimmer
    segments = trimmer(seq_len - len(segments) - 1).trim(segments)
    rows = segments[0].nrows(out_type=tf.int32)
    pieces, segment_pieces = [], []
    for index, ids in enumerate(segments):
        with_sep = tf.concat([ids, _column(rows, sep_id)], axis=1)
        pieces.append(with_sep)
        segment_pieces.append(tf.ones_like(with_sep) * index)
    pieces.append(_column(rows, cls_id))
    segment_pieces.append(_column(rows, CLS_SEGMENT))
    token_ids = tf.concat(pieces, axis=1)
    return {
        "token_ids": _left_pad(token_ids, seq_len, pad_id),
        "segment_ids": _left_pad(tf.concat(segment_pieces, axis=1), seq_len, PAD_SEGMENT),
        "padding_mask": _left_pad(tf.ones_like(token_ids), seq_len, 0),
    }
