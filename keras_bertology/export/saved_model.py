"""SavedModel export with the tokenizer inside the graph.

The exported signatures take raw strings, so a server needs nothing but
TensorFlow and tensorflow-text (imported before loading, which registers the
tokenizer ops):

    import tensorflow as tf, tensorflow_text  # noqa: F401
    model = tf.saved_model.load("savedmodels/NAME")
    model.serve(tf.constant(["a sentence"]))                  # encoder outputs
    model.serve_pairs(tf.constant(["first"]), tf.constant(["second"]))
    model.fill_mask(tf.constant(["a [MASK] sentence"]))        # the 5 likeliest tokens at each [MASK]
    model.fill_mask_top_k(tf.constant(["a [MASK] sentence"]), 10)
    model.mlm_logits(tf.constant(["a [MASK] sentence"]))       # MLM logits, every position: [B, L, V]
    model.signatures["serve_ids"](token_ids=ids, padding_mask=mask, ...)  # pre-tokenized, [B, L] int32

The endpoints beyond `serve`, `serve_pairs` and `serve_ids` are those of the
output kinds the model's pretrainer declares (`keras_bertology.outputs`): a
masked LM's the fill-mask ones (see `outputs.masked_lm`); a causal LM's (GPT)
`score` and `generate` / `generate_sampling` in their place (see
`outputs.causal_lm`); an encoder-decoder's (T5) `encode`, `serve`'s twin, and
`generate` / `generate_sampling` from its decoder (see `outputs.seq2seq`).

Text is laid out as the family packs it, or, for a converted checkpoint whose
Hugging Face tokenizer lays it out otherwise, as that tokenizer does (the
tokenizer's `layout`, recorded at conversion: a GPT-2's adds nothing around a
text); `score` and generation open a text with <|endoftext|> either way.

`serving_default` is `serve`. A batch of strings is packed to its longest
input, at most the run's sequence length (longer texts are truncated, longest
segment first): outputs along the sequence axis are L long, L the batch's
longest input in tokens, or the smallest of the export's length buckets that
holds it (`length_buckets` in assets/bertology.json), so a short query costs
what its length costs. Values at the real tokens are those of a batch padded
to the full sequence length. The literal mask token ("[MASK]" or "<mask>", see
assets/bertology.json) becomes the mask id.

`fill_mask` returns, per input and per mask token, the k likeliest tokens
(`top_tokens` as the vocabulary writes them, `top_ids`, `top_probabilities`,
[B, M, k], M the most masks of one input of the batch) and `mask_positions`
[B, M] (-1 where an input has fewer masks). `mlm_logits` is the full
[B, L, V] float32 tensor: 4 V bytes per token (120 KB at V = 30,000, 60 MB for
one input of 512 tokens), for clients that need every score.

Request cost is bounded by the token budget: before tokenizing, every word
(a run of characters between whitespace, punctuation and CJK ideographs) is
cut to its first `MAX_WORD_CHARS` (101) characters, then every string to its
first `CHARS_PER_TOKEN * seq_len` UTF-8 characters (at most 4 bytes each;
`max_text_chars` and `max_word_chars` in assets/bertology.json), and a word the
cut splits is dropped. A causal LM's `score`, `generate` and
`generate_sampling` read a text's end instead: the string keeps its last
characters, and the tokens kept are its last (`outputs.causal_lm`). Real text
averages 4-6 characters per token, so the tokens that fit `seq_len` are the
same as without the cut. A longer word is what WordPiece reads as one [UNK]
anyway (as transformers does), and ELMo spells its first 48 bytes anyway;
the words after it are read (a URL's path, a hash or base64 does not hide
the rest of the text).

`serve_ids` takes [B, L] ids with L at most the run's sequence length, checks
them in the graph (0 <= token id < vocabulary size, 0 <= segment id < the
number of segments, padding mask 0 or 1) and refuses others with an
InvalidArgumentError naming the input and the valid range, since an embedding
lookup would silently wrap -1 around to the last row.

`assets.extra/tf_serving_warmup_requests` holds one request per string
signature, which TensorFlow Serving replays before it answers, so the first
client request does not pay for the graph's first run.
"""

