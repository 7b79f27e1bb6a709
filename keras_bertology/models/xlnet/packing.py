"""XLNet's input layout for raw text: A <sep> [B <sep>] <cls>, padded on the left.

The summary token comes last, so a left-padded batch keeps it at position
L - 1 for every row; segment ids are 0 for A and its <sep>, 1 for B and its
<sep>, 2 for <cls> and 3 for padding (the original's SEG_ID_PAD).
"""

from keras_bertology.data.packing import lay_out, trimmed_segments

CLS_SEGMENT, PAD_SEGMENT = 2, 3


def pack_segments(segments, seq_len, cls_id, sep_id, pad_id):
    """One or two ragged [B, *] id segments -> `token_ids`, `segment_ids`, `padding_mask` [B, seq_len]
    in XLNet's layout (see `data.packing.pack_segments` for packing labels the same way)."""
    dense, lengths = trimmed_segments(segments, seq_len - len(segments) - 1)
    pieces = [piece for index, (values, length) in enumerate(zip(dense, lengths))
              for piece in ((values, length, index), (sep_id, 1, index))]
    return lay_out([*pieces, (cls_id, 1, CLS_SEGMENT)], seq_len, pad_id, PAD_SEGMENT, pad_left=True)
