"""Serving endpoints of causal LMs: `score` raw strings, `generate` continuations of prompts.

    model.score(tf.constant(["a sentence"]))   # per-token log-probabilities, log-likelihood, perplexity
    model.generate(tf.constant(["Once upon"]))  # greedy, up to 32 new tokens (half the sequence length)
    model.generate_sampling(tf.constant(["Once upon"]), max_new_tokens=20, temperature=0.8, top_k=40, seed=1)

A text is read from its end: the string is cut from the left to the
export's character bound (`export.saved_model.cut_text`), tokenized, and its
last tokens kept, opened by <|endoftext|> (the `cls` role) as after a document
boundary in training, and padded on the left. `score` predicts each token
after the first of the window from the ones before it: a text of up to
`seq_len - 1` tokens is scored whole, a longer one on its last `seq_len - 1`. `generate`
runs the model in a graph loop: each step feeds every prompt and what it has
generated so far, left-padded so each row's last token is in the last
column, and appends one token per row; a row stops at end-of-text, the loop
when every row has stopped or after `max_new_tokens` steps. A prompt keeps
the last `seq_len - max_new_tokens` tokens of <|endoftext|> and its own,
which leave room for the new ones. Every family names its string input
`text`.
"""

import tensorflow as tf

from keras_bertology.data.packing import fit_to_batch

GENERATED_TOKENS = 32  # `generate`'s continuation length, at most half the sequence length


def causal_lm_endpoints(causal_lm, tokenizer, seq_len, input_names, buckets, strings_spec):
    """{signature: (function, input signature)} for `causal_lm` (inputs dict -> next-token logits); `score`
    pads a batch to its longest text, or the smallest of `buckets` that holds it."""

    def logits_of(token_ids, padding_mask):
        inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
        return tf.cast(causal_lm({name: inputs[name] for name in input_names}), tf.float32)

    def score(text):
        token_ids, mask = _left_padded_prompts(tokenizer, text, seq_len, width=seq_len)
        packed = fit_to_batch({"token_ids": token_ids, "padding_mask": mask}, mask, buckets)
        token_ids, mask = packed["token_ids"], packed["padding_mask"]
        log_probs = tf.nn.log_softmax(logits_of(token_ids, mask))[:, :-1]
        targets = token_ids[:, 1:]
        # A target is scored when it and the token before it are real: every token after the opening one.
        scored = mask[:, 1:] * mask[:, :-1]
        token_log_probs = tf.gather(log_probs, targets, batch_dims=2) * tf.cast(scored, tf.float32)
        count = tf.reduce_sum(scored, axis=1)
        total = tf.reduce_sum(token_log_probs, axis=1)
        return {"token_log_probs": token_log_probs, "target_ids": targets, "scored": scored,
                "log_likelihood": total, "num_tokens": count,
                "perplexity": tf.exp(-total / tf.cast(tf.maximum(count, 1), tf.float32))}

    def generate_sampling(text, max_new_tokens, temperature, top_k, seed):
        with tf.control_dependencies(generation_checks(max_new_tokens, seq_len - 1, temperature, top_k,
                                                       tokenizer.vocab_size)):
            token_ids, mask = _left_padded_prompts(tokenizer, text, seq_len - max_new_tokens)
        batch = tf.shape(token_ids)[0]
        generated = tf.zeros([batch, 0], tf.int32)
        done = tf.zeros([batch], tf.bool)

        def step(index, token_ids, mask, generated, done):
            logits = logits_of(token_ids, mask)[:, -1]
            chosen = choose_tokens(logits, temperature, top_k, tf.stack([seed, index]), tokenizer.vocab_size)
            chosen = tf.where(done, tokenizer.pad_id, chosen)
            live = tf.cast(tf.logical_not(done), tf.int32)
            return (index + 1, tf.concat([token_ids, chosen[:, None]], 1), tf.concat([mask, live[:, None]], 1),
                    tf.concat([generated, tf.where(done, -1, chosen)[:, None]], 1),
                    done | tf.equal(chosen, tokenizer.eot_id))

        def going(index, token_ids, mask, generated, done):
            return (index < max_new_tokens) & tf.logical_not(tf.reduce_all(done))

        _, _, _, generated, _ = tf.while_loop(
            going, step, (tf.constant(0), token_ids, mask, generated, done),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]), tf.TensorShape([None, None]),
                              tf.TensorShape([None, None]), tf.TensorShape([None])))
        text_ids = tf.ragged.boolean_mask(generated, (generated >= 0) & (generated != tokenizer.eot_id))
        # Byte-level tokens may end inside a character: invalid bytes become U+FFFD, so text is valid UTF-8.
        text = tf.strings.unicode_transcode(tokenizer.detokenize(text_ids), "UTF-8", "UTF-8", errors="replace")
        return {"text": text, "generated_ids": generated,
                "num_tokens": tf.reduce_sum(tf.cast(generated >= 0, tf.int32), axis=1)}

    scalar = tf.TensorSpec
    return {
        "score": (score, [strings_spec]),
        "generate": (lambda text: generate_sampling(text, tf.constant(min(GENERATED_TOKENS, seq_len // 2)),
                                                    tf.constant(0.0), tf.constant(0), tf.constant(0)),
                     [strings_spec]),
        "generate_sampling": (generate_sampling, [
            strings_spec, scalar([], tf.int32, name="max_new_tokens"), scalar([], tf.float32, name="temperature"),
            scalar([], tf.int32, name="top_k"), scalar([], tf.int32, name="seed")]),
    }


def _left_padded_prompts(tokenizer, text, room, width=None):
    """The last `room` tokens of <|endoftext|> + each text's tokens, padded on the left to the longest (or to
    `width`): [B, P] ids and mask."""
    pieces = tf.cast(tokenizer.tokenize(text), tf.int32)
    opening = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(text)[0], 1], tf.constant(tokenizer.cls_id, tf.int32)))
    opened = tf.concat([opening, pieces], axis=1)
    lengths = tf.minimum(opened.row_lengths(), tf.cast(room, tf.int64))
    kept = tf.RaggedTensor.from_row_lengths(
        tf.gather(opened.flat_values, _last_positions(opened.row_limits(), lengths)), lengths)
    # Reversed rows padded on the right, reversed back: padding on the left.
    right_padded = kept.to_tensor(tokenizer.pad_id, shape=[None, width])
    token_ids = tf.reverse(tf.reverse_sequence(right_padded, lengths, seq_axis=1), [1])
    columns = width or tf.shape(right_padded, out_type=tf.int64)[1]
    mask = tf.reverse(tf.sequence_mask(lengths, columns, tf.int32), [1])
    return token_ids, mask