import functools
import json

import tensorflow as tf
import tensorflow_text as tf_text

from keras_bertology import __version__
from keras_bertology.atomic import atomic_directory
from keras_bertology.data.packing import WHITESPACE, fit_to_batch
from keras_bertology.tokenizers.bert_text import MAX_BYTES_PER_WORD, WORD_DELIMITER
from keras_bertology.errors import CheckpointError
from keras_bertology.flag_ranges import check_length_buckets
from keras_bertology.export.archive import write_saved_model
from keras_bertology.export.warmup import write_warmup_requests
from keras_bertology.models.registry import get_family
from keras_bertology.outputs import Serving, kinds_of
from keras_bertology.outputs.masked_lm import TOP_K

_STRINGS = tf.TensorSpec([None], tf.string)
CHARS_PER_TOKEN = 16  # 3-4x the average token of real text, so the cut never reaches the first seq_len tokens
# A longer word is read as its first MAX_WORD_CHARS characters: WordPiece makes it [UNK] either way (as
# transformers does), ELMo spells its first 48 bytes either way, and others read a long run's start.
MAX_WORD_CHARS = MAX_BYTES_PER_WORD + 1
# The warm-up requests' values of the scalar inputs, by name (fill_mask_top_k's, generate_sampling's).
WARMUP_SCALARS = {"top_k": TOP_K, "max_new_tokens": 2, "temperature": 1.0, "seed": 0}


def export_saved_model(run, export_dir, length_buckets=(), xla=False):
    """Write `run` (a `runs.RunModel`) as a SavedModel at `export_dir`, atomically; string inputs are
    packed to the batch's longest, rounded up to one of `length_buckets` when given. `xla` compiles the
    model's part of every endpoint (not the tokenizer's, which XLA cannot) once per input shape."""
    if run.tokenizer is None:
        raise CheckpointError(
            "this run has no in-graph tokenizer, so its SavedModel could not take raw strings; "
            "convert a Hugging Face folder that ships its tokenizer (vocab.txt, vocab.json + "
            "merges.txt, or tokenizer.json)"
        )
    backbone, tokenizer, seq_len = run.backbone, run.tokenizer, run.seq_len
    buckets = check_length_buckets(length_buckets, seq_len)
    text_encoder = backbone.text_encoder()  # an encoder-decoder's encoder: what a text alone feeds
    input_names = list(text_encoder.input)
    family = get_family(run.family)
    encoder = compiled(text_encoder, xla)

    def pack_texts(first, second=None):
        packed = family.pack_text(tokenizer, seq_len, first, second)
        return fit_to_batch(packed, packed["padding_mask"], buckets)

    # Traced once each and called by every endpoint: the tokenizer's graph is thousands of ops, and
    # tracing it again per endpoint was most of an export's time.
    pack_one = tf.function(pack_texts, input_signature=[_STRINGS], autograph=False)
    pack_two = tf.function(pack_texts, input_signature=[_STRINGS, _STRINGS], autograph=False)

    def pack(first, second=None):
        return pack_one(first) if second is None else pack_two(first, second)

    def encode(first, second=None):
        packed = pack(first, second)
        outputs = encoder({name: packed[name] for name in input_names})
        outputs = {name: tf.cast(value, tf.float32) for name, value in outputs.items()}
        return backbone.served_outputs(outputs, packed)

    endpoints = {"serve": (lambda text: encode(text), [_STRINGS]),
                 "serve_ids": ids_endpoint(text_encoder, seq_len, encoder, backbone.input_limits())}
    if "segment_ids" in input_names:
        endpoints["serve_pairs"] = (encode, [_STRINGS, _STRINGS])
    serving = Serving(run.pretrainer, tokenizer, seq_len, input_names, buckets, pack, encoder,
                      lambda model: compiled(model, xla), endpoints["serve"], _STRINGS)
    parts = [part for part in (kind.endpoints(serving) for kind in kinds_of(run.pretrainer)) if part is not None]
    for part in parts:
        endpoints.update(part.functions)
    from_end = [name for part in parts if part.keep_text_end for name in part.functions]
    endpoints = cut_text_inputs(endpoints, seq_len, from_end=from_end)
    signatures = list(endpoints)
    specials = {f"{role}_token": tokenizer.vocabulary[getattr(tokenizer, f"{role}_id")]
                for role in ("mask", "eot") if tokenizer.has_role(role)}
    with atomic_directory(export_dir) as staging:
        served_models = [part.model for part in parts if part.model is not None] or [backbone]
        outputs = write_saved_model(staging, [*served_models, tokenizer], endpoints)
        (staging / "assets").mkdir(exist_ok=True)
        (staging / "assets" / "bertology.json").write_text(
            json.dumps({"bertology_version": __version__, "family": run.family, "preset": run.preset, "seq_len": seq_len,
                        "length_buckets": list(buckets), "xla": xla,
                        "vocab_size": tokenizer.vocab_size,
                        **({"mask_id": tokenizer.mask_id} if tokenizer.has_role("mask") else {}), **specials,
                        "max_text_chars": CHARS_PER_TOKEN * seq_len, "max_word_chars": MAX_WORD_CHARS,
                        **({"context_output": backbone.context_output} if backbone.context_output else {}),
                        "signatures": signatures,
                        "serve_outputs": outputs["serve"]},
                       indent=2)
        )
        write_warmup_requests(staging, endpoints, _warmup_text(tokenizer), WARMUP_SCALARS)
    return export_dir


