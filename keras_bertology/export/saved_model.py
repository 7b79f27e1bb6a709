"""SavedModel export with the tokenizer inside the graph.

The exported signatures take raw strings, so a server needs nothing but
TensorFlow and tensorflow-text (imported before loading, which registers the
tokenizer ops):

    import tensorflow as tf, tensorflow_text  # noqa: F401
    model = tf.saved_model.load("savedmodels/NAME")
    model.serve(tf.constant(["a sentence"]))                  # encoder outputs
    model.serve_pairs(tf.constant(["first"]), tf.constant(["second"]))
    model.mlm(tf.constant(["a [MASK] sentence"]))              # MLM logits, every position
    model.signatures["serve_ids"](token_ids=ids, padding_mask=mask, ...)  # pre-tokenized, [B, seq_len] int32

`serving_default` is `serve`. Every input is packed to the run's sequence
length (longer texts are truncated, longest segment first); the literal mask
token ("[MASK]" or "<mask>", see assets/bertology.json) becomes the mask id.

Request cost is bounded by the token budget: before tokenizing, every string
is cut to its first `CHARS_PER_TOKEN * seq_len` UTF-8 characters (at most 4
bytes each; `max_text_chars` in assets/bertology.json), and a word the cut
splits is dropped. Real text averages 4-6 characters per token, so the tokens
that fit `seq_len` are the same as without the cut; text past the bound is
never read, even when all before it is whitespace.

`serve_ids` checks its inputs in the graph (0 <= token id < vocabulary size,
0 <= segment id < the number of segments, padding mask 0 or 1) and refuses
others with an InvalidArgumentError naming the input and the valid range, since
an embedding lookup would silently wrap -1 around to the last row.
"""

import functools
import json

import tensorflow as tf

from keras_bertology.atomic import atomic_directory
from keras_bertology.export.archive import write_saved_model
from keras_bertology.errors import CheckpointError
from keras_bertology.models.registry import get_family

_STRINGS = tf.TensorSpec([None], tf.string)
CHARS_PER_TOKEN = 16  # 3-4x the average token of real text, so the cut never reaches the first seq_len tokens


def export_saved_model(run, export_dir):
    """Write `run` (a `runs.RunModel`) as a SavedModel at `export_dir`, atomically."""
    if run.tokenizer is None:
        raise CheckpointError(
            "this run has no in-graph tokenizer, so its SavedModel could not take raw strings; "
            "convert a Hugging Face folder that ships its tokenizer (vocab.txt, vocab.json + "
            "merges.txt, or tokenizer.json)"
        )
    backbone, tokenizer, seq_len = run.backbone, run.tokenizer, run.seq_len
    input_names = list(backbone.input)
    family = get_family(run.family)

    def encode(first, second=None):
        packed = family.pack_text(tokenizer, seq_len, first, second)
        outputs = backbone({name: packed[name] for name in input_names}, training=False)
        outputs = {name: tf.cast(value, tf.float32) for name, value in outputs.items()}
        return dict(outputs, **packed)

    masked_lm = run.pretrainer.masked_lm_model(tokenizer.mask_id) if run.pretrainer is not None else None
    endpoints = {"serve": (lambda text: encode(text), [_STRINGS]), "serve_ids": ids_endpoint(backbone, seq_len)}
    if "segment_ids" in input_names:
        endpoints["serve_pairs"] = (encode, [_STRINGS, _STRINGS])
    if masked_lm is not None:
        endpoints["mlm"] = (_mlm_endpoint(run, family, masked_lm), [_STRINGS])
    endpoints = cut_text_inputs(endpoints, seq_len)
    signatures = list(endpoints)
    with atomic_directory(export_dir) as staging:
        write_saved_model(staging, [backbone if masked_lm is None else masked_lm, tokenizer], endpoints)
        (staging / "assets").mkdir(exist_ok=True)
        (staging / "assets" / "bertology.json").write_text(
            json.dumps({"family": run.family, "preset": run.preset, "seq_len": seq_len,
                        "vocab_size": tokenizer.vocab_size, "mask_id": tokenizer.mask_id,
                        "mask_token": tokenizer.vocabulary[tokenizer.mask_id],
                        "max_text_chars": CHARS_PER_TOKEN * seq_len,
                        "signatures": signatures,
                        "serve_outputs": sorted([*backbone.output, "token_ids", "segment_ids", "padding_mask"])}, indent=2)
        )
    return export_dir