def _last_positions(limits, lengths):
    """Flat indices of the last `lengths` values of each ragged row ending at `limits`."""
    starts = tf.repeat(limits - lengths, lengths)
    offsets = tf.range(tf.reduce_sum(lengths)) - tf.repeat(tf.cumsum(lengths, exclusive=True), lengths)
    return starts + offsets


def generation_checks(max_new_tokens, most_tokens, temperature, top_k, vocab_size):
    """Asserts that refuse a request's generation settings outside their ranges, naming the setting."""
    return [
        tf.debugging.Assert((max_new_tokens >= 1) & (max_new_tokens <= most_tokens),
                            [f"generate: max_new_tokens must be in [1, {most_tokens}]; got", max_new_tokens]),
        tf.debugging.Assert(tf.math.is_finite(temperature) & (temperature >= 0.0),
                            ["generate: temperature must be finite and >= 0 (0: greedy); got", temperature]),
        tf.debugging.Assert((top_k >= 0) & (top_k <= vocab_size),
                            [f"generate: top_k must be in [0, {vocab_size}] (0: all); got", top_k])]


def choose_tokens(logits, temperature, top_k, seed, vocab_size):
    """[B] next tokens: the likeliest where temperature is 0, else a draw from softmax(logits / temperature)
    over the top_k likeliest (all when 0), from the stateless `seed`. Only the tokenizer's `vocab_size`
    ids compete: a checkpoint's table may have padding rows past them, which have no text."""
    logits = logits[:, :vocab_size]
    vocab = tf.shape(logits)[-1]
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab), vocab)
    top = tf.math.top_k(logits, k=k)
    draw = tf.random.stateless_categorical(top.values / tf.maximum(temperature, 1e-6), 1, seed)[:, 0]
    picked = tf.gather(top.indices, tf.cast(draw, tf.int32), batch_dims=1)
    return tf.where(temperature > 0.0, picked, tf.argmax(logits, axis=-1, output_type=tf.int32))
