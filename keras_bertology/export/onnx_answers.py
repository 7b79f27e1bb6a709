"""The string model of a fine-tuned answer model (extractive question answering): a question and a context in,
the answer out, as the SavedModel's `answer` gives it (`finetune.tasks.SpanExtraction.endpoints`), with the
tokenizer, the layout and the choice of the span inside the graph.

The question is tokenized as one text (`tokenizer.tokenize`, as `encoding.encode_question_context` reads it:
a literal mask token is text there), its long words cut as every string model cuts them; the context's words
are the tagger's (`onnx_words.word_pieces`: split at Unicode whitespace within the text bound, each tokenized
alone). The pair is trimmed together and laid out by the family's own pair template, the question first, with
the word of every context piece beside the ids (`WORD_MAP`, -1 on the question and the specials, as
`encoding.pack_follower` lays it out). After the model, `best_spans` picks the span as `encoding.best_spans`
does, and the answer is its words joined by single spaces, as `encoding.join_words` joins them.
"""

import numpy as np

from keras_bertology.export import onnx_text
from keras_bertology.export.onnx_words import FLOAT, STRING, WORD_MAP, word_pieces

ANSWER_INPUTS = ("question", "context")  # as the SavedModel's `answer` names them
NOWHERE = -3e38  # a span's score outside the context or the band, as `encoding.best_spans` scores it


def answer_text_model(ids_model, tokenizer, template, seq_len, max_answer_pieces):
    """The ONNX model (a ModelProto) from ANSWER_INPUTS [B] strings to `answer`'s outputs ("answer" [B] strings,
    "score" [B] float32) beside the ids model's ("start", "end"), the laid-out ids and WORD_MAP."""
    found = {}

    def front(graph):
        question, context = ANSWER_INPUTS
        found["context"] = context_pieces = word_pieces(graph, tokenizer, context, seq_len)
        segments = {"$A": tokenizer.onnx_tokenize(graph, onnx_text.cut_long_words(graph, question)),
                    "$B": (context_pieces.ids, context_pieces.splits)}
        return onnx_text.lay_out(graph, segments, template, seq_len, tokenizer.pad_id,
                                 onnx_text.unreadable(graph, tokenizer, ANSWER_INPUTS),
                                 followers={WORD_MAP: ("$B", context_pieces.word)})

    def back(graph, made):
        start_word, end_word, score = best_spans(graph, "start", "end", made[WORD_MAP], max_answer_pieces)
        answer = joined_words(graph, found["context"].words, found["context"].word_splits, start_word, end_word)
        return {"answer": (answer, STRING, ["batch"]), "score": (score, FLOAT, ["batch"])}

    return onnx_text.assembled(ids_model, ANSWER_INPUTS, front, back)


def best_spans(graph, start_logits, end_logits, word_map, max_answer_pieces):
    """(start word, end word [B] int64, score [B] float32) of the span whose start + end logit ([B, L] float32
    each) is highest among those with both ends in the context (`word_map` [B, L] int32 >= 0) and
    start <= end < start + `max_answer_pieces`, the first on ties (as `encoding.best_spans`, tf.argmax)."""
    length = graph.op("Gather", graph.op("Shape", start_logits), graph.const([1], np.int64))  # [1]
    positions = graph.op("Range", graph.scalar(0), graph.op("Squeeze", length), graph.scalar(1))
    offsets = graph.op("Sub", graph.op("Unsqueeze", positions, graph.const([0], np.int64)), graph.column(positions))
    band = graph.op("And", graph.op("GreaterOrEqual", offsets, graph.scalar(0)),
                    graph.op("Less", offsets, graph.scalar(max_answer_pieces)))  # [L, L]: end - start
    valid = graph.op("GreaterOrEqual", word_map, graph.const(np.array(0, np.int32)))
    allowed = graph.op("And", graph.op("And", graph.op("Unsqueeze", band, graph.const([0], np.int64)),
                                       graph.op("Unsqueeze", valid, graph.const([2], np.int64))),
                       graph.op("Unsqueeze", valid, graph.const([1], np.int64)))
    scores = graph.op("Add", graph.op("Unsqueeze", start_logits, graph.const([2], np.int64)),
                      graph.op("Unsqueeze", end_logits, graph.const([1], np.int64)))
    scores = graph.op("Where", allowed, scores, graph.const(np.array(NOWHERE, np.float32)))
    flat = graph.op("Reshape", scores, graph.op("Concat", graph.op("Slice", graph.op("Shape", start_logits),
                                                                   graph.const([0], np.int64),
                                                                   graph.const([1], np.int64)),
                                                graph.op("Mul", length, length), axis=0))  # [B, L * L]
    best = graph.op("ArgMax", flat, axis=1, keepdims=0, select_last_index=0)
    word_map = graph.op("Cast", word_map, to=7)  # 7: int64

    def word_at(position):
        return graph.op("Squeeze", graph.op("GatherElements", word_map, graph.column(position), axis=1),
                        graph.const([1], np.int64))

    start, end = graph.op("Div", best, length), graph.op("Mod", best, length)
    return word_at(start), word_at(end), graph.op("ReduceMax", flat, axes=[1], keepdims=0)  # opset 17: an attribute


def joined_words(graph, words, word_splits, start_word, end_word):
    """[B] strings: each text's words (`words` [N], row splits `word_splits` [B + 1]) from `start_word` to
    `end_word` ([B] int64, counted within the text) joined by single spaces, "" where `start_word` < 0."""
    text, place = graph.index_in_row(word_splits, graph.op("Shape", words))
    first, last = graph.op("Gather", start_word, text), graph.op("Gather", end_word, text)
    chosen = graph.op("And", graph.op("GreaterOrEqual", place, first), graph.op("LessOrEqual", place, last))
    spaced = graph.contrib("StringConcat", graph.op("Expand", graph.const([" "]), graph.op("Shape", words)), words)
    words = graph.op("Where", graph.op("Greater", place, first), spaced, words)  # a space before all but the first
    counts = graph.op("Where", graph.op("GreaterOrEqual", start_word, graph.scalar(0)),
                      graph.op("Add", graph.op("Sub", end_word, start_word), graph.scalar(1)), graph.scalar(0))
    splits = graph.op("Concat", graph.const([0], np.int64), graph.op("CumSum", counts, graph.scalar(0)), axis=0)
    return onnx_text.joined(graph, graph.op("Compress", words, chosen, axis=0), splits)