def _warmup_text(tokenizer):
    """A request string for the warm-up file: two words and the mask token where the vocabulary has one."""
    return f"warm up {tokenizer.vocabulary[tokenizer.mask_id]} request" if tokenizer.has_role("mask") \
        else "warm up request"


def compiled(model, xla):
    """`inputs -> model(inputs, training=False)`, compiled by XLA (once per input shape) when `xla`.
    Measured on 2 CPU cores, BERT-Mini's encoder: 4.0 -> 2.5 ms for one short input, 34 -> 24 ms for 32."""
    def call(inputs):
        return model(inputs, training=False)

    # Without XLA still a function of its own, traced once for all the endpoints that call it.
    return tf.function(call, jit_compile=xla or None, autograph=False, reduce_retracing=True)


def ids_endpoint(model, seq_len, run_model, limits=None):
    """(function, input signature) serving `model` on pre-tokenized inputs: one [B, L, ...] int32 tensor per
    model input (L <= seq_len, trailing sizes as the model's: ELMo's 50 characters a word), named like it
    (token_ids, padding_mask, ...), for clients that tokenize themselves. `run_model` is
    `compiled(model, xla)`, the one the string endpoints call: one trace of the model serves them all.
    `limits` (by default the backbone's `input_limits`) bound the ids each input may hold."""
    names = list(model.input)
    specs = [tf.TensorSpec([None, None, *model.input[name].shape[2:]], tf.int32, name=name) for name in names]

    limits = limits or getattr(model, "backbone", model).input_limits()

    def serve_ids(*inputs):
        length = tf.shape(inputs[0])[1]
        checks = [tf.debugging.Assert(length <= seq_len, [f"serve_ids: inputs hold at most {seq_len} tokens; got",
                                                          length])]
        checks += [_check_range(value, name, limits[name])
                   for name, value in zip(names, inputs) if name in limits]
        with tf.control_dependencies(checks):
            inputs = [tf.identity(value) for value in inputs]
        outputs = run_model(dict(zip(names, inputs)))
        return tf.nest.map_structure(lambda value: tf.cast(value, tf.float32), outputs)

    return serve_ids, specs


