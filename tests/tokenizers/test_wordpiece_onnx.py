"""WordPiece as ONNX Runtime Extensions' operators (`WordPieceTokenizer.onnx_tokenize`): text split into the
words tensorflow-text's rules give on every code point, whole words unknown as WordPiece makes them, and no
such form for the uncased tokenizer."""

import numpy as np
import onnx
import pytest
from onnx import helper

from keras_bertology.errors import NotExpressible
from keras_bertology.export.onnx_graph import OnnxGraph
from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer
from onnx_clients import served_by_onnx


def _model(graph, outputs, path):
    """The nodes of `graph` from the strings "text" to `outputs` {name: ONNX element type}, saved at `path`."""
    graph.nodes += [helper.make_node("Identity", [value], [name]) for name, (value, _) in outputs.items()]
    model = helper.make_model(
        helper.make_graph(graph.nodes, "front",
                          [helper.make_tensor_value_info("text", onnx.TensorProto.STRING, [None])],
                          [helper.make_tensor_value_info(name, kind, [None]) for name, (_, kind) in outputs.items()],
                          graph.initializers),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1),
                       helper.make_opsetid("ai.onnx.ml", 2)], ir_version=8)
    onnx.save(model, path)
    return path


def _cased(vocab=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b", "he", "##l", "##a", "##é")):
    return WordPieceTokenizer(list(vocab), lower_case=False)


@pytest.mark.slow
def test_every_code_point_splits_into_the_words_tensorflow_text_gives(tmp_path):
    """The extensions' RE2 knows Unicode 13, tensorflow-text's 15: the deletions and the punctuation the later
    versions added are spelled out (tokenizers/bert_text.py). Every code point but NUL (which ends a string
    there, a stated difference) inside `ab?cd e`, split as `_tokenize` splits it."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    from keras_bertology.tokenizers.bert_text import CJK_CHARS, PUNCTUATION, WHITESPACE, bert_normalize

    tokenizer = _cased()
    graph = OnnxGraph("words")
    words, _, _, splits = tokenizer.onnx_words(graph, "text")
    path = _model(graph, {"words": (words, onnx.TensorProto.STRING), "splits": (splits, onnx.TensorProto.INT64)},
                  tmp_path / "words.onnx")
    points = [point for point in range(1, 0x110000) if not 0xD800 <= point <= 0xDFFF]
    texts = [f"ab{chr(point)}cd e".encode() for point in points]
    served = served_by_onnx(path, texts, tmp_path)
    kept = f"{PUNCTUATION}|{CJK_CHARS}"
    expected = tf_text.regex_split(bert_normalize(tf.constant(texts), False, False), f"{WHITESPACE}|{kept}", kept)
    got = np.split(served["words"], served["splits"][1:-1])
    differing = [hex(point) for point, ours, theirs in zip(points, expected.to_list(), got)
                 if ours != [bytes(word) for word in theirs]]
    assert differing == []
    assert len(got[points.index(ord("!"))]) == 4 and len(got[points.index(0x2E53)]) == 4  # a Unicode 14 mark
    assert len(got[points.index(0x890)]) == 2  # a format character of Unicode 14, deleted


def test_a_word_with_an_unknown_character_is_one_unknown_token_and_long_words_are_unknown(tmp_path):
    """The extensions' `WordpieceTokenizer` keeps the pieces before a character it cannot match (`he ##l
    [UNK]`); WordPiece makes the whole word [UNK], as does a word over 100 bytes (the operator counts
    characters: 60 `é` are 120 bytes)."""
    import tensorflow as tf

    tokenizer = _cased()
    graph = OnnxGraph("ids")
    ids, splits = tokenizer.onnx_tokenize(graph, "text")
    path = _model(graph, {"ids": (ids, onnx.TensorProto.INT64), "splits": (splits, onnx.TensorProto.INT64)},
                  tmp_path / "ids.onnx")
    texts = ["helx a", "ab helhel bb", "", "   ", "b" + "é" * 60 + " a", "a" * 100 + " " + "a" * 101, "x, a!"]
    served = served_by_onnx(path, [text.encode() for text in texts], tmp_path)
    got = [row.tolist() for row in np.split(served["ids"], served["splits"][1:-1])]
    assert got == tokenizer.tokenize(tf.constant(texts)).to_list()
    assert got[0] == [1, 5] and got[1] == [5, 7, 1, 6, 7]  # "helx", "helhel": one [UNK] each; "bb": b ##b
    assert got[4] == [1, 5] and got[5] == [5] + [10] * 99 + [1]  # over 100 bytes, and at 100 and 101 characters


def test_lower_casing_and_accent_stripping_have_no_onnx_form():
    """BERT's uncased WordPiece applies NFD and lower-cases: no operator of the extensions does either as
    tensorflow-text does, so the export says why instead of writing other ids."""
    uncased = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"], lower_case=True)
    with pytest.raises(NotExpressible, match="lower-casing and accent stripping"):
        uncased.onnx_tokenize(OnnxGraph("ids"), "text")
    accents = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"], lower_case=False,
                                 strip_accents=True)
    with pytest.raises(NotExpressible, match="lower-casing and accent stripping"):
        accents.onnx_tokenize(OnnxGraph("ids"), "text")
