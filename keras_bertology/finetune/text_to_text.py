"""Text-to-text fine-tuning: an encoder-decoder (T5) learns a task by writing its answer.

A classification task's answer is the label's own words ("business", "tech"),
a seq2seq task's (a folder with `input` / `target` fields) its target text.
The decoder is teacher-forced on the answer's tokens and `</s>`, with the
loss of the pretrainer's own objective (`Pretrainer.has_decoder` says it
has a decoder). A prediction is what greedy decoding writes, so a label is
right only when its words come out exactly: scored by accuracy and macro-F1
as an encoder's classifier is (a text that is no label counts as wrong), or
by exact match for a seq2seq task.
"""

import numpy as np
import tensorflow as tf

from keras_bertology.data.packing import fit_to_batch
from keras_bertology.export.saved_model import compiled
from keras_bertology.outputs.seq2seq import seq2seq_endpoints
from keras_bertology.finetune import encoding, metrics
from keras_bertology.errors import ConfigError
from keras_bertology.finetune.example_kinds import EXAMPLE_KINDS
from keras_bertology.finetune.tasks import TaskKind, in_batches

_STRINGS = tf.TensorSpec([None], tf.string)


class TextToText(TaskKind):
    """A task of a kind with answers to write (`ExampleKind.answer_field`: classification's labels, seq2seq's
    free text) on a seq2seq pretrainer whose objective's output is `output`."""

    generates = True

    def __init__(self, task_kind, output, tokenizer):
        self.name, self.output, self.tokenizer = task_kind, output, tokenizer
        self.data_kind = EXAMPLE_KINDS[task_kind]
        self.primary_metric = "exact_match" if self.data_kind.free_text_answers else "macro_f1"

    def answer(self, example):
        """The text the decoder learns to write for `example`."""
        return example[self.data_kind.answer_field]

    def _encode(self, task, examples, family, tokenizer, seq_len):
        inputs = in_batches(examples, lambda batch: encoding.encode_texts(
            family, tokenizer, seq_len, tf.constant([e["text"] for e in batch])))
        pieces = tokenizer.tokenize(tf.constant([self.answer(e) for e in examples])).to_list()
        width = min(max(map(len, pieces)), seq_len - 1) + 1
        targets = np.full([len(examples), width], tokenizer.pad_id, np.int32)
        for row, ids in enumerate(pieces):
            kept = ids[:width - 1] + [tokenizer.sep_id]  # the answer, cut to fit, then </s>
            targets[row, :len(kept)] = kept
        real = targets != tokenizer.pad_id
        inputs["decoder_token_ids"] = np.pad(targets[:, :-1], [(0, 0), (1, 0)], constant_values=tokenizer.pad_id)
        inputs["decoder_padding_mask"] = np.pad(real[:, :-1], [(0, 0), (1, 0)], constant_values=True).astype(np.int32)
        return {"inputs": inputs, "targets": {self.output: targets}, "weights": {self.output: real.astype(np.float32)}}

    def build_model(self, pretrainer, task, family, summary=None):
        """The pretrainer itself: its head and objective are what text-to-text trains."""
        return pretrainer

    def predict(self, model, encoded, task, examples, batch_size):
        """Each example's greedy answer from the decoder's key/value cache (`decode_step`, as serving's
        `generate`), at most as many tokens as the longest answer of the split."""
        encoder, inputs = model.backbone.text_encoder(), encoded["inputs"]
        steps = encoded["targets"][self.output].shape[1]
        answers = []
        for start in range(0, len(examples), batch_size):
            rows = {name: inputs[name][start:start + batch_size] for name in encoder.input}
            states = encoder(rows, training=False)["sequence_output"]
            encoder_heads = model.start_decoding(states)
            past = [(key[:, :0], value[:, :0]) for key, value in encoder_heads]
            written = [np.zeros([len(rows["padding_mask"]), 1], np.int32)]
            for step in range(steps):
                logits, past = model.decode_step(written[-1], step, past, encoder_heads, rows["padding_mask"])
                chosen = np.argmax(np.asarray(logits)[:, :self.tokenizer.vocab_size], axis=-1)
                written.append(chosen.astype(np.int32)[:, None])
            answers += [self._text(row) for row in np.concatenate(written[1:], axis=1)]
        return answers

    def score(self, task, examples, predictions):
        gold = [self.answer(e) for e in examples]
        if not self.data_kind.free_text_answers:
            return {"accuracy": metrics.accuracy(gold, predictions), "macro_f1": metrics.macro_f1(gold, predictions)}
        return {"exact_match": metrics.accuracy([g.strip() for g in gold], [p.strip() for p in predictions])}

    def endpoints(self, model, task, family, tokenizer, seq_len, buckets, compiled_model):
        encoder = model.backbone.text_encoder()

        def pack(text):
            inputs = encoding.encode_texts(family, tokenizer, seq_len, text)
            return fit_to_batch(inputs, inputs["padding_mask"], buckets)

        generation = seq2seq_endpoints(compiled(encoder, False), model, tokenizer, seq_len, pack, _STRINGS)
        if self.data_kind.free_text_answers:
            return generation
        labels = tf.constant(list(task.labels))
        generate = generation["generate"][0]

        def classify(text):
            written = generate(text)["text"]
            matches = tf.equal(tf.strings.strip(written)[:, None], labels[None, :])
            found = tf.reduce_any(matches, axis=1)
            return {"label": written, "label_id": tf.where(found, tf.argmax(tf.cast(matches, tf.int32), axis=1,
                                                                            output_type=tf.int32), -1)}

        return {"classify": (classify, [_STRINGS]), **generation}

    def _text(self, ids):
        """The written ids up to </s>, as text."""
        ids = [int(i) for i in ids]
        end = ids.index(self.tokenizer.sep_id) if self.tokenizer.sep_id in ids else len(ids)
        return self.tokenizer.detokenize([ids[:end]]).numpy()[0].decode("utf-8", "replace")


def text_to_text_kind(task, pretrainer, tokenizer, head):
    """The text-to-text kind for `task` when the run fine-tunes its decoder (`head` "text-to-text", or "auto"
    with a pretrainer that has one and a task it can write), else None (a head on the encoder)."""
    decoder = pretrainer is not None and pretrainer.has_decoder
    data_kind = EXAMPLE_KINDS[task.kind]
    if head == "encoder":
        if data_kind.free_text_answers:
            raise ConfigError(f"task {task.name} is {task.kind}: its answers are written by a decoder, so --head "
                              "encoder does not apply")
        return None
    if not decoder:
        if head == "text-to-text" or data_kind.free_text_answers:
            asked = "--head text-to-text" if head == "text-to-text" else f"task {task.name} ({task.kind})"
            raise ConfigError(f"{asked} needs an encoder-decoder run with its decoder (--from a t5 pretraining run "
                              "or a converted T5ForConditionalGeneration)")
        return None
    if data_kind.answer_field is None:
        if head == "text-to-text":
            written = " and ".join(name for name, kind in EXAMPLE_KINDS.items() if kind.answer_field)
            raise ConfigError(f"--head text-to-text takes {written} tasks; {task.name} is {task.kind}: use "
                              "--head encoder")
        return None
    if task.pairs:
        raise ConfigError(f"text-to-text fine-tuning takes single texts; {task.name} has pairs: use --head encoder")
    return TextToText(task.kind, pretrainer.objectives[0], tokenizer)