def ids_endpoint(model, seq_len):
    """(function, input signature) serving `model` on pre-tokenized inputs: one [B, seq_len] int32 tensor per
    model input, named like it (token_ids, padding_mask, ...), for clients that tokenize themselves."""
    names = list(model.input)
    specs = [tf.TensorSpec([None, seq_len], tf.int32, name=name) for name in names]

    limits = _id_limits(model)

    def serve_ids(*inputs):
        checks = [_check_range(value, name, limits[name])
                  for name, value in zip(names, inputs) if name in limits]
        with tf.control_dependencies(checks):
            inputs = [tf.identity(value) for value in inputs]
        outputs = model(dict(zip(names, inputs)), training=False)
        return tf.nest.map_structure(lambda value: tf.cast(value, tf.float32), outputs)

    return serve_ids, specs


def _id_limits(model):
    """{input name: exclusive upper bound} of the id inputs that index a table (XLNet only compares segments)."""
    config = getattr(model, "backbone", model).get_config()
    limits = {"token_ids": config["vocab_size"], "padding_mask": 2}
    if config.get("num_segments"):
        limits["segment_ids"] = config["num_segments"]
    return limits


def _check_range(value, name, limit):
    """An assert that every value of `value` lies in [0, limit)."""
    valid = tf.reduce_all((value >= 0) & (value < limit))
    allowed = "0 or 1" if name == "padding_mask" else f"in [0, {limit})"
    return tf.debugging.Assert(valid, [f"serve_ids: every {name} value must be {allowed}"])


def cut_text_inputs(endpoints, seq_len):
    """`endpoints` with every string input cut before tokenizing, so a request costs at most its token budget."""
    def cut_inputs(function):
        @functools.wraps(function)
        def cut(*inputs):
            return function(*(cut_text(value, seq_len) if value.dtype == tf.string else value for value in inputs))
        return cut

    return {name: (cut_inputs(function), specs) for name, (function, specs) in endpoints.items()}


def cut_text(text, seq_len):
    """Strings [B] cut to `CHARS_PER_TOKEN * seq_len` UTF-8 characters, less the word the cut splits, whose
    pieces could differ from the whole word's (a string that is one huge word is kept, cut)."""
    max_chars = CHARS_PER_TOKEN * seq_len
    head = tf.strings.substr(text, 0, max_chars + 1, unit="UTF8_CHAR")
    cut = tf.strings.substr(head, 0, max_chars, unit="UTF8_CHAR")
    # The cut splits a word when the characters either side of it are both non-space.
    splits_word = (tf.strings.length(head, unit="UTF8_CHAR") > max_chars) & \
        tf.strings.regex_full_match(head, r"(?s).*\S\S")
    return tf.where(splits_word, tf.strings.regex_replace(cut, r"\s\S*$", ""), cut)


def _mlm_endpoint(run, family, masked_lm):
    """Raw strings -> MLM logits at every position [B, seq_len, V]."""
    tokenizer, seq_len = run.tokenizer, run.seq_len

    def mlm(text):
        packed = family.pack_text(tokenizer, seq_len, text)
        batch = tf.shape(packed["token_ids"])[0]
        positions = tf.tile(tf.range(seq_len)[None, :], [batch, 1])
        inputs = {name: packed[name] for name in run.backbone.input}
        logits = masked_lm(dict(inputs, mask_positions=positions), training=False)
        return dict(logits=logits, **packed)

    return mlm
