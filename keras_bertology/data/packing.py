"""In-graph packing of raw text into fixed-length encoder inputs.

Used wherever strings go in and model inputs come out (serving signatures,
fine-tuning preprocessors): tokenize, trim the longest segment first (BERT's
`truncate_seq_pair`), add [CLS] ... [SEP] (... [SEP]), pad to `seq_len`.
The mask token written literally in the text ("[MASK]", "<mask>") becomes the
mask id, as with Hugging Face tokenizers, so fill-mask works from raw strings.
"""

import tensorflow as tf

# Unicode White_Space, as Hugging Face's tokenizers strip it.
WHITESPACE = r"\t\n\x0B\f\r\x{85}\p{Z}"
TEXT_PIECES = ("$A", "$B")  # a text layout's places of the first and second text (`layout_packer`)


def tokenize_keeping_mask(tokenizer, strings):
    """Tokenize [B] strings to ragged ids, mapping each literal mask token to `mask_id`.

    Each string is split at the mask token, the pieces are tokenized, and the
    mask id is put back between consecutive pieces. Tokenizers whose mask
    token absorbs the spaces before it (`strips_space_before_mask`, RoBERTa's
    byte-level BPE) get those spaces removed first. A vocabulary without a
    mask token (a causal LM's) tokenizes the strings as they are.
    """
    if not tokenizer.has_role("mask"):
        return tokenizer.tokenize(strings)
    mask_token = tokenizer.vocabulary[tokenizer.mask_id]
    pieces = tf.strings.split(strings, sep=mask_token)
    texts = pieces.flat_values
    followed_by_mask = tf.range(tf.size(texts, out_type=tf.int64)) + 1 < tf.gather(pieces.row_splits[1:],
                                                                                    pieces.value_rowids())
    if getattr(tokenizer, "strips_space_before_mask", False):
        # RoBERTa's <mask> takes the spaces before it: strip them from every piece a mask follows.
        texts = tf.where(followed_by_mask, tf.strings.regex_replace(texts, rf"[{WHITESPACE}]+$", ""), texts)
    piece_ids = tokenizer.tokenize(texts)
    # Laid out flat (a few ops, where ragged concatenation and slicing build hundreds into every serving
    # graph): each piece's ids move right by the masks before it, and the mask id fills the gaps.
    masks = tf.cast(followed_by_mask, tf.int64)
    ids = piece_ids.flat_values
    moved = tf.range(tf.size(ids, out_type=tf.int64)) + tf.gather(tf.cumsum(masks, exclusive=True),
                                                                  piece_ids.value_rowids())
    ends = tf.concat([[0], tf.cumsum(piece_ids.row_lengths() + masks)], axis=0)
    values = tf.tensor_scatter_nd_update(tf.fill([ends[-1]], tf.constant(tokenizer.mask_id, ids.dtype)),
                                         moved[:, None], ids)
    return tf.RaggedTensor.from_row_splits(values, tf.gather(ends, pieces.row_splits), validate=False)


def pack_text(tokenizer, seq_len, first, second=None, packer=None):
    """Pack string tensors `first` (and `second`) [B] into a dict of [B, seq_len] int32.

    Tokenizes (keeping literal mask tokens) and hands the segments to
    `packer` (`pack_segments` by default: BERT's layout).
    """
    segments = [tokenize_keeping_mask(tokenizer, first)]
    if second is not None:
        segments.append(tokenize_keeping_mask(tokenizer, second))
    return (packer or pack_segments)(segments, seq_len, tokenizer.optional_id("cls"), tokenizer.sep_id,
                                     tokenizer.pad_id)


def layout_packer(layout):
    """A packer (as `pack_segments`) laying segments out as `layout` says: {"single": [...], "pair": [...]},
    each a list of [piece, segment id], a piece being "$A" (the first text), "$B" (the second) or a token id,
    as Hugging Face's TemplateProcessing lays text out (see `Tokenizer.layout`). Texts are trimmed as
    `pack_segments` trims them, to what the template's special tokens leave; padding follows on the right."""
    def pack(segments, seq_len, cls_id, sep_id, pad_id):
        template = layout["pair" if len(segments) == 2 else "single"]
        texts = [piece for piece, _ in template if piece in TEXT_PIECES]
        if len(texts) != len(segments):
            raise ValueError(f"the layout places {len(texts)} texts; got {len(segments)}")
        dense, lengths = trimmed_segments(segments, seq_len - (len(template) - len(texts)))
        pieces = [(dense[TEXT_PIECES.index(piece)], lengths[TEXT_PIECES.index(piece)], segment)
                  if piece in TEXT_PIECES else (int(piece), 1, segment) for piece, segment in template]
        return lay_out(pieces, seq_len, pad_id, pad_segment=0)

    return pack


