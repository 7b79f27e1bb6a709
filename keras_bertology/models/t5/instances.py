"""T5's pretraining instances: the corpus as one token stream, cut into rows that span corruption fits
into `seq_len` encoder inputs."""

import numpy as np

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.instances import Documents, _clean_documents
from keras_bertology.data.span_corruption import SpanCorruptionConfig, row_lengths


def stream_chunks(documents: Documents, context: InstanceContext, noise_density: float = 0.15,
                  mean_noise_span_length: float = 3.0) -> dict:
    """Every document's sentences run on without separators (the original concatenates documents and
    splits the stream), cut into rows of as many tokens as span corruption turns into `context.seq_len` inputs
    (568 for 512); the last row is padded with `pad_id`. Deterministic, so `copies` repeat the rows.

    Returns token_ids and padding_mask [N, tokens per row] int32.
    """
    config = SpanCorruptionConfig(noise_density, mean_noise_span_length)
    width, _ = row_lengths(context.seq_len, config)
    pieces = [sentence for document in _clean_documents(documents) for sentence in document]
    stream = np.concatenate(pieces).astype(np.int32) if pieces else np.zeros([0], np.int32)
    rows = max(1, -(-len(stream) // width))
    token_ids = np.full(rows * width, context.specials["pad_id"], np.int32)
    token_ids[:len(stream)] = stream
    padding_mask = (np.arange(rows * width) < len(stream)).astype(np.int32)
    chunks = {"token_ids": token_ids.reshape(rows, width), "padding_mask": padding_mask.reshape(rows, width)}
    return {key: np.concatenate([value] * context.copies) for key, value in chunks.items()}
