"""Rows that hold several documents (unpadded packing): attention and positions stay within each.

A packed row's `padding_mask` numbers its documents: 1, 2, ... for the tokens
of its first, second, ... document and 0 for the padding at its tail. A row of
one document (any 0/1 mask) is the special case of document 1, so a backbone
built for packed rows serves ordinary inputs as they are.
"""

from keras import ops


def same_document_mask(document_ids):
    """[B, L, L] bool: query i may attend to key j iff both lie in one document (padding: in none)."""
    documents = ops.cast(document_ids, "int32")
    keys = ops.expand_dims(documents, 1)
    return ops.logical_and(ops.equal(ops.expand_dims(documents, 2), keys), ops.greater(keys, 0))


def document_positions(document_ids):
    """[B, L] int32 position of each token in its own document: its index less the tokens of the documents
    before it in the row (documents are contiguous and numbered in order)."""
    documents = ops.cast(document_ids, "int32")
    earlier = ops.logical_and(ops.less(ops.expand_dims(documents, 1), ops.expand_dims(documents, 2)),
                              ops.greater(ops.expand_dims(documents, 1), 0))
    before = ops.sum(ops.cast(earlier, "int32"), axis=-1)
    return ops.cumsum(ops.ones_like(documents), axis=1) - 1 - before
