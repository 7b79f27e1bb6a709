"""GPT-2 / RoBERTa byte-level BPE as TensorFlow ops, with Hugging Face's ids.

Real RoBERTa and GPT-2 checkpoints ship this tokenizer (`vocab.json` + `merges.txt`, or
`tokenizer.json`); running it in-graph lets their SavedModel take raw strings.
The steps are GPT-2's:

1. Pre-tokenize with GPT-2's pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+|
   ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`. RE2 has no look-ahead, so a sentinel is
   first put before the last whitespace character of every run of two or more
   that precedes a non-space: the run then splits where `\\s+(?!\\S)` would end
   it, and a last plain space becomes the prefix of the next word.
2. Map every UTF-8 byte to GPT-2's printable stand-in character.
3. Merge adjacent symbols, the pair of lowest merge rank first, until no pair
   has a rank: one merge per word and loop step, for all the distinct words of
   a batch at once (BPE
   ranks make this equal to GPT-2's all-occurrences merge: a pair that
   contains a merged symbol always ranks after the merge that made it).
4. Look the symbols up in the vocabulary.

`\\s` means Unicode White_Space, as in Hugging Face's tokenizers. The private-
use character U+E000 serves as the sentinel and is dropped from input text.
Literal special tokens in text ("<s>", "</s>") are tokenized as text, unlike
Hugging Face; only `<mask>` is mapped to its id (see `data.packing`).
"""

import json
import re
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_bertology.data.packing import WHITESPACE
from keras_bertology.errors import ConfigError
from keras_bertology.tokenizers.base import (
    CONFIG_FILE,
    DEFAULT_SPECIAL_TOKENS,
    Tokenizer,
    as_ragged_ids,
    is_utf8,
    read_json_object,
    register_tokenizer_type,
    tokens_by_id,
)

VOCAB_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
WORD_START = "\u0120"  # GPT-2's stand-in for the space byte
GPT2_END_OF_TEXT = "<|endoftext|>"
# One well-formed UTF-8 sequence (Unicode's table 3-7), as bytes.
UTF8_SEQUENCE = (r"[\x00-\x7F]|[\xC2-\xDF][\x80-\xBF]|\xE0[\xA0-\xBF][\x80-\xBF]|[\xE1-\xEC\xEE\xEF][\x80-\xBF]{2}"
                 r"|\xED[\x80-\x9F][\x80-\xBF]|\xF0[\x90-\xBF][\x80-\xBF]{2}|[\xF1-\xF3][\x80-\xBF]{3}"
                 r"|\xF4[\x80-\x8F][\x80-\xBF]{2}")

BOOL = 9  # onnx.TensorProto.BOOL
_SENTINEL = "\ue000"
_SPACE, _NON_SPACE = f"[{WHITESPACE}]", f"[^{WHITESPACE}]"
_WORDS = (rf"'s|'t|'re|'ve|'m|'ll|'d| ?\p{{L}}+| ?\p{{N}}+| ?[^{WHITESPACE}\p{{L}}\p{{N}}{_SENTINEL}]+"
          rf"|{_SPACE}+")
_NO_RANK = np.iinfo(np.int32).max


