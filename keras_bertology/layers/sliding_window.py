"""Sliding-window attention computed in blocks: memory and time linear in the length.

A query sees the keys at most `half` tokens away. Cut the sequence into
blocks of `half` tokens: every key a query of block k may see lies in blocks
k - 1, k and k + 1, so each block of queries scores 3 x `half` keys instead of
all L. The scores of a layer take B x N x L x 3 half floats instead of
B x N x L x L: at 8,192 tokens and a window of 128, 43 times fewer. The
band inside the three blocks is one static [half, 3 half] mask; the caller's
mask (padding [B, 1, L], or per query [B, L, L], such as packed documents) is
cut into the same blocks. The result equals dense attention under the band
mask, for every query that sees at least one key.
"""

from keras import ops

from keras_bertology.layers.dot_product import MASKED_SCORE, attend, fused_kernel_route, seen_or_all


def _blocks(x, block, count):
    """[B, L, ...] padded at the end to `count` x `block` rows, as [B, count, block, ...]."""
    pad = [(0, 0)] * len(x.shape)
    pad[1] = (0, count * block - ops.shape(x)[1])
    padded = ops.pad(x, pad)
    return ops.reshape(padded, (-1, count, block, *ops.shape(x)[2:]))


def _neighbours(blocked):
    """[B, count, block, ...] -> [B, count, 3 block, ...]: each block beside the one before and after it
    (zeros beyond the ends)."""
    edge = ops.zeros_like(blocked[:, :1])
    padded = ops.concatenate([edge, blocked, edge], axis=1)
    return ops.concatenate([padded[:, :-2], padded[:, 1:-1], padded[:, 2:]], axis=2)


def _band(block, half):
    """[block, 3 block] bool: query q of a block sees key s of its three blocks iff |q - (s - block)| <= half."""
    queries = ops.expand_dims(ops.arange(block, dtype="int32"), 1)
    keys = ops.expand_dims(ops.arange(3 * block, dtype="int32"), 0) - block
    return ops.less_equal(ops.abs(queries - keys), half)


def _key_mask(mask, length, block, count):
    """The caller's mask cut into blocks: [B, count, 1 or block, 3 block] bool; keys beyond the text hidden."""
    if mask is None:
        mask = ops.ones((1, 1, length), "bool")
    mask = ops.cast(mask, "int32")
    if mask.shape[1] == 1:  # one key mask for every query
        keys = _neighbours(_blocks(ops.transpose(mask, (0, 2, 1)), block, count))  # [B, count, 3 block, 1]
        return ops.cast(ops.transpose(keys, (0, 1, 3, 2)), "bool")
    # Per query: rows cut into blocks, and each block's rows keep the columns of its three blocks.
    rows = _blocks(mask, block, count)  # [B, count, block, L]
    columns = ops.pad(rows, [(0, 0), (0, 0), (0, 0), (block, count * block - length + block)])
    start = ops.arange(count, dtype="int32")[:, None] * block + ops.arange(3 * block, dtype="int32")[None, :]
    return ops.cast(ops.take_along_axis(columns, ops.expand_dims(ops.expand_dims(start, 0), 2), axis=-1), "bool")


def windowed_attention(query, key, value, mask, half, dropout=None):
    """Attention of `query` over the keys at most `half` positions away, in blocks of `half` tokens.

    Args:
        query, key, value: [B, L, N, D] heads (the query already scaled); L may be known only at run time.
        mask: None, [B, 1, L] or [B, L, L] (1 / True: may attend).
        half: int, how far a query sees on each side.
        dropout: optional callable applied to the probabilities.

    Returns:
        [B, L, N, D] context.
    """
    block = max(int(half), 1)
    length = ops.shape(query)[1]
    count = (length + block - 1) // block
    queries = _blocks(query, block, count)  # [B, C, b, N, D]
    keys, values = _neighbours(_blocks(key, block, count)), _neighbours(_blocks(value, block, count))
    keep = ops.logical_and(_key_mask(mask, length, block, count), _band(block, half))  # [B, C, b, 3b]
    if dropout is None and fused_kernel_route():  # each block a row of the batch: the kernel's attention
        heads = tuple(query.shape[2:])
        context = attend(ops.reshape(queries, (-1, block, *heads)), ops.reshape(keys, (-1, 3 * block, *heads)),
                         ops.reshape(values, (-1, 3 * block, *heads)),
                         mask=ops.reshape(keep, (-1, 1, block, 3 * block)))
    else:
        scores = ops.cast(ops.einsum("bcqnd,bcsnd->bncqs", queries, keys), "float32")  # [B, N, C, b, 3b]
        scores = ops.where(ops.expand_dims(seen_or_all(keep), 1), scores, MASKED_SCORE)
        probs = ops.cast(ops.softmax(scores, axis=-1), query.dtype)
        context = ops.einsum("bncqs,bcsnd->bcqnd", probs if dropout is None else dropout(probs), values)
    context = ops.reshape(context, (-1, count * block, *query.shape[2:]))
    return context[:, :length]