def _check_range(value, name, limit):
    """An assert that every value of `value` lies in [0, limit)."""
    valid = tf.reduce_all((value >= 0) & (value < limit))
    allowed = "0 or 1" if name == "padding_mask" else f"in [0, {limit})"
    return tf.debugging.Assert(valid, [f"serve_ids: every {name} value must be {allowed}"])


def cut_text_inputs(endpoints, seq_len, from_end=()):
    """`endpoints` with every string input cut before tokenizing, so a request costs at most its token budget;
    the endpoints named in `from_end` (a causal LM's prompts, whose end is what it continues) keep the end of
    a text, the others its start."""
    # Traced once for each side kept and called by every endpoint: the cut's string graph, traced again per
    # endpoint, was a third of an export's time.
    cuts = {keep_end: tf.function(functools.partial(cut_text, seq_len=seq_len, keep_end=keep_end),
                                  input_signature=[_STRINGS], autograph=False) for keep_end in (False, True)}

    def cut_inputs(function, keep_end):
        @functools.wraps(function)
        def cut(*inputs):
            return function(*(cuts[keep_end](value) if value.dtype == tf.string else value for value in inputs))
        return cut

    return {name: (cut_inputs(function, name in from_end), specs) for name, (function, specs) in endpoints.items()}


def cut_text(text, seq_len, keep_end=False):
    """Strings [B], each word cut to its first MAX_WORD_CHARS characters (see `cut_words`), then the text to
    its first (or with `keep_end` its last) `CHARS_PER_TOKEN * seq_len` UTF-8 characters, less the word the
    cut splits, whose pieces could differ from the whole word's (a text that is one huge word is kept, cut)."""
    text = cut_words(text)
    max_chars = CHARS_PER_TOKEN * seq_len
    length = tf.strings.length(text, unit="UTF8_CHAR")
    start = tf.maximum(length - max_chars, 0) if keep_end else tf.zeros_like(length)
    # The bound's characters and the one beside them, outside the bound (when the text runs past it).
    side = tf.where(start > 0, 1, 0) if keep_end else tf.zeros_like(length)
    window = tf.strings.substr(text, start - side, tf.fill(tf.shape(length), max_chars + 1), unit="UTF8_CHAR")
    cut = tf.strings.substr(window, side, tf.fill(tf.shape(length), max_chars), unit="UTF8_CHAR")
    word, space = f"[^{WHITESPACE}]", f"[{WHITESPACE}]"
    # The cut splits a word when the characters either side of it are both non-space.
    if keep_end:
        splits_word = (start > 0) & tf.strings.regex_full_match(window, f"(?s){word}{word}.*")
        return tf.where(splits_word, tf.strings.regex_replace(cut, f"^{word}+({space})", r"\1"), cut)
    splits_word = (length > max_chars) & tf.strings.regex_full_match(window, f"(?s).*{word}{word}")
    return tf.where(splits_word, tf.strings.regex_replace(cut, f"{space}{word}*$", ""), cut)


def cut_words(text):
    """Strings [B] with each word (a run of characters between `WORD_DELIMITER`s) cut to its first
    MAX_WORD_CHARS characters: the words after a long one (a URL's path, a hash, base64) are read, as by a
    tokenizer of the whole text."""
    # regex_split reads a string only up to a NUL byte: the runs between NULs are split, then joined back.
    runs = tf.strings.split(text, sep="\x00")
    pieces = tf_text.regex_split(runs.flat_values, WORD_DELIMITER, WORD_DELIMITER)  # words and what is between
    cut = tf.strings.reduce_join(tf.strings.substr(pieces, 0, MAX_WORD_CHARS, unit="UTF8_CHAR"), axis=-1)
    # Each run followed by a NUL (reduce_join's separator cannot be one), and the last one dropped.
    joined = tf.strings.reduce_join(runs.with_flat_values(tf.strings.join([cut, "\x00"])), axis=-1)
    length = tf.strings.length(joined)
    return tf.strings.substr(joined, tf.zeros_like(length), length - 1)