def byte_symbols():
    """GPT-2's map from each byte to a printable character: printable Latin-1 stays itself,
    the other bytes take the code points from 256 upwards, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in kept:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


@register_tokenizer_type
class ByteLevelBPETokenizer(Tokenizer):
    """GPT-2's and RoBERTa's byte-level BPE, in-graph, giving the ids of Hugging Face's tokenizers.

    Args:
        vocab: token -> id mapping, or the path of a `vocab.json`.
        merges: list of (left, right) pairs, highest priority first, or the
            path of a `merges.txt`.
        mask_lstrip: bool, whether a literal `<mask>` in text takes the spaces
            before it, as roberta-base's does ("the <mask> of" -> 'Ġthe',
            '<mask>', 'Ġof'); Hugging Face records it per tokenizer.
        special_tokens: role -> token string (see `tokenizers.base`), RoBERTa's
            by default; GPT-2's for its vocabulary (`models.gpt.tokenizer`).
    """

    type_name = "byte_bpe"

    def __init__(self, vocab, merges, mask_lstrip=True, special_tokens=None):
        vocab = _read_vocab_json(Path(vocab)) if isinstance(vocab, (str, Path)) else vocab
        merges = _read_merges(Path(merges)) if isinstance(merges, (str, Path)) else [tuple(m) for m in merges]
        tokens = tokens_by_id(vocab)
        special_tokens = dict(special_tokens or DEFAULT_SPECIAL_TOKENS)
        missing = sorted({token for token in special_tokens.values() if token not in vocab})
        if missing:
            raise ConfigError(f"byte-level BPE vocabulary lacks the special tokens {missing}")
        _check_merges(merges, vocab)
        super().__init__(tokens, special_tokens, name="byte_bpe_tokenizer")
        self.special_tokens = special_tokens
        self.mask_lstrip = bool(mask_lstrip)
        self._merges = merges
        symbols = byte_symbols()
        self._byte_table = _table([bytes([b]) for b in range(256)], [symbols[b] for b in range(256)], "")
        self._unbyte_table = _table([symbols[b] for b in range(256)], [bytes([b]) for b in range(256)], "")
        self._rank_table = _table([f"{left} {right}" for left, right in merges], np.arange(len(merges), dtype=np.int32),
                                  _NO_RANK)
        # Every byte is a token, so nothing is unknown; a vocabulary without <unk> falls back to padding.
        fallback = self.unk_id if self.has_role("unk") else self.pad_id
        self._id_table = _table(tokens, np.arange(len(tokens), dtype=np.int32), fallback)
        self._token_strings = tf.constant(tokens)

    @classmethod
    def from_files(cls, directory, mask_lstrip=True, special_tokens=None):
        """Load `vocab.json` + `merges.txt` (as transformers 4 writes them for RoBERTa and GPT-2)."""
        directory = Path(directory)
        return cls(directory / VOCAB_FILE, directory / MERGES_FILE, mask_lstrip=mask_lstrip,
                   special_tokens=special_tokens)

    @classmethod
    def from_saved(cls, directory, config):
        return cls.from_files(directory, mask_lstrip=config.get("mask_lstrip", True),
                              special_tokens=config.get("special_tokens"))

    word_prefix = " "

    @property
    def merges(self):
        """The merges, (left, right) pairs, highest priority first."""
        return list(self._merges)

    @property
    def strips_space_before_mask(self):
        return self.mask_lstrip

    def _tokenize(self, strings):
        words = _pretokenize(strings)
        # Each distinct word is merged once: text repeats its words many times over, and every step of the
        # merge loop works on all the words it carries (the study's 4 MB of news, 1 thread: 69 s -> 12 s).
        distinct, word_index = tf.unique(words.flat_values)
        symbols = self._byte_table.lookup(tf.strings.bytes_split(distinct))
        merged = _merge_all(symbols, self._rank_table)
        ids = self._id_table.lookup(merged.flat_values)
        per_distinct = tf.RaggedTensor.from_row_splits(ids, merged.row_splits, validate=False)
        per_word = tf.gather(per_distinct, word_index)
        per_string = tf.RaggedTensor.from_row_splits(per_word, words.row_splits, validate=False)
        return per_string.merge_dims(1, 2)

    onnx_unreadable_texts = f"texts that are not UTF-8 or hold a literal {GPT2_END_OF_TEXT}"

    def onnx_reads(self, text):
        """ONNX Runtime Extensions' GPT2Tokenizer reads a literal <|endoftext|> as a special token wherever it
        is in text (as transformers' GPT-2 tokenizer does), and bytes that are not UTF-8 as U+FFFD, where ours
        reads both as the text's bytes."""
        return is_utf8(text) and GPT2_END_OF_TEXT.encode() not in text

    def onnx_unreadable(self, graph, texts):
        """Texts that are not UTF-8, or that hold a literal <|endoftext|> (see `onnx_reads`), read byte by byte
        (ECMAScript's regular expressions read bytes; RE2 takes overlong forms and surrogates for characters).
        A batch of ASCII texts, UTF-8 by construction, skips the UTF-8 check: its pattern, compiled on every
        call, was most of the check's time (0.19 of 0.20 ms on a short text; 3.0 ms on 32 of 600 characters,
        0.6 ms without it)."""
        def leftover(where, pattern):  # [B] bool: what the pattern's matches leave of each text is not empty
            rest = where.contrib("StringECMARegexReplace", texts, where.const([pattern]), where.const([""]))
            return where.op("Not", where.equals_text(rest, ""))

        non_ascii = leftover(graph, r"[\x00-\x7F]+")
        any_non_ascii = graph.op("Greater", graph.op("ReduceMax", graph.op("Concat", graph.const([0], np.int64),
                                                                          graph.op("Cast", non_ascii, to=7), axis=0),
                                                     keepdims=0), graph.scalar(0))  # 7: int64
        not_utf8 = graph.only_if(any_non_ascii, "utf8_check", lambda checked: leftover(checked, UTF8_SEQUENCE),
                                 non_ascii, BOOL)
        holds_end_of_text = graph.op("Not", graph.contrib(
            "StringEqual", graph.contrib("StringECMARegexReplace", texts, graph.const([re.escape(GPT2_END_OF_TEXT)]),
                                         graph.const([""])), texts))  # same shapes
        return graph.op("Or", not_utf8, holds_end_of_text)

    def onnx_tokenize(self, graph, texts):
        """The extensions' GPT2Tokenizer on this vocabulary and merges, after dropping U+E000 as `_pretokenize`
        does."""
        texts = graph.contrib("StringRegexReplace", texts, graph.const([_SENTINEL]), graph.const([""]))
        vocab = json.dumps({token: index for index, token in enumerate(self._tokens)}, ensure_ascii=False)
        merges = "\n".join(["#version: 0.2", *(f"{left} {right}" for left, right in self._merges)]) + "\n"
        ids, kept = graph.contrib("GPT2Tokenizer", texts, outputs=2, vocab=vocab, merges=merges, padding_length=-1)
        flat = graph.op("Reshape", ids, graph.const([-1], np.int64))
        ids = graph.op("Compress", flat, graph.op("Cast", graph.op("Reshape", kept, graph.const([-1], np.int64)),
                                                 to=9), axis=0)  # 9: bool
        lengths = graph.op("ReduceSum", kept, graph.const([1], np.int64), keepdims=0)
        return ids, graph.op("Concat", graph.const([0], np.int64), graph.op("CumSum", lengths, graph.scalar(0)),
                             axis=0)

    def detokenize(self, ids):
        """The text of the ids: token strings joined, stand-in characters turned back into bytes."""
        ids = as_ragged_ids(ids)
        text = tf.strings.reduce_join(tf.gather(self._token_strings, ids), axis=-1)
        characters = tf.strings.unicode_split(text, "UTF-8")
        return tf.strings.reduce_join(self._unbyte_table.lookup(characters), axis=-1)

    @property
    def word_start_table(self):
        table = np.array([token.startswith(WORD_START) for token in self._tokens], dtype=bool)
        table[self.special_ids] = True
        return table

    def save(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        vocab = {token: index for index, token in enumerate(self._tokens)}
        (directory / VOCAB_FILE).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        lines = ["#version: 0.2", *(f"{left} {right}" for left, right in self._merges)]
        (directory / MERGES_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
        config = {"type": self.type_name, "mask_lstrip": self.mask_lstrip, "special_tokens": self.special_tokens,
                  **self._layout_config()}
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _table(keys, values, default):
    # The key type is explicit: a merges file may list no merges at all (a vocabulary of bytes only).
    initializer = tf.lookup.KeyValueTensorInitializer(tf.constant(keys, dtype=tf.string), tf.constant(values))
    return tf.lookup.StaticHashTable(initializer, default_value=default)


def _pretokenize(strings):
    """[N] strings -> [N, (words)] GPT-2 pre-tokens (see the module docstring)."""
    strings = tf.strings.regex_replace(strings, _SENTINEL, "")
    marked = tf.strings.regex_replace(strings, f"({_SPACE})({_SPACE})({_NON_SPACE})",
                                      rf"\1{_SENTINEL}\2\3")
    return tf_text.regex_split(marked, f"{_WORDS}|{_SENTINEL}", _WORDS)


def _merge_all(symbols, rank_table):
    """Apply BPE merges to every word of the ragged [W, (symbols)] string tensor."""

    def has_pairs(values, lengths):
        ranks = _pair_ranks(tf.RaggedTensor.from_row_lengths(values, lengths), rank_table)
        return tf.reduce_any(ranks.flat_values < _NO_RANK)

    def merge_once(values, lengths):
        words = tf.RaggedTensor.from_row_lengths(values, lengths)
        ranks = _pair_ranks(words, rank_table).to_tensor(_NO_RANK)
        best = tf.reduce_min(ranks, axis=1, keepdims=True)
        positions = tf.range(tf.shape(ranks)[1])[None, :]
        first = tf.reduce_min(tf.where((ranks == best) & (best < _NO_RANK), positions, tf.int32.max), axis=1)
        dense = words.to_tensor("")
        columns = tf.range(tf.shape(dense)[1])[None, :]
        following = tf.pad(dense[:, 1:], [[0, 0], [0, 1]])
        joined = tf.where(columns == first[:, None], tf.strings.join([dense, following]), dense)
        keep = tf.sequence_mask(words.row_lengths(), tf.shape(dense)[1]) & (columns != first[:, None] + 1)
        merged = tf.ragged.boolean_mask(joined, keep)
        return merged.flat_values, merged.row_lengths()

    values, lengths = tf.while_loop(
        has_pairs, merge_once, (symbols.flat_values, symbols.row_lengths()),
        shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None])),
    )
    return tf.RaggedTensor.from_row_lengths(values, lengths)


def _pair_ranks(words, rank_table):
    """Merge rank of each adjacent symbol pair, [W, (symbols - 1)]; _NO_RANK where none."""
    pairs = tf.strings.join([words[:, :-1], words[:, 1:]], separator=" ")
    return tf.ragged.map_flat_values(rank_table.lookup, pairs)


def _read_vocab_json(path):
    return read_json_object(path, "byte-level BPE vocabulary")


def _read_merges(path):
    if not path.is_file():
        raise ConfigError(f"byte-level BPE merges not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path} is not UTF-8 (bad byte at offset {error.start})") from None
    merges = []
    for number, line in enumerate(lines, start=1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        pair = tuple(line.split(" "))
        if len(pair) != 2 or not all(pair):
            raise ConfigError(f"{path} line {number} is not a pair of symbols: {line!r}")
        merges.append(pair)
    return merges


def _check_merges(merges, vocab):
    for left, right in merges:
        if left + right not in vocab:
            raise ConfigError(f"merge {left!r} + {right!r} makes {left + right!r}, which is not in the vocabulary")
