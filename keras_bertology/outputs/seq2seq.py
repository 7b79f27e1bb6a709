"""Serving endpoints of encoder-decoders (T5): `generate` text from text (and `encode`, `serve`'s twin name).

    model.encode(tf.constant(["a sentence"]))       # the encoder's states, as `serve`
    model.generate(tf.constant(["The <extra_id_0> sat on the mat."]))   # greedy, up to 32 tokens
    model.generate_sampling(tf.constant(["..."]), max_new_tokens=20, temperature=0.8, top_k=40, seed=1)

The encoder runs once per request, and each decoder layer's cross-attention
heads of its states are computed once; the decoder then runs in a graph loop
from the start token (T5's: the pad id), one position a step: each layer
keeps the self-attention heads of the positions written so far (a key/value
cache), so a step costs one position, not the whole prefix. Each step appends
one token per row; a row stops at </s>, the loop when every row has stopped
or after `max_new_tokens` steps. The text is the written
tokens without </s>, detokenized: a span-corrupted input's fill-ins read
`<extra_id_0> the cat <extra_id_1> ...`.
"""

import tensorflow as tf

from keras_bertology.outputs.causal_lm import GENERATED_TOKENS, choose_tokens, generation_checks


def seq2seq_endpoints(encode, pretrainer, tokenizer, seq_len, pack, strings_spec):
    """{signature: (function, input signature)} of the generation endpoints: `encode` (packed inputs dict ->
    {"sequence_output"}, the export's compiled encoder) and a seq2seq `pretrainer`, whose
    `start_decoding` and `decode_step` run the decoder one position a step from a key/value cache."""
    eos_id, start_id = tokenizer.sep_id, tokenizer.pad_id

    def generate_sampling(text, max_new_tokens, temperature, top_k, seed):
        with tf.control_dependencies(generation_checks(max_new_tokens, seq_len, temperature, top_k,
                                                       tokenizer.vocab_size)):
            packed = pack(text)
        mask = packed["padding_mask"]
        states = encode({"token_ids": packed["token_ids"], "padding_mask": mask})["sequence_output"]
        encoder_heads = pretrainer.start_decoding(states)
        batch = tf.shape(states)[0]
        # Each layer's cache starts empty: the encoder's heads cut to length 0 (same heads, width and dtype).
        past = [(key[:, :0], value[:, :0]) for key, value in encoder_heads]

        def step(index, last, past, generated, done):
            logits, past = pretrainer.decode_step(last, index, past, encoder_heads, mask)
            chosen = tf.where(done, start_id, choose_tokens(tf.cast(logits, tf.float32), temperature, top_k,
                                                            tf.stack([seed, index]), tokenizer.vocab_size))
            return (index + 1, chosen[:, None], past, tf.concat([generated, tf.where(done, -1, chosen)[:, None]], 1),
                    done | tf.equal(chosen, eos_id))

        def going(index, last, past, generated, done):
            return (index < max_new_tokens) & tf.logical_not(tf.reduce_all(done))

        growing = [(tf.TensorShape([None, None, *key.shape[2:]]),) * 2 for key, _ in past]
        _, _, _, generated, _ = tf.while_loop(
            going, step, (tf.constant(0), tf.fill([batch, 1], start_id), past, tf.zeros([batch, 0], tf.int32),
                          tf.zeros([batch], tf.bool)),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, 1]), growing, tf.TensorShape([None, None]),
                              tf.TensorShape([None])))
        text_ids = tf.ragged.boolean_mask(generated, (generated >= 0) & (generated != eos_id))
        return {"text": tokenizer.detokenize(text_ids), "generated_ids": generated,
                "num_tokens": tf.reduce_sum(tf.cast(generated >= 0, tf.int32), axis=1)}

    scalar = tf.TensorSpec
    return {
        "generate": (lambda text: generate_sampling(text, tf.constant(min(GENERATED_TOKENS, seq_len)),
                                                    tf.constant(0.0), tf.constant(0), tf.constant(0)),
                     [strings_spec]),
        "generate_sampling": (generate_sampling, [
            strings_spec, scalar([], tf.int32, name="max_new_tokens"), scalar([], tf.float32, name="temperature"),
            scalar([], tf.int32, name="top_k"), scalar([], tf.int32, name="seed")]),
    }
