"""`bertology export FINETUNE_DIR --format onnx`: a fine-tuned task model as an ONNX model on token ids
(`export.onnx`), and where its task kind has a string form and its tokenizer ONNX operators, its string model:
a classifier's texts (or text pairs) packed as the family packs them, a tagger's words (`export.onnx_words`),
each checked against the SavedModel's own computation of the same texts."""

import json
from pathlib import Path
from types import SimpleNamespace

import tensorflow as tf

from keras_bertology.errors import BertologyError, ConfigError
from keras_bertology.export import onnx_text, onnx_words
from keras_bertology.export.onnx import PackedText, check_batches, export_model_onnx
from keras_bertology.export.saved_model import cut_text
from keras_bertology.finetune import encoding
from keras_bertology.finetune.tasks import TASK_KINDS, fit_with_word_map
from keras_bertology.keras_archives import load_keras_archive
from keras_bertology.models.registry import get_family
from keras_bertology.runs import load_run_tokenizer


def export_task_onnx(folder, out_dir, quantize=None):
    """Write the task model `bertology finetune` left in `folder` (model.keras, results.json) as
    `out_dir`/model.onnx, its logits for the labels that onnx.json lists in order (and with `quantize` its
    quantized model); returns the description."""
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text())
    if not (folder / "model.keras").is_file():
        raise ConfigError(f"{folder} holds no model.keras (fine-tuned with --results-only): nothing to export")
    model = load_keras_archive(folder / "model.keras")
    backbone = getattr(model, "backbone", model)
    beyond_text = sorted(set(model.input) - set(backbone.text_encoder().input))
    if beyond_text:  # a decoder's inputs: the model generates text, a loop of calls rather than one forward pass
        raise ConfigError(f"this {results['kind']} model also takes {', '.join(beyond_text)}: it generates text, "
                          "which the ONNX export does not cover; serve its SavedModel")
    limits = backbone.input_limits()
    details = {"family": results["encoder"]["family"], "task": results["task"], "kind": results["kind"],
               "labels": results["labels"]}
    return export_model_onnx(model, limits, results["recipe"]["seq_len"], out_dir, details,
                             f"this {results['kind']} model of {results['encoder']['family']}", quantize,
                             _tuned_text(results))


def _tuned_text(results):
    """The string model form (`PackedText`, `TaggedWords`) of a fine-tuned model, its tokenizer read from the
    run it was tuned from, or why it has none."""
    form = STRING_MODEL_FORMS.get(results["kind"])
    if form is None:
        return f"a {results['kind']} model has no string model yet ({' and '.join(STRING_MODEL_FORMS)} have)"
    source = results["encoder"]["from"]
    try:
        tokenizer = load_run_tokenizer(source)
    except (BertologyError, OSError):
        tokenizer = None
    if tokenizer is None:
        return f"the tokenizer of the run it was tuned from ({source}) cannot be read"
    return form(get_family(results["encoder"]["family"]), tokenizer, results)


class TaggedWords:
    """The string model of a tagger (`onnx_words`): a tag per whitespace word, as the SavedModel's `tag`."""

    def __init__(self, family, tokenizer, results):
        self.family, self.tokenizer, self.labels = family, tokenizer, list(results["labels"])

    def build(self, ids_model, seq_len):
        return onnx_words.tagger_text_model(ids_model, self.tokenizer, onnx_text.text_layout(self.family,
                                                                                             self.tokenizer),
                                            seq_len, self.labels)

    def batches(self, seq_len):
        return check_batches({onnx_text.TEXT_INPUT: onnx_text.check_texts(self.tokenizer, seq_len)})

    def expected(self, traced, names, seq_len, batch):
        texts = cut_text(tf.constant(batch[onnx_text.TEXT_INPUT]), seq_len)
        packed, word_map = fit_with_word_map(*encoding.encode_words(self.family, self.tokenizer, seq_len,
                                                                    encoding.split_words(texts)), ())
        kind = TASK_KINDS["tagging"]
        tag = kind.endpoints(SimpleNamespace(input=names), SimpleNamespace(labels=self.labels), self.family,
                             self.tokenizer, seq_len, (), lambda inputs: traced(*[inputs[name] for name in names])
                             ["logits"])["tag"][0]
        outputs = {name: value.numpy() for name, value in tag(texts).items()}
        logits = traced(*[packed[name] for name in names])["logits"].numpy()
        laid_out = {name: packed[name].numpy() for name in onnx_text.LAID_OUT}
        return laid_out | {onnx_words.WORD_MAP: word_map.numpy(), "logits": logits} | outputs


# The string model's form of each task kind that has one (`tasks.TASK_KINDS`); an answer model's
# question beside its context's words is not written as ONNX operators yet.
STRING_MODEL_FORMS = {
    "classification": lambda family, tokenizer, results: PackedText(family, tokenizer, bool(results.get("pairs"))),
    "tagging": TaggedWords}
