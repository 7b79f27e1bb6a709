"""Transformer-XL's pretraining instances: the corpus as `batch_size` contiguous streams, walked in segments.

As the original's LM iterator: all documents form one token stream (each
closed by the end-of-text token), cut into `batch_size` equal rows; batch t
holds every row's t-th segment of `seq_len` tokens, so batch t + 1 row r
continues batch t row r and a memory carried across batches holds the text
just before. Targets are the stream shifted by one, the last position's being
the first token of the next segment. `stream_start` is 1 on each row's first
segment (of every copy), where the memory starts empty; `copies` walk the same
rows again.

Example:
    >>> import numpy as np
    >>> from keras_bertology.data.builder_contexts import InstanceContext
    >>> from keras_bertology.models.transformer_xl.instances import stream_segments
    >>> documents = [[np.arange(10, 20)], [np.arange(20, 40)]]
    >>> out = stream_segments(documents, InstanceContext(4, {"sep_id": 1, "pad_id": 0}, batch_size=2))
    >>> out["token_ids"][:4].tolist()  # batch 0 rows 0 and 1, batch 1 rows 0 and 1
    [[10, 11, 12, 13], [25, 26, 27, 28], [14, 15, 16, 17], [29, 30, 31, 32]]
    >>> out["next_token_ids"][2].tolist(), out["stream_start"][:4].tolist()
    ([15, 16, 17, 18], [1, 1, 0, 0])
"""

import numpy as np

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.instances import Documents
from keras_bertology.data.next_token import token_stream
from keras_bertology.errors import ConfigError


def stream_segments(documents: Documents, context: InstanceContext) -> dict[str, np.ndarray]:
    """Instances in stream order: index `t * batch_size + r` is row r's t-th segment.

    Returns token_ids, next_token_ids and padding_mask (all ones) [N, seq_len]
    int32 and stream_start [N] int32. The context's `batch_size` is the global
    batch, shared by its `replicas` in equal slices (each row stays in its slot).
    Nothing is drawn; the context's packing must be None.
    """
    seq_len, copies, packing = context.seq_len, context.copies, context.packing
    batch_size, replicas = context.batch_size, context.replicas
    if packing is not None:
        raise ConfigError(f"Transformer-XL streams contiguous text; packing must be None, got {packing!r}.")
    if copies < 1 or batch_size < 1 or batch_size % replicas:
        raise ConfigError(f"copies={copies} and batch_size={batch_size} must be at least 1, and the batch must "
                          f"divide evenly among {replicas} replicas.")
    stream = token_stream(documents, context.specials["sep_id"])
    row_length = len(stream) // batch_size
    batches = (row_length - 1) // seq_len
    if batches < 1:
        raise ConfigError(
            f"The corpus gives {len(stream)} tokens, too few for one batch: {batch_size} rows of seq_len={seq_len} "
            f"(plus the next token) need at least {batch_size * (seq_len + 1)}. Use more text, a smaller "
            "batch_size or a smaller seq_len.")
    rows = stream[:batch_size * row_length].reshape(batch_size, row_length)
    steps = np.arange(batches)[:, None, None] * seq_len + np.arange(seq_len)[None, None, :]
    token_ids = rows[np.arange(batch_size)[None, :, None], steps].reshape(-1, seq_len)
    next_ids = rows[np.arange(batch_size)[None, :, None], steps + 1].reshape(-1, seq_len)
    stream_start = np.zeros((batches, batch_size), np.int32)
    stream_start[0] = 1
    one_pass = {"token_ids": token_ids, "next_token_ids": next_ids, "padding_mask": np.ones_like(token_ids),
                "stream_start": stream_start.reshape(-1)}
    return {key: np.concatenate([value] * copies).astype(np.int32) for key, value in one_pass.items()}
