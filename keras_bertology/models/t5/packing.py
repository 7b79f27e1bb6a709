"""How T5 lays out served text: the text's tokens, then </s> (no beginning token, no segment ids)."""

from keras_bertology.data.packing import lay_out, trimmed_segments


def pack_segments(segments, seq_len, cls_id, sep_id, pad_id):
    """One or two ragged [B, *] id segments -> `A </s>` (`A </s> B </s>`), [B, seq_len] int32, as the
    span-corrupted inputs T5 pretrains on end; `cls_id` is unused (T5 has no such token)."""
    kept, lengths = trimmed_segments(segments, seq_len - len(segments))
    pieces = []
    for segment, (values, length) in enumerate(zip(kept, lengths)):
        pieces += [(values, length, segment), (sep_id, 1, segment)]
    return lay_out(pieces, seq_len, pad_id, pad_segment=0)
