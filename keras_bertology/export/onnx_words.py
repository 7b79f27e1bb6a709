"""The string model of a fine-tuned tagger: raw texts in, a tag per whitespace word out, as the SavedModel's
`tag` gives them (`finetune.tasks.Tagging.endpoints`), with the tokenizer and the layout inside the graph.

The text's words (`word_pieces`, which an answer model's context shares: `onnx_answers`) are cut as every
string model cuts them (`onnx_text.cut_long_words`), split at Unicode whitespace as `encoding.split_words`
splits them, those past the SavedModel's text bound left out (`saved_model.cut_text`; where a text is not
UTF-8, its characters are counted as ONNX Runtime Extensions' `StringLength` counts them), each word tokenized
alone after the tokenizer's `word_prefix` (`finetune.encoding.word_pieces`), laid out with the word index on
each word's first piece (`onnx_text.lay_out`'s followers); after the model, each word takes the label its
first piece scores best, the words without a piece (cut off by the length) the outside label, as
`word_predictions` does.
"""

from typing import NamedTuple

import numpy as np

from keras_bertology.errors import NotExpressible
from keras_bertology.export import onnx_text
from keras_bertology.export.saved_model import CHARS_PER_TOKEN, MAX_WORD_CHARS
from keras_bertology.tokenizers.bert_text import WHITESPACE

WORD_MAP = "word_map"  # [B, L]: the word of each word's first piece (an answer model's: every piece), -1 elsewhere
FLOAT, STRING = 1, 8  # onnx.TensorProto's element types


def tagger_text_model(ids_model, tokenizer, template, seq_len, labels, logits="logits"):
    """The ONNX model (a ModelProto) from TEXT_INPUT [B] strings to `tag`'s outputs ("tags", "words", "scores",
    [B, the batch's most words]) beside the ids model's outputs and the laid-out ids."""
    found = {}

    def front(graph):
        found["pieces"] = pieces = word_pieces(graph, tokenizer, onnx_text.TEXT_INPUT, seq_len)
        word_map = graph.op("Where", pieces.first, pieces.word, graph.scalar(-1))
        return onnx_text.lay_out(graph, {"$A": (pieces.ids, pieces.splits)}, template, seq_len, tokenizer.pad_id,
                                 onnx_text.unreadable(graph, tokenizer, (onnx_text.TEXT_INPUT,)),
                                 followers={WORD_MAP: ("$A", word_map)})

    def back(graph, made):
        return _tags(graph, logits, made[WORD_MAP], found["pieces"].words, found["pieces"].word_splits, labels)

    return onnx_text.assembled(ids_model, (onnx_text.TEXT_INPUT,), front, back)


class WordPieces(NamedTuple):
    """Names of `word_pieces`' tensors: the words and their pieces, over the batch."""
    words: str  # [N] strings
    word_splits: str  # [B + 1]: the words of each text
    ids: str  # [P] int64: each word's pieces, word after word
    splits: str  # [B + 1]: the pieces of each text
    word: str  # [P] int64: the word of each piece, counted within its text
    first: str  # [P] bool: whether a piece is its word's first


def word_pieces(graph, tokenizer, texts, seq_len):
    """The `WordPieces` of the [B] strings named `texts` as `finetune.encoding.word_pieces` makes them from the
    SavedModel's cut texts: the words cut as every string model cuts them, split at Unicode whitespace, those
    past the text bound left out (`_words_within`), each tokenized alone after the tokenizer's `word_prefix`."""
    if CHARS_PER_TOKEN * seq_len <= MAX_WORD_CHARS:
        raise NotExpressible(f"at {seq_len} tokens its text bound ({CHARS_PER_TOKEN * seq_len} characters) can cut "
                             "a word, which its graph does not")
    words, word_splits = _words_within(graph, onnx_text.cut_long_words(graph, texts), CHARS_PER_TOKEN * seq_len)
    prefixed = words if not tokenizer.word_prefix else graph.contrib(
        "StringConcat", graph.op("Expand", graph.const([tokenizer.word_prefix]), graph.op("Shape", words)), words)
    ids, piece_splits = tokenizer.onnx_tokenize(graph, prefixed)  # a row of pieces a word
    word_of_piece, place = graph.index_in_row(piece_splits, graph.op("Shape", ids))  # counted over the batch
    _, in_text = graph.index_in_row(word_splits, graph.op("Shape", words))
    return WordPieces(words, word_splits, ids, graph.op("Gather", piece_splits, word_splits),
                      graph.op("Gather", in_text, word_of_piece), graph.op("Equal", place, graph.scalar(0)))


