"""Task kinds: how each kind of labeled data becomes arrays, a model, predictions, scores and serving.

A kind is an entry of `TASK_KINDS` keyed by `TaskData.kind`; the fine-tuning
loop and the export only call these methods, so a new kind of task is a new
class here, and every family gets it through its backbone and packer.
"""

import numpy as np
import tensorflow as tf

from keras_bertology.data.packing import fit_to_batch
from keras_bertology.finetune import encoding, metrics
from keras_bertology.models.task_models import SequenceClassifier, SpanExtractor, TokenClassifier
from keras_bertology.models.pretrainer import sparse_cross_entropy

_ENCODE_BATCH = 512
_STRINGS = tf.TensorSpec([None], tf.string)


def in_batches(examples, encode):
    """Run `encode(list of examples) -> dict of tensors` over slices and concatenate as NumPy."""
    parts = [encode(examples[start:start + _ENCODE_BATCH]) for start in range(0, len(examples), _ENCODE_BATCH)]
    return {key: np.concatenate([np.asarray(part[key]) for part in parts]) for key in parts[0]}


class TaskKind:
    """One kind of task. `encode` returns {"inputs", "targets", "weights"} (NumPy, keyed as the model's
    inputs and outputs); `predict` returns one prediction per example in the data's own terms."""

    name = ""
    primary_metric = ""
    generates = False  # True: the model is a seq2seq pretrainer whose decoder writes the answers

    def encode(self, task, examples, family, tokenizer, seq_len, input_names):
        """The examples as arrays; "inputs" holds exactly `input_names` (the backbone's inputs: a Keras
        model fed a dict with extra keys would match its inputs by position, not by name)."""
        encoded = self._encode(task, examples, family, tokenizer, seq_len)
        encoded["inputs"] = {name: encoded["inputs"][name] for name in input_names}
        return encoded

    def _encode(self, task, examples, family, tokenizer, seq_len):
        raise NotImplementedError

    def build_model(self, backbone, task, family, summary=None):
        """The task model on `backbone`; `summary` (a sequence-level task's) replaces the family's
        summary position."""
        raise NotImplementedError

    def loss(self):
        return sparse_cross_entropy()

    def predict(self, model, encoded, task, examples, batch_size):
        raise NotImplementedError

    def score(self, task, examples, predictions):
        raise NotImplementedError

    def endpoints(self, model, task, family, tokenizer, seq_len, buckets, compiled_model):
        """{signature name: (function, input signature)} for the SavedModel; the first is the default.
        Inputs are packed to the batch's longest (`data.packing.fit_to_batch`, with `buckets`); `compiled_model` is
        `export.saved_model.compiled(model, xla)`, which every endpoint of the export shares."""
        raise NotImplementedError


class Classification(TaskKind):
    """One label per text or text pair: [CLS]/<cls> summary, accuracy and macro-F1."""

    name = "classification"
    primary_metric = "macro_f1"

    def _encode(self, task, examples, family, tokenizer, seq_len):
        def encode(batch):
            second = tf.constant([e["text_b"] for e in batch]) if task.pairs else None
            return encoding.encode_texts(family, tokenizer, seq_len, tf.constant([e["text"] for e in batch]), second)

        inputs = in_batches(examples, encode)
        index = {label: i for i, label in enumerate(task.labels)}
        targets = np.array([index[e["label"]] for e in examples], np.int32)
        return {"inputs": inputs, "targets": targets, "weights": np.ones(len(examples), np.float32)}

    def build_model(self, backbone, task, family, summary=None):
        return SequenceClassifier(backbone, len(task.labels), summary=summary or family.inputs.summary_position)

    def predict(self, model, encoded, task, examples, batch_size):
        logits = model.predict(encoded["inputs"], batch_size=batch_size, verbose=0)
        return [task.labels[i] for i in np.argmax(logits, axis=-1)]

    def score(self, task, examples, predictions):
        gold = [e["label"] for e in examples]
        return {"accuracy": metrics.accuracy(gold, predictions), "macro_f1": metrics.macro_f1(gold, predictions)}

    def endpoints(self, model, task, family, tokenizer, seq_len, buckets, compiled_model):
        labels, run_model = tf.constant(list(task.labels)), _runner(model, compiled_model)

        def classify(text, text_b=None):
            inputs = encoding.encode_texts(family, tokenizer, seq_len, text, text_b)
            inputs = fit_to_batch(inputs, inputs["padding_mask"], buckets)
            probabilities = tf.nn.softmax(tf.cast(run_model(inputs), tf.float32))
            best = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
            return {"label": tf.gather(labels, best), "label_id": best, "probabilities": probabilities}

        if task.pairs:
            return {"classify_pairs": (classify, [_STRINGS, _STRINGS])}
        return {"classify": (lambda text: classify(text), [_STRINGS])}


