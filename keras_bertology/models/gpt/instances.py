"""GPT's pretraining instances: the corpus as one token stream, cut into full blocks."""

import numpy as np

from keras_bertology.data.instances import Documents
from keras_bertology.data.next_token import token_stream


def block_instances(documents: Documents, seq_len: int, specials: dict, rng=None, copies: int = 1,
                    packing=None) -> dict:
    """Every document's sentences run on, each document followed by the end-of-text token (GPT's
    tokenizer gives it the `sep` role), and the stream is cut into rows of `seq_len` tokens; the last
    row is padded. Deterministic, so `copies` repeat the same rows.

    Returns token_ids and padding_mask [N, seq_len] int32.
    """
    stream = token_stream(documents, specials["sep_id"])
    rows = -(-len(stream) // seq_len)
    token_ids = np.full(rows * seq_len, specials["pad_id"], np.int32)
    token_ids[:len(stream)] = stream
    padding_mask = (np.arange(rows * seq_len) < len(stream)).astype(np.int32)
    blocks = {"token_ids": token_ids.reshape(rows, seq_len), "padding_mask": padding_mask.reshape(rows, seq_len)}
    return {key: np.concatenate([value] * copies) for key, value in blocks.items()}
