"""GPT's pretraining instances: the corpus as one token stream, cut into full blocks."""

from keras_bertology.data.builder_contexts import InstanceContext
from keras_bertology.data.instances import Documents
from keras_bertology.data.next_token import stream_blocks, token_stream


def block_instances(documents: Documents, context: InstanceContext) -> dict:
    """Every document's sentences run on, each document followed by the end-of-text token (GPT's
    tokenizer gives it the `sep` role), and the stream is cut into rows of `seq_len` tokens; the last
    row is padded. Deterministic, so `copies` repeat the same rows.

    Returns token_ids and padding_mask [N, seq_len] int32.
    """
    specials = context.specials
    return stream_blocks(token_stream(documents, specials["sep_id"]), context.seq_len, specials["pad_id"],
                         context.copies)