class Tagging(TaskKind):
    """One BIO tag per whitespace word, trained and predicted on each word's first piece; entity F1."""

    name = "tagging"
    primary_metric = "f1"

    def _encode(self, task, examples, family, tokenizer, seq_len):
        index = {tag: i for i, tag in enumerate(task.labels)}

        def encode(batch):
            words = tf.ragged.constant([e["words"] for e in batch], dtype=tf.string)
            inputs, word_map = encoding.encode_words(family, tokenizer, seq_len, words)
            tags = tf.ragged.constant([[index[t] for t in e["tags"]] for e in batch], dtype=tf.int32)
            position_tags = tf.gather(tags, tf.maximum(word_map, 0), batch_dims=1)
            return dict(inputs, word_map=word_map, targets=tf.where(word_map >= 0, position_tags, -1))

        arrays = in_batches(examples, encode)
        targets, word_map = arrays.pop("targets"), arrays.pop("word_map")
        return {"inputs": arrays, "targets": np.maximum(targets, 0), "weights": (targets >= 0).astype(np.float32),
                "word_map": word_map}

    def build_model(self, backbone, task, family, summary=None):
        return TokenClassifier(backbone, len(task.labels))

    def predict(self, model, encoded, task, examples, batch_size):
        logits = model.predict(encoded["inputs"], batch_size=batch_size, verbose=0)
        best = np.argmax(logits, axis=-1)
        predictions = []
        for row, example in enumerate(examples):
            tags = ["O"] * len(example["words"])
            for position in np.flatnonzero(encoded["word_map"][row] >= 0):
                tags[encoded["word_map"][row, position]] = task.labels[best[row, position]]
            predictions.append(tags)
        return predictions

    def score(self, task, examples, predictions):
        gold = [e["tags"] for e in examples]
        flat_gold = [t for tags in gold for t in tags]
        flat_predicted = [t for tags in predictions for t in tags]
        return dict(metrics.entity_scores(gold, predictions), accuracy=metrics.accuracy(flat_gold, flat_predicted))

    def endpoints(self, model, task, family, tokenizer, seq_len, buckets, compiled_model):
        labels, run_model = tf.constant(list(task.labels)), _runner(model, compiled_model)
        outside = task.labels.index("O")

        def tag(text):
            words = encoding.split_words(text)
            inputs, word_map = fit_with_word_map(*encoding.encode_words(family, tokenizer, seq_len, words), buckets)
            probabilities = tf.nn.softmax(tf.cast(run_model(inputs), tf.float32))
            num_words = tf.cast(tf.reduce_max(tf.concat([words.row_lengths(), [0]], 0)), tf.int32)
            best = encoding.word_predictions(tf.argmax(probabilities, -1, output_type=tf.int32), word_map,
                                             num_words, outside)
            score = encoding.word_predictions(tf.reduce_max(probabilities, -1), word_map, num_words, 0.0)
            present = tf.sequence_mask(words.row_lengths(), num_words)
            return {"tags": tf.where(present, tf.gather(labels, best), ""),
                    "words": words.to_tensor(default_value=""),
                    "scores": tf.where(present, score, 0.0)}

        return {"tag": (tag, [_STRINGS])}


