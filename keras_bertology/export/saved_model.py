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
"""

import json

import tensorflow as tf

from keras_bertology.atomic import atomic_directory
from keras_bertology.export.archive import write_saved_model
from keras_bertology.errors import CheckpointError
from keras_bertology.models.registry import get_family

_STRINGS = tf.TensorSpec([None], tf.string)


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
    signatures = list(endpoints)
    with atomic_directory(export_dir) as staging:
        write_saved_model(staging, [backbone if masked_lm is None else masked_lm, tokenizer], endpoints)
        (staging / "assets").mkdir(exist_ok=True)
        (staging / "assets" / "bertology.json").write_text(
            json.dumps({"family": run.family, "preset": run.preset, "seq_len": seq_len,
                        "vocab_size": tokenizer.vocab_size, "mask_id": tokenizer.mask_id,
                        "mask_token": tokenizer.vocabulary[tokenizer.mask_id],
                        "signatures": signatures,
                        "serve_outputs": sorted([*backbone.output, "token_ids", "segment_ids", "padding_mask"])}, indent=2)
        )
    return export_dir


def ids_endpoint(model, seq_len):
    """(function, input signature) serving `model` on pre-tokenized inputs: one [B, seq_len] int32 tensor per
    model input, named like it (token_ids, padding_mask, ...), for clients that tokenize themselves."""
    names = list(model.input)
    specs = [tf.TensorSpec([None, seq_len], tf.int32, name=name) for name in names]

    def serve_ids(*inputs):
        outputs = model(dict(zip(names, inputs)), training=False)
        return tf.nest.map_structure(lambda value: tf.cast(value, tf.float32), outputs)

    return serve_ids, specs


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
