"""XLNet's pretraining instances: contiguous streams cut into [reuse][A][SEP][B][SEP][CLS] chunks.

The rule (zihangdai/xlnet data_utils.py: `_create_data`, `batchify`,
`create_tfrecords`, `_split_a_and_b`):
1. All sentences of all documents form one token stream, one `sep_id`
   between two documents. Every sentence has its own id (the original's
   alternating `sent_ids`); the separator takes the id of the sentence before
   it, as the original's `<eod>` does, so it closes its document's last
   sentence.
2. The stream is cut into `batch_size` equal contiguous rows (the tail that
   does not fill a column is dropped). With `bi_data`, only `batch_size // 2`
   rows are cut and the other half of the batch is the same rows reversed.
3. Each row is walked in steps of `reuse_len` while `i + seq_len` fits: the
   instance at step t is the row's tokens [i, i + reuse_len) followed by
   A [SEP] B [SEP] [CLS], A and B filling `seq_len - reuse_len - 3` tokens.
   A starts right after the reuse part. Its end is a sentence boundary inside
   that budget ("cut point") or, without one, the first boundary after it. B
   is, half the time and always without a cut point, a random run of whole
   sentences from anywhere in the same row (label 0), otherwise the text
   after A up to the first boundary past the budget (label 1); the longer of
   the two (B on ties) then loses tokens at its right end until they fit.
4. segment_ids are 0 on reuse + A + first [SEP], 1 on B + second [SEP], 2 on
   [CLS]. Instance `t * batch_size + r` is row r's t-th chunk, so batch t + 1
   row r continues batch t row r: a Transformer-XL memory of the reuse part
   carried across batches holds the text just before (batches must not be
   shuffled). Forward rows come first, backward rows after; for R replicas
   (the original's cores) each replica's slice of the batch holds its
   forward rows, then their reversals, as the original lays out one host's
   batch for its cores. `stream_start` is 1 on each row's first chunk (of
   every copy): the memory is reset there.

Departures from the original:
- The document separator is `sep_id` (the original's own `<eod>` id does not
  exist in these vocabularies). It is a special token, so the masker never
  predicts it and treats it as a functional token; the original predicts
  `<eod>` like a word.
- `copies` walks the same rows again with new random B segments (the
  original's passes differ by `pass_id`, which reshuffles its input files).
  `stream_start` resets the memory where one copy ends and the next begins.
- The label (B continues A or not) is not returned: XLNet does not train on it.
- The original's `_split_a_and_b` may return None near the row end; under the
  walk's `i + seq_len <= row length` condition that never happens, so it is
  not reproduced (the number of batches is the same).

Example:
    >>> import numpy as np
    >>> from keras_bertology.data.builder_contexts import InstanceContext
    >>> from keras_bertology.models.xlnet.instances import stream_instances
    >>> documents = [[np.arange(10, 20), np.arange(20, 35)], [np.arange(40, 60)]]
    >>> specials = {"cls_id": 1, "sep_id": 2, "pad_id": 0}
    >>> out = stream_instances(documents, InstanceContext(12, specials, np.random.default_rng(0), batch_size=2),
    ...                        reuse_len=4)
    >>> out["token_ids"].shape  # 9 steps of 4 fit the 46-token row: 9 batches of 2
    (18, 12)
    >>> out["token_ids"][0, -2:].tolist(), out["segment_ids"][0, -2:].tolist()  # ... [SEP] [CLS]
    ([2, 1], [1, 2])
    >>> out["token_ids"][0, :4].tolist(), out["token_ids"][2, :4].tolist()  # row 0, batches 0 and 1
    ([10, 11, 12, 13], [14, 15, 16, 17])
    >>> out["token_ids"][1, :4].tolist()  # row 1 is row 0 reversed
    [59, 58, 57, 56]
"""

import numpy as np

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.instances import Documents, _clean_documents, _cut_counts
from keras_bertology.errors import ConfigError

# [SEP] A/B [SEP] [CLS]: the functional tokens each instance adds.
_FUNCTIONAL_TOKENS = 3


def stream_instances(documents: Documents, context: InstanceContext, *, reuse_len: int | None = None,
                     bi_data: bool = True) -> dict[str, np.ndarray]:
    """XLNet instances in stream order: index `t * batch_size + r` is row r's t-th chunk.

    Returns token_ids, segment_ids and padding_mask (all ones: every position
    is text) [N, seq_len] int32, N = copies * batches * batch_size, and
    `stream_start` [N] int32 (1 on a row's first chunk, where the memory
    starts empty). The context's `batch_size` is the global batch, shared by
    its `replicas` in equal contiguous slices; its packing must be None.
    """
    seq_len, specials, rng, copies = context.seq_len, context.specials, context.rng, context.copies
    batch_size, replicas, packing = context.batch_size, context.replicas, context.packing
    reuse_len = _check_config(seq_len, batch_size, replicas, reuse_len, bi_data, copies, packing)
    tokens, sentence_ids = _stream(_clean_documents(documents), specials["sep_id"])
    num_rows = batch_size // 2 if bi_data else batch_size
    num_step = len(tokens) // num_rows
    if num_step < seq_len:
        raise ConfigError(
            f"The corpus gives {len(tokens)} tokens (with one separator between documents), too few for one "
            f"batch: {num_rows} rows of seq_len={seq_len} need at least {num_rows * seq_len}. Use more text, "
            "a smaller batch_size or a smaller seq_len."
        )
    rows = tokens[:num_rows * num_step].reshape(num_rows, num_step)
    row_sentences = sentence_ids[:num_rows * num_step].reshape(num_rows, num_step)
    if bi_data:
        rows, row_sentences = (_with_reversals(x, replicas) for x in (rows, row_sentences))
    boundaries = [np.flatnonzero(np.diff(s)) + 1 for s in row_sentences]  # p where sentence p-1 != p
    num_batches = (num_step - seq_len) // reuse_len + 1
    token_ids = np.empty((copies, num_batches, batch_size, seq_len), np.int32)
    segment_ids = np.empty_like(token_ids)
    tot_len = seq_len - reuse_len - _FUNCTIONAL_TOKENS
    for copy in range(copies):
        for t in range(num_batches):
            begin = t * reuse_len
            for r in range(batch_size):
                a, b = _split_a_and_b(rows[r], boundaries[r], begin + reuse_len, tot_len, rng)
                token_ids[copy, t, r] = np.concatenate(
                    [rows[r, begin:begin + reuse_len], a, [specials["sep_id"]], b,
                     [specials["sep_id"], specials["cls_id"]]])
                segment_ids[copy, t, r] = np.repeat([0, 1, 2], [reuse_len + len(a) + 1, len(b) + 1, 1])
    stream_start = np.zeros((copies, num_batches, batch_size), np.int32)
    stream_start[:, 0] = 1
    token_ids = token_ids.reshape(-1, seq_len)
    return {"token_ids": token_ids, "segment_ids": segment_ids.reshape(-1, seq_len),
            "padding_mask": np.ones_like(token_ids), "stream_start": stream_start.reshape(-1)}