class SpanExtraction(TaskKind):
    """An answer span in a context for a question (SQuAD style); exact match and F1.

    Answers are predicted as whole whitespace words (the first and last piece
    of the span map back to their words) and returned joined by single spaces.
    Training examples whose answer was cut off by `seq_len` are dropped.
    """

    name = "spans"
    primary_metric = "f1"
    max_answer_pieces = 30

    def _encode(self, task, examples, family, tokenizer, seq_len):
        def encode(batch):
            inputs, _, word_map = encoding.encode_question_context(
                family, tokenizer, seq_len, tf.constant([e["question"] for e in batch]),
                tf.constant([e["context"] for e in batch]))
            return dict(inputs, word_map=word_map)

        arrays = in_batches(examples, encode)
        word_map = arrays.pop("word_map")
        starts, ends, weights = [], [], []
        for row, example in enumerate(examples):
            start, end = self._answer_positions(example, word_map[row])
            starts.append(start)
            ends.append(end)
            weights.append(float(start >= 0 and end >= start))
        targets = {"start": np.maximum(starts, 0).astype(np.int32), "end": np.maximum(ends, 0).astype(np.int32)}
        weights = np.array(weights, np.float32)
        return {"inputs": arrays, "targets": targets, "weights": {"start": weights, "end": weights},
                "word_map": word_map}

    @staticmethod
    def _answer_positions(example, word_map):
        """(first position of the answer's first word, last position of its last word), -1 when cut off."""
        if not example["answers"]:
            return -1, -1
        answer = example["answers"][0]
        first_word = len(example["context"][:answer["start"]].split())
        if answer["start"] < len(example["context"]) and not example["context"][answer["start"]].isspace() \
                and answer["start"] > 0 and not example["context"][answer["start"] - 1].isspace():
            first_word -= 1  # the answer starts inside a word
        last_word = len(example["context"][:answer["start"] + len(answer["text"])].split()) - 1
        starts = np.flatnonzero(word_map == first_word)
        ends = np.flatnonzero(word_map == last_word)
        if not len(starts) or not len(ends):
            return -1, -1
        return int(starts[0]), int(ends[-1])

    def build_model(self, backbone, task, family, summary=None):
        return SpanExtractor(backbone)

    def predict(self, model, encoded, task, examples, batch_size):
        logits = model.predict(encoded["inputs"], batch_size=batch_size, verbose=0)
        start_word, end_word, _ = encoding.best_spans(
            tf.constant(logits["start"]), tf.constant(logits["end"]), tf.constant(encoded["word_map"]),
            self.max_answer_pieces)
        words = [e["context"].split() for e in examples]
        return [" ".join(row[s:e + 1]) if s >= 0 else "" for row, s, e in
                zip(words, start_word.numpy().tolist(), end_word.numpy().tolist())]

    def score(self, task, examples, predictions):
        answers = [[a["text"] for a in e["answers"]] for e in examples]
        return {"exact_match": float(np.mean([metrics.exact_match(p, a) for p, a in zip(predictions, answers)])),
                "f1": float(np.mean([metrics.span_f1(p, a) for p, a in zip(predictions, answers)]))}

    def endpoints(self, model, task, family, tokenizer, seq_len, buckets, compiled_model):
        run_model = _runner(model, compiled_model)

        def answer(question, context):
            inputs, words, word_map = encoding.encode_question_context(family, tokenizer, seq_len, question, context)
            inputs, word_map = fit_with_word_map(inputs, word_map, buckets)
            logits = run_model(inputs)
            start_word, end_word, score = encoding.best_spans(
                tf.cast(logits["start"], tf.float32), tf.cast(logits["end"], tf.float32), word_map,
                self.max_answer_pieces)
            return {"answer": encoding.join_words(words, start_word, end_word), "score": score}

        return {"answer": (answer, [_STRINGS, _STRINGS])}


def fit_with_word_map(inputs, word_map, buckets):
    """(inputs, word map) cut together to the batch's longest input (`data.packing.fit_to_batch`)."""
    fitted = fit_to_batch(dict(inputs, word_map=word_map), inputs["padding_mask"], buckets)
    return fitted, fitted.pop("word_map")


def _runner(model, compiled_model):
    """inputs (the model's and more) -> the model's outputs through `compiled_model` (`compiled(model, xla)`)."""
    return lambda inputs: compiled_model({name: inputs[name] for name in model.input})


TASK_KINDS = {kind.name: kind for kind in (Classification(), Tagging(), SpanExtraction())}
