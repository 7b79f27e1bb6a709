"""The span-fill kind of an encoder-decoder: `encode` and `generate` from its decoder, and its greedy
fill-ins of spans of held-out lines replaced by sentinels, as it was pretrained to."""

import random

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops of the SavedModel

from keras_bertology.outputs.seq2seq import seq2seq_endpoints
from keras_bertology.outputs.kind import Endpoints, OutputKind

SPAN_FILL_LINES = 3


class SpanFill(OutputKind):
    name = "span_fill"

    def endpoints(self, serving):
        """The decoder's loop, like a causal LM's generation, is left to TensorFlow (not XLA)."""
        functions = seq2seq_endpoints(serving.encoder, serving.pretrainer, serving.tokenizer, serving.seq_len,
                                      serving.pack, serving.strings)
        return Endpoints({"encode": serving.serve, **functions}, model=serving.pretrainer)

    def examples(self, run):
        if not run.held_out:
            return {}
        span_fills = span_fill_examples(run.export_dir, run.tokenizer, run.held_out, run.seed)
        return {"span_fills": span_fills} if span_fills else {}

    def summary_lines(self, metrics):
        if not metrics.get("span_fills"):
            return []
        lines = ["what the model learned: its greedy fill-ins of spans replaced by sentinels in lines held out "
                 "of training"]
        for example in metrics["span_fills"]:
            lines.append(f"  {example['text']}")
            lines.append(f"      model: {example['fill_in'].strip()}")
            lines.append(f"      truth: {example['truth']}")
        return lines


SPAN_FILL = SpanFill()


def span_fill_examples(export_dir, tokenizer, sentences, seed=0, count=SPAN_FILL_LINES):
    """Per line (the first `count`): the text with two spans of 1-3 words replaced by the vocabulary's
    sentinels (its last ids: <extra_id_0>, <extra_id_1>, as span corruption writes them), the model's
    greedy fill-ins (`generate`) and the truth; [] when no line has room for the spans."""
    rng = random.Random(seed)
    sentinels = [tokenizer.vocabulary[tokenizer.vocab_size - 1 - index] for index in range(2)]
    corrupted = [pair for pair in (_corrupt_spans(sentence.split(), sentinels, rng) for sentence in sentences)
                 if pair[1]][:count]
    if not corrupted:
        return []
    model = tf.saved_model.load(str(export_dir))
    written = model.generate(tf.constant([text for text, _ in corrupted]))["text"].numpy()
    return [{"text": text, "fill_in": fill.decode("utf-8", "replace"), "truth": truth}
            for (text, truth), fill in zip(corrupted, written)]


def _corrupt_spans(words, sentinels, rng):
    """(the words with one span of 1-3 words per sentinel replaced by it, the spans in order with a word
    between them and one kept at least, the sentinels each followed by its span)."""
    lengths = [rng.randint(1, 3) for _ in sentinels]
    while sum(lengths) + len(sentinels) > len(words) and max(lengths) > 1:
        lengths[lengths.index(max(lengths))] -= 1
    spare = len(words) - sum(lengths) - (len(sentinels) - 1)  # kept words beyond one between spans
    if spare < 1:
        return " ".join(words), ""
    gaps = [0 if index in (0, len(sentinels)) else 1 for index in range(len(sentinels) + 1)]
    for _ in range(spare):
        gaps[rng.randrange(len(gaps))] += 1
    text, truth, at = [], [], 0
    for gap, length, sentinel in zip(gaps, lengths, sentinels):
        text += [*words[at:at + gap], sentinel]
        truth += [sentinel, *words[at + gap:at + gap + length]]
        at += gap + length
    return " ".join(text + words[at:]), " ".join(truth)