def _with_reversals(rows: np.ndarray, replicas: int) -> np.ndarray:
    """[n, S] forward rows -> [2n, S]: each replica's forward rows followed by the same rows reversed."""
    per_replica = rows.reshape(replicas, -1, rows.shape[1])
    return np.concatenate([per_replica, per_replica[:, :, ::-1]], axis=1).reshape(-1, rows.shape[1])


def _check_config(seq_len, batch_size, replicas, reuse_len, bi_data, copies, packing) -> int:
    """The reuse length to use, after refusing settings that cannot give an instance."""
    if packing is not None:
        raise ConfigError(f"XLNet streams contiguous text; packing must be None, got {packing!r}.")
    if copies < 1:
        raise ConfigError(f"copies={copies} must be at least 1.")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be at least 1.")
    if batch_size % replicas:
        raise ConfigError(f"batch_size={batch_size} must divide evenly among {replicas} replicas.")
    if bi_data and batch_size // replicas % 2:
        raise ConfigError(
            f"bi_data puts each forward row's reversed copy in the same replica batch, so the batch per "
            f"replica ({batch_size // replicas}) must be even (or set bi_data=False)."
        )
    if seq_len < 2 + _FUNCTIONAL_TOKENS:
        raise ConfigError(
            f"seq_len={seq_len} is too small: an XLNet instance holds at least one reused token, one token "
            "of A and [SEP] [SEP] [CLS], so seq_len must be at least 5."
        )
    reuse_len = seq_len // 2 if reuse_len is None else reuse_len
    if not 0 < reuse_len < seq_len - _FUNCTIONAL_TOKENS:
        raise ConfigError(
            f"reuse_len={reuse_len} must be in (0, seq_len - 3) = (0, {seq_len - _FUNCTIONAL_TOKENS}): the "
            "rest of the sequence holds A, B and [SEP] [SEP] [CLS]."
        )
    return reuse_len


def _stream(documents: Documents, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of all documents with `sep_id` between two, and each token's sentence number."""
    tokens, sentence_ids, sentence = [], [], 0
    for index, document in enumerate(documents):
        for piece in document:
            tokens.append(piece)
            sentence_ids.append(np.full(len(piece), sentence, np.int64))
            sentence += 1
        if index < len(documents) - 1:  # the separator closes the document's last sentence
            tokens.append(np.array([sep_id], np.int32))
            sentence_ids.append(np.array([sentence - 1], np.int64))
    return np.concatenate(tokens).astype(np.int32), np.concatenate(sentence_ids)


def _split_a_and_b(row: np.ndarray, boundaries: np.ndarray, begin: int, tot_len: int, rng):
    """A and B (together `tot_len` tokens) for the instance whose A starts at `begin` in `row`.

    `boundaries` are the positions where a new sentence starts. The original
    scans token by token; the same positions are found here by binary search.
    """
    data_len = len(row)
    first = np.searchsorted(boundaries, begin, side="right")
    past_budget = np.searchsorted(boundaries, begin + tot_len, side="left")
    cut_points = boundaries[first:past_budget]
    end = boundaries[past_budget] if past_budget < len(boundaries) else data_len
    if len(cut_points) == 0 or rng.random() < 0.5:  # B from a random place in the row
        a_end = end if len(cut_points) == 0 else int(rng.choice(cut_points))
        b_len = max(1, tot_len - (a_end - begin))
        b_begin = int(rng.integers(0, data_len - 1 - b_len, endpoint=True))
        b_end = b_begin + b_len
        before = np.searchsorted(boundaries, b_begin, side="right")
        b_begin = boundaries[before - 1] if before else 0  # back to its sentence's start
        after = np.searchsorted(boundaries, b_end, side="left")
        b_end = min(boundaries[after] if after < len(boundaries) else data_len, data_len - 1)
    else:  # B continues A
        a_end = int(rng.choice(cut_points))
        b_begin, b_end = a_end, end
    cut_a, cut_b = _cut_counts(a_end - begin, b_end - b_begin, tot_len)
    a, b = row[begin:a_end - cut_a], row[b_begin:b_end - cut_b]
    assert len(a) + len(b) == tot_len, (len(a), len(b), tot_len)
    return a, b
