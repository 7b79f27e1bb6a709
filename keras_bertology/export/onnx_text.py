"""The string model of the ONNX export (`model.text.onnx`): raw texts in, the encoder's outputs and the ids
it read out, with the family's tokenizer and text layout inside the graph as ONNX Runtime Extensions'
operators, so a client sends strings as it does to the SavedModel's `serve`.

The front end is written here as ONNX nodes (tf2onnx cannot convert tensorflow-text's tokenizers, and its
lowering of ragged tensors fails on a batch of empty texts): each word cut as the SavedModel cuts it
(`cut_words`), the text split at the literal mask token as `data.packing.tokenize_keeping_mask` splits it,
the pieces tokenized by the tokenizer's own `onnx_tokenize`, then laid out as the family's layout says and
padded to the batch's longest. Where a tokenizer or a layout has no such form the export says why in one
line and writes the ids model alone.

What may differ from the SavedModel, by construction: a NUL byte ends a text here (the extensions' operators
read strings up to it); a text is not cut to `CHARS_PER_TOKEN` characters a token before tokenizing (that cut
bounds the SavedModel's cost and never reaches the first `seq_len` tokens of text whose tokens average
fewer than 16 characters). Everything else, invalid UTF-8 included, is checked at export against the
SavedModel's own front end, in a process without TensorFlow (`onnx_text_run.py`).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from keras_bertology.data.packing import TEXT_PIECES, WHITESPACE
from keras_bertology.errors import ConfigError, NotExpressible
from keras_bertology.export.saved_model import MAX_WORD_CHARS
from keras_bertology.tokenizers.bert_text import ONNX_WORD_DELIMITER

TEXT_MODEL_FILE = "model.text.onnx"
TEXT_PAIRS_MODEL_FILE = "model.text_pairs.onnx"  # an encoder's `serve_pairs`, where the family reads segments
ML_DOMAIN = "ai.onnx.ml"
TEXT_INPUT = "text"
PAIR_INPUTS = (TEXT_INPUT, "text_b")
LAID_OUT = ("token_ids", "segment_ids", "padding_mask")  # what a layout makes, named as the encoders' inputs
# The node that fails a batch holding a text the ONNX tokenizer cannot read as the SavedModel does.
REFUSAL_NODE = "a_text_the_onnx_tokenizer_cannot_read_as_the_saved_model_see_text_model_unreadable_in_onnx_json"
STRING = 8  # onnx.TensorProto.STRING
RUNNER = Path(__file__).with_name("onnx_text_run.py")
RUN_BY_PATH = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def text_layout(family, tokenizer, pairs=False, own_layout=False):
    """The template of one text (of two with `pairs`) as [(a special token's id, or the text's place "$A" or
    "$B"; segment id)], or NotExpressible; with `own_layout` the family's packer's even where the tokenizer
    has a layout of its own (what `family.pack_segments` lays out: the task encodings of words)."""
    layout = family.text_layout(tokenizer, own_layout)
    if layout is None:
        raise NotExpressible(f"{family.name} packs text with code of its own, not a layout of token ids")
    return [(piece if piece in TEXT_PIECES else tokenizer.vocabulary.index(piece), int(segment))
            for piece, segment in layout["pair" if pairs else "single"]]


def text_inputs(pairs):
    """The string model's inputs: one text, or a pair named as the SavedModel's `classify_pairs` names them."""
    return PAIR_INPUTS if pairs else (TEXT_INPUT,)


def front_end(graph, tokenizer, template, seq_len, inputs=(TEXT_INPUT,)):
    """Nodes of `graph` from the [B] strings of `inputs` (one per text of `template`, in order) to LAID_OUT
    [B, W] int32 (W the batch's longest)."""
    segments = {place: tokenize_keeping_mask(graph, tokenizer, cut_long_words(graph, name))
                for place, name in zip([piece for piece, _ in template if piece in TEXT_PIECES], inputs)}
    return lay_out(graph, segments, template, seq_len, tokenizer.pad_id, unreadable(graph, tokenizer, inputs))


def unreadable(graph, tokenizer, inputs):
    """A [B] bool: the rows where any of the [B] strings of `inputs` is one the ONNX tokenizer cannot read as the
    SavedModel does (`onnx_unreadable`, read from the bytes a client sent); None where it reads every text."""
    refused = None
    for name in inputs:
        one = tokenizer.onnx_unreadable(graph, name)
        if one is not None:
            refused = one if refused is None else graph.op("Or", refused, one)
    return refused


def cut_long_words(graph, texts):
    """Each run of characters between WORD_DELIMITERs cut to its first MAX_WORD_CHARS, as `cut_words` cuts: the
    text split into words and delimiters, each word cut, the pieces joined back. (One regular expression over
    the text, a word of MAX_WORD_CHARS non-delimiters, is too large for RE2's DFA, which then logs on every
    call and runs as an NFA.) Done only in a batch with a text of more than MAX_WORD_CHARS bytes, where a
    word can be that long: the split's pattern, compiled on every call, was most of a short text's time (a
    one-layer RoBERTa's string model at batch 1: 2.0 ms with it, 0.8 ms without)."""
    def cut(branch):
        delimiter = branch.const([f"({ONNX_WORD_DELIMITER})"])
        pieces, _, _, splits = branch.contrib("StringRegexSplitWithOffsets", texts, delimiter, delimiter, outputs=4)
        pieces = branch.contrib("StringRegexReplace", pieces, branch.const([f"(?s)^(.{{{MAX_WORD_CHARS}}}).+$"]),
                                branch.const([r"\1"]))
        return joined(branch, pieces, splits)

    long = graph.op("Greater", _longest_bytes(graph, texts), graph.scalar(MAX_WORD_CHARS))
    return graph.only_if(long, "cut_words", cut, texts, STRING)


def _longest_bytes(graph, texts):
    """The length in bytes of the longest of `texts` (0 for none): the end of each text's one piece, split at a
    NUL, which no text holds (ONNX Runtime reads a string up to one)."""
    nul = graph.const(["(\\x{0})"])
    _, _, ends, _ = graph.contrib("StringRegexSplitWithOffsets", texts, nul, nul, outputs=4)
    return graph.op("ReduceMax", graph.op("Concat", graph.const([0], np.int64), ends, axis=0), keepdims=0)


def joined(graph, strings, splits):
    """[B] strings: the [N] `strings` of each row (row splits [B + 1]) joined end to end."""
    starts, lengths = graph.rows(splits)
    width = graph.op("Add", graph.op("ReduceMax", lengths, keepdims=1), graph.const([1], np.int64))  # never 0
    positions = graph.op("Unsqueeze", graph.op("Range", graph.scalar(0), graph.op("Squeeze", width), graph.scalar(1)),
                         graph.const([0], np.int64))
    strings = graph.op("Concat", strings, graph.const([""]), axis=0)  # read where a row has no more
    last = graph.op("Sub", graph.op("Shape", strings), graph.scalar(1))
    index = graph.op("Min", graph.op("Add", graph.column(starts), positions), last)
    inside = graph.op("Less", positions, graph.column(lengths))
    dense = graph.op("Where", inside, graph.op("Gather", strings, index), graph.const([""]))
    return graph.contrib("StringJoin", dense, graph.const([""]), graph.const(np.array(1, np.int64)))


def tokenize_keeping_mask(graph, tokenizer, texts):
    """(ids int64 [N], row splits int64 [B + 1]) of [B] strings, each literal mask token its mask id and the
    text between tokenized apart, as `data.packing.tokenize_keeping_mask` does."""
    if not tokenizer.has_role("mask"):
        return tokenizer.onnx_tokenize(graph, texts)
    mask = tokenizer.vocabulary[tokenizer.mask_id]
    delimiter = graph.const([f"({re.escape(mask)})"])  # a group: the split keeps the masks as pieces
    pieces, _, _, piece_splits = graph.contrib("StringRegexSplitWithOffsets", texts, delimiter, delimiter,
                                               outputs=4)
    is_mask = graph.equals_text(pieces, mask)
    if getattr(tokenizer, "strips_space_before_mask", False):
        pieces = _strip_space_before_masks(graph, pieces, is_mask, piece_splits)
    ids, splits = tokenizer.onnx_tokenize(graph, graph.op("Where", is_mask, graph.const([""]), pieces))
    starts, lengths = graph.rows(splits)
    lengths = graph.op("Where", is_mask, graph.scalar(1), lengths)
    ids = graph.op("Concat", ids, graph.const([tokenizer.mask_id], np.int64), axis=0)  # read at a mask
    starts = graph.op("Where", is_mask, graph.op("Sub", graph.op("Shape", ids), graph.scalar(1)), starts)
    return _concatenated(graph, ids, starts, lengths, piece_splits)


def _strip_space_before_masks(graph, pieces, is_mask, piece_splits):
    """The pieces that a mask follows in their text without their trailing whitespace (RoBERTa's <mask>
    takes the spaces before it)."""
    mask_follows, same_row = graph.next_in_row(is_mask, piece_splits, False)
    before_mask = graph.op("And", mask_follows, same_row)
    stripped = graph.contrib("StringRegexReplace", pieces, graph.const([f"[{WHITESPACE}]+$"]), graph.const([""]))
    return graph.op("Where", before_mask, stripped, pieces)


def _concatenated(graph, ids, starts, lengths, piece_splits):
    """The ids of each text's pieces end to end: (ids [M], row splits [B + 1]), a piece being `lengths` ids of
    `ids` from `starts`."""
    ends = graph.op("CumSum", lengths, graph.scalar(0))
    out_splits = graph.op("Concat", graph.const([0], np.int64), ends, axis=0)
    total = graph.op("ReduceSum", lengths, keepdims=1)
    piece = graph.row_of_each(out_splits, total)
    position = graph.op("Range", graph.scalar(0), graph.op("Squeeze", total), graph.scalar(1))
    within = graph.op("Sub", position, graph.op("Gather", out_splits, piece))
    values = graph.op("Gather", ids, graph.op("Add", graph.op("Gather", starts, piece), within))
    return values, graph.op("Gather", out_splits, piece_splits)


def lay_out(graph, segments, template, seq_len, pad_id, refused=None, followers=None):
    """LAID_OUT of the texts `segments` ({"$A": (ids [N], row splits [B + 1]), "$B": ...}), trimmed together to
    what the template's special tokens leave of `seq_len` as `data.packing.trimmed_segments` trims them, placed
    as `template` says and padded on the right to the batch's longest row; where `refused` (a [B] bool) marks a
    row, ONNX Runtime fails the batch (`_fail_where`). `followers` ({name: (a text's place, int64 [N], one
    value per id of that text)}) are laid out as their ids are, -1 on the special tokens and padding (as
    `finetune.encoding.pack_follower` lays them out), and returned beside LAID_OUT."""
    followers = followers or {}
    specials = sum(piece not in TEXT_PIECES for piece, _ in template)
    rows = {place: graph.rows(splits) for place, (_, splits) in segments.items()}  # (starts, lengths)
    kept = dict(zip(rows, _trimmed(graph, [lengths for _, lengths in rows.values()], seq_len - specials)))
    total = graph.scalar(specials)
    for length in kept.values():
        total = graph.op("Add", total, length)
    width = graph.op("ReduceMax", total, keepdims=0)
    positions = graph.op("Unsqueeze", graph.op("Range", graph.scalar(0), width, graph.scalar(1)),
                         graph.const([0], np.int64))  # [1, W]
    shape = graph.op("Concat", graph.op("Shape", total), graph.op("Unsqueeze", width, graph.const([0], np.int64)),
                     axis=0)
    token_ids = graph.op("Expand", graph.scalar(pad_id), shape)
    segment_ids = graph.op("Expand", graph.scalar(0), shape)
    following = {name: graph.op("Expand", graph.scalar(-1), shape) for name in followers}
    end = graph.op("Expand", graph.scalar(0), graph.op("Shape", total))
    for piece, segment in template:
        offset = graph.op("Sub", positions, graph.column(end))
        if piece in TEXT_PIECES:
            # the pad id appended: read where the row has no more text
            ids = graph.op("Concat", segments[piece][0], graph.const([pad_id], np.int64), axis=0)
            last = graph.op("Sub", graph.op("Shape", ids), graph.scalar(1))
            inside = graph.op("And", graph.op("GreaterOrEqual", offset, graph.scalar(0)),
                              graph.op("Less", offset, graph.column(kept[piece])))
            index = graph.op("Min", graph.op("Max", graph.op("Add", graph.column(rows[piece][0]), offset),
                                             graph.scalar(0)), last)
            values, length = graph.op("Gather", ids, index), kept[piece]
            for name, (place, value) in followers.items():
                if place == piece:
                    placed = graph.op("Gather", graph.op("Concat", value, graph.const([-1], np.int64), axis=0), index)
                    following[name] = graph.op("Where", inside, placed, following[name])
        else:
            inside, values, length = graph.op("Equal", offset, graph.scalar(0)), graph.scalar(piece), graph.scalar(1)
        token_ids = graph.op("Where", inside, values, token_ids)
        segment_ids = graph.op("Where", inside, graph.scalar(segment), segment_ids)
        end = graph.op("Add", end, length)
    padding_mask = graph.op("Less", positions, graph.column(total))
    if refused is not None:
        token_ids = _fail_where(graph, refused, token_ids)
    laid_out = dict(zip(LAID_OUT, (token_ids, segment_ids, padding_mask))) | following
    return {name: graph.op("Cast", value, to=6, output_names=[name]) for name, value in laid_out.items()}  # 6: int32


def _trimmed(graph, lengths, budget):
    """The kept lengths of one or two texts' [B] `lengths` within `budget` tokens in all: one cut at the budget;
    two as `data.packing._shrink_longest` (the longer loses tokens until they are equal, then each in turn,
    the first first)."""
    if len(lengths) == 1:
        return [graph.op("Min", lengths[0], graph.scalar(budget))]
    a, b = lengths
    over = graph.op("Max", graph.op("Sub", graph.op("Add", a, b), graph.scalar(budget)), graph.scalar(0))
    first_cut = graph.op("Min", over, graph.op("Abs", graph.op("Sub", a, b)))
    rest = graph.op("Sub", over, first_cut)
    a_longer, zero, two = graph.op("Greater", a, b), graph.scalar(0), graph.scalar(2)
    return [graph.op("Sub", graph.op("Sub", a, graph.op("Where", a_longer, first_cut, zero)),
                     graph.op("Div", graph.op("Add", rest, graph.scalar(1)), two)),
            graph.op("Sub", graph.op("Sub", b, graph.op("Where", a_longer, zero, first_cut)),
                     graph.op("Div", rest, two))]


def _fail_where(graph, refused, tensor):
    """`tensor`, through a node that fails the run when any of `refused` ([B] bool) is true: a Gather from one
    value at index 1, which ONNX Runtime refuses as out of bounds, naming the node (ONNX has no assert)."""
    index = graph.op("ReduceMax", graph.op("Cast", refused, to=7), keepdims=0)  # 7: int64
    zero = graph.op("Gather", graph.const(np.array([0], np.int64)), index,
                    node_name=REFUSAL_NODE)
    return graph.op("Add", tensor, zero)


def text_model(ids_model, tokenizer, template, seq_len, inputs=(TEXT_INPUT,)):
    """The ONNX model (a ModelProto) taking the [B] strings of `inputs` (one per text of `template`) into
    `ids_model` (the export's model on ids, whose inputs are among LAID_OUT), giving its outputs and LAID_OUT."""
    return assembled(ids_model, inputs, lambda graph: front_end(graph, tokenizer, template, seq_len, inputs))


def assembled(ids_model, inputs, front, back=None):
    """The ONNX model (a ModelProto) on the [B] strings of `inputs`: `front(graph)` adds the nodes that make
    {name: int32 [B, W] value} (LAID_OUT, the ids model's inputs, and any others), then `ids_model`'s nodes,
    then `back(graph, made)`, the nodes of {name: (value, onnx element type, shape)} outputs read from the ids
    model's (by name) and `made`; the model gives the ids model's outputs, what `front` made and `back`'s."""
    import onnx
    from onnx import helper

    from keras_bertology.export.onnx_graph import CONTRIB, OnnxGraph

    needed = [item.name for item in ids_model.graph.input]
    beyond = sorted(set(needed) - set(LAID_OUT))
    if beyond:
        raise NotExpressible(f"its encoder also takes {', '.join(beyond)}, which a text layout does not make")
    graph = OnnxGraph("text")
    made = front(graph)
    ends = OnnxGraph("tail")
    extra = back(ends, made) if back is not None else {}
    for name, (value, _, _) in extra.items():
        ends.op("Identity", value, output_names=[name])
    inner = ids_model.graph
    outputs = list(inner.output) + [helper.make_tensor_value_info(name, onnx.TensorProto.INT32, ["batch", "length"])
                                    for name in made] + [
        helper.make_tensor_value_info(name, element, shape) for name, (_, element, shape) in extra.items()]
    merged = helper.make_graph(graph.nodes + list(inner.node) + ends.nodes, "text_model",
                               [helper.make_tensor_value_info(name, onnx.TensorProto.STRING, ["batch"])
                                for name in inputs],
                               outputs, graph.initializers + ends.initializers + list(inner.initializer))
    # The front end's domains beside the ids model's own: the extensions', and ai.onnx.ml's LabelEncoder (the
    # string-to-id look-up of a tokenizer whose operator gives pieces).
    versions = {opset.domain: opset.version for opset in ids_model.opset_import} | {CONTRIB: 1}
    if any(node.domain == ML_DOMAIN for node in graph.nodes + ends.nodes):
        versions[ML_DOMAIN] = max(versions.get(ML_DOMAIN, 0), 2)  # LabelEncoder's keys_strings
    opsets = [helper.make_opsetid(domain, version) for domain, version in versions.items()]
    return helper.make_model(merged, opset_imports=opsets, ir_version=ids_model.ir_version,
                             producer_name="keras-bertology")


def check_texts(tokenizer, seq_len):
    """Texts a user sends, as bytes: empty and blank ones, accents, CJK, emoji, casing traps, a word of 300
    characters, a text over the length, invalid UTF-8, the literal mask token in several places."""
    texts = ["", " ", "\t\n ", "Hello, world!", "Café crème brûlée à l'hôtel", "東京は日本の首都です。",
             "emoji 😀👍🏽 and flags 🇫🇷", "İstanbul ǅemal ß ﬁ ＡＢＣ", "x" * 300 + " after a long word",
             " ".join(["words", "over", "the", "length,"] * seq_len), "spaces   inside\u00a0and\u3000out  ",
             "private-use \ue000 \ue000x"]
    texts = [text.encode() for text in texts] + [b"invalid \xff\xfe bytes \xc3", b"\xe2\x82"]
    if tokenizer.has_role("mask"):
        mask = tokenizer.vocabulary[tokenizer.mask_id]
        texts += [text.encode() for text in (f"a {mask} b", f"{mask}", f"x{mask}{mask}y ", f"the {mask}.  {mask}")]
    literal = _literal_tokens(tokenizer)
    texts += [f"a {token}, b{token}c {token}".encode() for token in literal] + ["".join(literal).encode() + b"x"]
    return [text for text in texts + [b"\xed\xa0\x80 a surrogate"] if tokenizer.onnx_reads(text)]


def _literal_tokens(tokenizer, most=8):
    """Up to `most` of the vocabulary's special and bracketed tokens ([CLS], </s>, <extra_id_0>,
    <|endoftext|>), which a user may write in text: the first and last of them."""
    vocabulary = tokenizer.vocabulary
    special = set(tokenizer.special_ids)
    tokens = [token for index, token in enumerate(vocabulary)
              if index in special or re.fullmatch(r"<[^<>\s]+>|\[[^\[\]\s]+\]", token)]
    return tokens if len(tokens) <= most else tokens[:most // 2] + tokens[-(most // 2):]


def check_pairs(tokenizer, seq_len):
    """(first texts, second texts) of a pair model's check: each check text beside another (the long ones
    beside short, empty and long ones, so that both trimming branches are taken) and two empty texts."""
    texts = check_texts(tokenizer, seq_len)
    long = next(text for text in texts if text.startswith(b"words over"))  # check_texts' text over the length
    firsts = texts + [long, long, b"a b c", b""]
    seconds = texts[::-1] + [long, b"a b c", long, b""]
    return firsts, seconds


def expected_front_end(family, tokenizer, seq_len, texts, second=None):
    """LAID_OUT of `texts` (bytes; and of the `second` texts of pairs) as the SavedModel packs them
    (TensorFlow)."""
    import tensorflow as tf

    from keras_bertology.data.packing import fit_to_batch
    from keras_bertology.export.saved_model import cut_text

    def cut(column):
        return None if column is None else cut_text(tf.constant(column), seq_len)

    packed = family.pack_text(tokenizer, seq_len, cut(texts), cut(second))
    return {name: value.numpy() for name, value in fit_to_batch(packed, packed["padding_mask"]).items()}


def run_without_tensorflow(model_path, batches, workdir):
    """[{output: array}] of the string model at `model_path` on each batch ({input name: texts (bytes)}), run by
    ONNX Runtime in a new process that never imports TensorFlow (whose RE2 the extensions' regular expressions
    clash with)."""
    workdir = Path(workdir)
    np.savez(workdir / "texts.npz", **{f"batch{i}/{name}": _as_bytes_array(texts) for i, batch in enumerate(batches)
                                       for name, texts in batch.items()})
    # Run from a folder of its own, not by path: the runner's folder holds this package's onnx.py, which would
    # shadow the onnx package.
    done = subprocess.run([sys.executable, "-c", RUN_BY_PATH, str(RUNNER), str(model_path),
                           str(workdir / "texts.npz"), str(workdir / "outputs.npz")],
                          cwd=workdir, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError(f"ONNX Runtime cannot run the string model ({last[:300]}); use the ids model")
    got = np.load(workdir / "outputs.npz")
    names = json.loads(str(got["names"]))
    return [{name: got[f"batch{i}/{name}"] for name in names} for i in range(len(batches))]


def _as_bytes_array(texts):
    """Texts as a NumPy bytes array one byte wider than the longest: how ONNX Runtime's Python binding passes
    bytes that are not UTF-8 into a graph (it reads each up to a NUL)."""
    return np.array(texts, dtype=f"S{max(map(len, texts), default=0) + 1}")
