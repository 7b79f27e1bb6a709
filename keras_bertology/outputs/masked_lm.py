"""Serving endpoints of masked LMs: `fill_mask` the k likeliest tokens at each mask token, `mlm_logits` all.

    model.fill_mask(tf.constant(["a [MASK] sentence"]))        # the 5 likeliest tokens at each [MASK]
    model.fill_mask_top_k(tf.constant(["a [MASK] sentence"]), 10)
    model.mlm_logits(tf.constant(["a [MASK] sentence"]))       # MLM logits, every position: [B, L, V]

See `export.saved_model` for their outputs.
"""

import tensorflow as tf

TOP_K = 5  # fill_mask's default number of tokens per mask


def masked_lm_endpoints(masked_lm, tokenizer, input_names, pack, strings_spec):
    """fill_mask (k = TOP_K), fill_mask_top_k and mlm_logits (see `export.saved_model`); `masked_lm` is
    called on a dict of inputs (`compiled`)."""
    vocabulary = tf.constant(tokenizer.vocabulary)

    def logits_at(packed, positions):
        inputs = {name: packed[name] for name in input_names}
        return tf.cast(masked_lm(dict(inputs, mask_positions=positions)), tf.float32)

    def fill_mask_top_k(text, top_k):
        check = tf.debugging.Assert((top_k >= 1) & (top_k <= tokenizer.vocab_size),
                                    [f"fill_mask_top_k: top_k must be in [1, {tokenizer.vocab_size}]; got", top_k])
        packed = pack(text)
        is_mask = tf.equal(packed["token_ids"], tokenizer.mask_id)
        # Each row's mask positions, in order, padded with -1 to the most masks of one row.
        positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(tf.shape(is_mask)[1]), tf.shape(is_mask)),
                                           is_mask).to_tensor(default_value=-1)
        most = tf.shape(positions)[1]
        # A batch without masks reads one position, cut off again: the head's gather fails on an empty batch
        # of zero positions (an empty request).
        read = tf.pad(tf.maximum(positions, 0), [[0, 0], [0, tf.cast(most == 0, tf.int32)]])
        probabilities = tf.nn.softmax(logits_at(packed, read))[:, :most]
        with tf.control_dependencies([check]):
            top = tf.math.top_k(probabilities, k=top_k)
        present = (positions >= 0)[:, :, None]
        return {"top_ids": tf.where(present, top.indices, -1),
                "top_tokens": tf.where(present, tf.gather(vocabulary, top.indices), ""),
                "top_probabilities": tf.where(present, top.values, 0.0),
                "mask_positions": positions}

    def mlm_logits(text):
        packed = pack(text)
        positions = tf.broadcast_to(tf.range(tf.shape(packed["token_ids"])[1]), tf.shape(packed["token_ids"]))
        return dict(logits=logits_at(packed, positions), **packed)

    return {"fill_mask": (lambda text: fill_mask_top_k(text, tf.constant(TOP_K)), [strings_spec]),
            "fill_mask_top_k": (fill_mask_top_k, [strings_spec, tf.TensorSpec([], tf.int32, name="top_k")]),
            "mlm_logits": (mlm_logits, [strings_spec])}