def pack_segments(segments, seq_len, cls_id, sep_id, pad_id):
    """One or two ragged [B, *] id segments -> BERT's [CLS] A [SEP] (B [SEP]) layout, [B, seq_len] int32.

    Returns `token_ids`, `segment_ids` (0 for the first segment, 1 for the
    second) and `padding_mask` (1 for real tokens). Any ragged values go
    through the same trimming and placement, so packing per-piece labels with
    the specials and padding set to -1 puts each label where its piece lands.
    """
    (first, *second), lengths = trimmed_segments(segments, seq_len - len(segments) - 1)
    pieces = [(cls_id, 1, 0), (first, lengths[0], 0), (sep_id, 1, 0)]
    if second:
        pieces += [(second[0], lengths[1], 1), (sep_id, 1, 1)]
    return lay_out(pieces, seq_len, pad_id, pad_segment=0)


def trimmed_segments(segments, budget):
    """(each ragged [B, *] segment as a dense [B, budget] int32 tensor, each row's kept length [B]):
    the rows trimmed to `budget` tokens in all as tensorflow_text's trimmers trim them (one segment:
    cut at the budget; two: ShrinkLongestTrimmer, BERT's truncate_seq_pair). A few dozen graph ops
    where the trimmers and `combine_segments` build thousands, which every export traces and every
    served request runs."""
    lengths = [tf.cast(segment.row_lengths(), tf.int32) for segment in segments]
    if len(segments) == 1:
        lengths = [tf.minimum(lengths[0], budget)]
    elif len(segments) == 2:
        lengths = _shrink_longest(*lengths, budget)
    else:
        raise ValueError(f"one or two segments are packed; got {len(segments)}")
    dense = [tf.cast(segment, tf.int32).to_tensor(default_value=0, shape=[None, budget]) for segment in segments]
    return dense, lengths


def _shrink_longest(a, b, budget):
    """Kept lengths of two segments of lengths `a`, `b` [B] over `budget`: the longer loses tokens until
    they are equal, then they lose one each in turn, the first segment first."""
    over = tf.maximum(a + b - budget, 0)
    first_cut = tf.minimum(over, tf.abs(a - b))  # from the longer
    rest = over - first_cut
    a_longer = a > b
    return [a - tf.where(a_longer, first_cut, 0) - (rest + 1) // 2,
            b - tf.where(a_longer, 0, first_cut) - rest // 2]


def lay_out(pieces, seq_len, pad_id, pad_segment, pad_left=False):
    """`token_ids`, `segment_ids` and `padding_mask` [B, seq_len] int32 of `pieces` placed end to end,
    padded after them (before them with `pad_left`). A piece is (values, length, segment id): a dense
    [B, W] tensor read from its first column for `length` [B] positions, or one special id (length 1)."""
    rows = next(tf.shape(values)[0] for values, _, _ in pieces if isinstance(values, tf.Tensor))
    positions = tf.range(seq_len)[None, :]
    total = sum(length for _, length, _ in pieces)
    start = seq_len - total if pad_left else tf.zeros_like(total)
    token_ids = tf.fill([rows, seq_len], tf.constant(pad_id, tf.int32))
    segment_ids = tf.fill([rows, seq_len], tf.constant(pad_segment, tf.int32))
    end = start
    for values, length, segment in pieces:
        offset = positions - end[:, None]
        if isinstance(values, tf.Tensor):
            inside = (offset >= 0) & (offset < length[:, None])
            values = tf.gather(values, tf.clip_by_value(offset, 0, tf.shape(values)[1] - 1), batch_dims=1)
        else:
            inside = tf.equal(offset, 0)
        token_ids = tf.where(inside, values, token_ids)
        segment_ids = tf.where(inside, segment, segment_ids)
        end = end + length
    real = (positions >= start[:, None]) & (positions < end[:, None])
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": tf.cast(real, tf.int32)}


def fit_to_batch(tensors, padding_mask, buckets=()):
    """[B, seq_len] `tensors` (a dict) cut to the columns the batch uses, for serving: a batch of short
    inputs costs what their length costs, not the run's sequence length.

    The columns kept run from the first that any row holds a token in to the last, so either padding
    side works (BERT's on the right, XLNet's on the left); the width is rounded up to the smallest of
    `buckets` that holds it (seq_len above the largest), so that a server compiling per shape sees a
    handful of shapes. Values at the kept columns are unchanged.
    """
    seq_len = padding_mask.shape[1]
    used = tf.reduce_any(padding_mask > 0, axis=0)
    first = tf.argmax(tf.cast(used, tf.int32), output_type=tf.int32)
    last = seq_len - tf.argmax(tf.cast(tf.reverse(used, [0]), tf.int32), output_type=tf.int32)
    width = tf.where(tf.reduce_any(used), last - first, 1)
    sizes = tf.constant(sorted({*(size for size in buckets if size < seq_len), seq_len}), tf.int32)
    width = tf.reduce_min(tf.boolean_mask(sizes, sizes >= width)) if buckets else width
    start = tf.minimum(first, seq_len - width)
    return {name: value[:, start:start + width] for name, value in tensors.items()}
