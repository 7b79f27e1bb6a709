"""SavedModel export of a fine-tuned task model, raw strings in, labels and probabilities out.

    import tensorflow as tf, tensorflow_text  # noqa: F401
    model = tf.saved_model.load("savedmodels/NAME")
    model.classify(tf.constant(["a text"]))           # {"label", "label_id", "probabilities"}
    model.classify_pairs(tf.constant(["a"]), tf.constant(["b"]))
    model.tag(tf.constant(["words split at spaces"]))  # {"tags", "words", "scores"} per word
    model.answer(tf.constant(["question"]), tf.constant(["context"]))  # {"answer", "score"}
    model.signatures["serve_ids"](token_ids=ids, padding_mask=mask, ...)  # pre-tokenized -> logits

Which signature a model has follows from its task (see assets/bertology.json);
the first is also `serving_default`. The tokenizer runs inside the graph.
As in `export.saved_model`, a batch is packed to its longest input (or the
smallest of `length_buckets` that holds it), strings are cut to
`max_text_chars` characters (16 per token of `seq_len`), each word to
`max_word_chars`, before tokenizing, so `tag` returns the words within that
bound, `serve_ids` takes [B, L <= seq_len]
ids and refuses ids outside their tables, and TensorFlow Serving's warm-up
requests are in `assets.extra/`.
"""

import json

from keras_bertology import __version__
from keras_bertology.atomic import atomic_directory
from keras_bertology.export.archive import write_saved_model
from keras_bertology.export.saved_model import (CHARS_PER_TOKEN, MAX_WORD_CHARS, compiled, cut_text_inputs,
                                                ids_endpoint)
from keras_bertology.flag_ranges import check_length_buckets
from keras_bertology.export.warmup import write_warmup_requests


def export_task_model(model, kind, task, family, tokenizer, seq_len, export_dir, length_buckets=(), xla=False):
    """Write `model` (a task model of `kind`, see `finetune.tasks`) as a SavedModel at `export_dir`, atomically;
    string inputs are packed to the batch's longest, rounded up to one of `length_buckets` when given; `xla`
    compiles the model's part of every endpoint."""
    buckets = check_length_buckets(length_buckets, seq_len)
    run_model = compiled(model, xla)  # traced once for every endpoint
    endpoints = cut_text_inputs(kind.endpoints(model, task, family, tokenizer, seq_len, buckets, run_model), seq_len)
    endpoints["serve_ids"] = ids_endpoint(model, seq_len, run_model)
    with atomic_directory(export_dir) as staging:
        write_saved_model(staging, [model, tokenizer], endpoints)
        (staging / "assets").mkdir(exist_ok=True)
        (staging / "assets" / "bertology.json").write_text(json.dumps({
            "bertology_version": __version__, "task": task.name, "kind": task.kind, "family": family.name, "seq_len": seq_len,
            "length_buckets": list(buckets), "xla": xla, "max_text_chars": CHARS_PER_TOKEN * seq_len,
            "max_word_chars": MAX_WORD_CHARS, "labels": list(task.labels), "signatures": list(endpoints)}, indent=2))
        write_warmup_requests(staging, endpoints, "warm up request")
    return export_dir