def _words_within(graph, texts, bound):
    """(words [N], row splits [B + 1]) of `texts` split at Unicode whitespace, each text's words that end within
    its first `bound` characters: the words `saved_model.cut_text` leaves (a word it cuts is dropped; no word
    of MAX_WORD_CHARS or fewer starts a text and runs past the bound)."""
    split_at = graph.const([f"({WHITESPACE})"])
    pieces, _, _, splits = graph.contrib("StringRegexSplitWithOffsets", texts, split_at, split_at, outputs=4)
    count = graph.op("Shape", pieces)
    ends = graph.op("CumSum", graph.contrib("StringLength", pieces), graph.scalar(0))  # characters, over the batch
    row = graph.row_of_each(splits, count)
    before = graph.op("Gather", graph.op("Concat", graph.const([0], np.int64), ends, axis=0),
                      graph.op("Gather", splits, row))
    blank = graph.equals_text(graph.contrib("StringRegexReplace", pieces, split_at, graph.const([""])), "")
    kept = graph.op("And", graph.op("Not", blank),
                    graph.op("LessOrEqual", graph.op("Sub", ends, before), graph.scalar(bound)))
    per_row = graph.op("ScatterElements", graph.zeros(graph.op("Sub", graph.op("Shape", splits),
                                                                 graph.const([1], np.int64))),
                       row, graph.op("Cast", kept, to=7), reduction="add")  # 7: int64
    word_splits = graph.op("Concat", graph.const([0], np.int64), graph.op("CumSum", per_row, graph.scalar(0)), axis=0)
    return graph.op("Compress", pieces, kept, axis=0), word_splits


def _tags(graph, logits, word_map, words, word_splits, labels):
    """{"tags", "words", "scores"} of each text's words: the label its first piece scores best (and that
    probability), the outside label (and 0) where a word has no piece, "" (and 0) past a text's words."""
    probabilities = graph.op("Softmax", logits, axis=-1)
    best = graph.op("ArgMax", probabilities, axis=-1, keepdims=0)
    score = graph.op("ReduceMax", probabilities, axes=[-1], keepdims=0)  # opset 17: axes an attribute
    word_map = graph.op("Cast", word_map, to=7)  # 7: int64
    _, counts = graph.rows(word_splits)
    most = graph.op("ReduceMax", graph.op("Concat", graph.const([0], np.int64), counts, axis=0), keepdims=1)
    shape = graph.op("Concat", graph.op("Shape", counts), most, axis=0)
    firsts = graph.op("Transpose", graph.op("NonZero", graph.op("GreaterOrEqual", word_map, graph.scalar(0))))
    row = graph.op("Slice", firsts, graph.const([0], np.int64), graph.const([1], np.int64), graph.const([1], np.int64))
    at = graph.op("Concat", row, graph.op("Unsqueeze", graph.op("GatherND", word_map, firsts),
                                          graph.const([1], np.int64)), axis=1)  # [K, 2]: (text, word)
    outside = labels.index("O")
    tag_ids = graph.op("ScatterND", graph.op("Expand", graph.scalar(outside), shape), at,
                       graph.op("GatherND", best, firsts))
    scores = graph.op("ScatterND", graph.op("Expand", graph.const(np.array(0.0, np.float32)), shape), at,
                      graph.op("GatherND", score, firsts))
    positions = graph.op("Unsqueeze", graph.op("Range", graph.scalar(0), graph.op("Squeeze", most), graph.scalar(1)),
                         graph.const([0], np.int64))
    present = graph.op("Less", positions, graph.column(counts))
    nothing = graph.const([""])
    tags = graph.op("Where", present, graph.op("Gather", graph.const(np.array(labels, dtype=object)), tag_ids), nothing)
    starts = graph.op("Slice", word_splits, graph.const([0], np.int64), graph.const([-1], np.int64))
    last = graph.op("Shape", words)
    index = graph.op("Min", graph.op("Add", graph.column(starts), positions), last)
    dense = graph.op("Gather", graph.op("Concat", words, nothing, axis=0), index)
    return {"tags": (tags, STRING, ["batch", "words"]),
            "words": (graph.op("Where", present, dense, nothing), STRING, ["batch", "words"]),
            "scores": (graph.op("Where", present, scores, graph.const(np.array(0.0, np.float32))), FLOAT,
                       ["batch", "words"])}
