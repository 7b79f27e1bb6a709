"""`bertology export FINETUNE_DIR --format onnx`: a fine-tuned task model as an ONNX model on token ids
(`export.onnx`), and where its tokenizer has ONNX operators, its string model: a classifier's texts (or text
pairs) packed as the family packs them, a tagger's words (`export.onnx_words`), an answer model's question beside
its context's words (`export.onnx_answers`), each checked against the SavedModel's own computation of the same
texts."""

import json
from pathlib import Path
from types import SimpleNamespace

import tensorflow as tf

from keras_bertology.errors import BertologyError, ConfigError
from keras_bertology.export import onnx_answers, onnx_text, onnx_words
from keras_bertology.export.onnx import PackedText, check_batches, export_model_onnx
from keras_bertology.export.saved_model import cut_text
from keras_bertology.finetune import encoding
from keras_bertology.finetune.tasks import TASK_KINDS, fit_with_word_map
from keras_bertology.keras_archives import load_keras_archive
from keras_bertology.models.registry import get_family
from keras_bertology.runs import load_run_tokenizer
from keras_bertology.tokenizers.base import is_utf8


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
    """The string model form (`PackedText`, `TaggedWords`, `AnsweredQuestions`) of a fine-tuned model, its
    tokenizer read from the run it was tuned from, or why it has none."""
    source = results["encoder"]["from"]
    try:
        tokenizer = load_run_tokenizer(source)
    except (BertologyError, OSError):
        tokenizer = None
    if tokenizer is None:
        return f"the tokenizer of the run it was tuned from ({source}) cannot be read"
    return STRING_MODEL_FORMS[results["kind"]](get_family(results["encoder"]["family"]), tokenizer, results)


class _WordsForm:
    """What the string models of a task on words share: the family's own layout (`encoding` packs with
    `family.pack_segments`, whatever layout the tokenizer records) and the SavedModel's endpoint to check
    against."""

    kind = endpoint = ""

    def __init__(self, family, tokenizer, results):
        self.family, self.tokenizer, self.labels = family, tokenizer, list(results["labels"])

    def layout(self, pairs=False):
        return onnx_text.text_layout(self.family, self.tokenizer, pairs, own_layout=True)

    def served(self, traced, names, seq_len, inputs, output=None):
        """The SavedModel's `endpoint` on the cut strings `inputs` (the export's cut: `saved_model.cut_text`), the
        model being `traced` (its output named `output`, or all of them), and beside its outputs the model's own
        on the ids the endpoint packed (the model runs once)."""
        outputs = {}

        def run_model(packed):
            outputs.update(traced(*[packed[name] for name in names]))
            return outputs if output is None else outputs[output]

        endpoints = TASK_KINDS[self.kind].endpoints(SimpleNamespace(input=names), SimpleNamespace(labels=self.labels),
                                                    self.family, self.tokenizer, seq_len, (), run_model)
        served = endpoints[self.endpoint][0](*inputs)
        return {name: value.numpy() for name, value in {**outputs, **served}.items()}

    @staticmethod
    def laid_out(packed, word_map):
        """LAID_OUT and WORD_MAP of the SavedModel's packing, cut to the batch's longest (as its endpoint cuts)."""
        packed, word_map = fit_with_word_map(packed, word_map, ())
        return {name: packed[name].numpy() for name in onnx_text.LAID_OUT} | {onnx_words.WORD_MAP: word_map.numpy()}


class TaggedWords(_WordsForm):
    """The string model of a tagger (`onnx_words`): a tag per whitespace word, as the SavedModel's `tag`."""

    kind, endpoint = "tagging", "tag"

    def build(self, ids_model, seq_len):
        return onnx_words.tagger_text_model(ids_model, self.tokenizer, self.layout(), seq_len, self.labels)

    def batches(self, seq_len):
        texts = [text for text in onnx_text.check_texts(self.tokenizer, seq_len) if is_utf8(text)]
        return check_batches({onnx_text.TEXT_INPUT: texts})

    def expected(self, traced, names, seq_len, batch):
        texts = cut_text(tf.constant(batch[onnx_text.TEXT_INPUT]), seq_len)
        packed, word_map = encoding.encode_words(self.family, self.tokenizer, seq_len, encoding.split_words(texts))
        return self.laid_out(packed, word_map) | self.served(traced, names, seq_len, [texts], "logits")


class AnsweredQuestions(_WordsForm):
    """The string model of an answer model (`onnx_answers`): a question and a context in, the answer (the
    context's words of the best span) and its score out, as the SavedModel's `answer`."""

    kind, endpoint = "spans", "answer"

    def build(self, ids_model, seq_len):
        return onnx_answers.answer_text_model(ids_model, self.tokenizer, self.layout(pairs=True), seq_len,
                                              TASK_KINDS[self.kind].max_answer_pieces)

    def batches(self, seq_len):
        pairs = [pair for pair in zip(*onnx_text.check_pairs(self.tokenizer, seq_len)) if is_utf8(pair[1])]
        return check_batches(dict(zip(onnx_answers.ANSWER_INPUTS, map(list, zip(*pairs)))))

    def expected(self, traced, names, seq_len, batch):
        questions, contexts = (cut_text(tf.constant(batch[name]), seq_len) for name in onnx_answers.ANSWER_INPUTS)
        packed, _, word_map = encoding.encode_question_context(self.family, self.tokenizer, seq_len, questions,
                                                               contexts)
        return self.laid_out(packed, word_map) | self.served(traced, names, seq_len, [questions, contexts])


# The string model's form of each task kind (`tasks.TASK_KINDS`).
STRING_MODEL_FORMS = {
    "classification": lambda family, tokenizer, results: PackedText(family, tokenizer, bool(results.get("pairs"))),
    "tagging": TaggedWords, "spans": AnsweredQuestions}
