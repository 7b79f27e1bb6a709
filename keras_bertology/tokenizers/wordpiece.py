"""BERT's WordPiece tokenizer in-graph, and learning its vocabulary from a corpus."""

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert
import tensorflow_text as tf_text
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as wordpiece_learner

from keras_bertology.errors import ConfigError, NotExpressible
from keras_bertology.tokenizers.base import (PathLike, Tokenizer, as_ragged_ids, check_training_input, read_bytes,
                                             register_tokenizer_type)
from keras_bertology.tokenizers.bert_text import (CJK_CHARS, MAX_BYTES_PER_WORD, ONNX_DELETED_CHARS, ONNX_PUNCTUATION,
                                                  PUNCTUATION, WHITESPACE, bert_normalize)
from keras_bertology.tokenizers.wordpiece_vocab import WordPieceVocabLearner

WORDPIECE_VOCAB_FILE = "vocab.txt"
WORDPIECE_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORDPIECE_SUFFIX = "##"
# The vocab learner's defaults: a piece must occur this often, and a
# vocabulary this much smaller than asked for is accepted.
_WORDPIECE_MIN_COUNT = 10
_WORDPIECE_SLACK = 0.05


@register_tokenizer_type
class WordPieceTokenizer(Tokenizer):
    """BERT WordPiece, giving the same ids as Hugging Face's BertTokenizer.

    Normalisation reproduces HF's BertNormalizer rather than
    `FastBertNormalizer` (which applies NFKC case folding: "…" -> "...",
    "ﬁ" -> "fi", "ß" -> "ss"), with HF's options: `clean_text` deletes
    control characters, `strip_accents` (None: follow `lower_case`, as HF
    does) applies NFD and drops combining marks, `lower_case` lower-cases.
    Words are split as HF's BertPreTokenizer does, CJK ideographs one per
    word when `chinese_chars`, then `FastWordpieceTokenizer` applies greedy
    longest-match WordPiece. Unlike HF, literal "[CLS]", "[MASK]" ... in
    text are not turned into special ids.
    """

    type_name = "wordpiece"

    def __init__(self, vocab: Sequence[str] | PathLike, lower_case: bool = True, strip_accents: bool | None = None,
                 chinese_chars: bool = True, clean_text: bool = True):
        tokens = _read_vocab_file(Path(vocab)) if isinstance(vocab, (str, os.PathLike)) else list(vocab)
        _check_wordpiece_vocab(tokens)
        pad, unk, cls, sep, mask = WORDPIECE_SPECIAL_TOKENS
        super().__init__(
            tokens,
            {"pad": pad, "cls": cls, "sep": sep, "mask": mask, "unk": unk},
            name="wordpiece_tokenizer",
        )
        if not clean_text and any("\x00" in token or "\x01" in token for token in tokens):
            raise ConfigError("WordPiece vocabulary has tokens with NUL or \\x01 characters: "
                              "only supported with clean_text on.")
        self.lower_case = bool(lower_case)
        self.options = dict(strip_accents=self.lower_case if strip_accents is None else bool(strip_accents),
                            chinese_chars=bool(chinese_chars), clean_text=bool(clean_text))
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=tokens,
            suffix_indicator=WORDPIECE_SUFFIX,
            max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32,
            unknown_token=unk,
            no_pretokenization=True,
            support_detokenization=True,
        )

    @classmethod
    def from_saved(cls, directory, config):
        options = {key: config[key] for key in ("strip_accents", "chinese_chars", "clean_text") if key in config}
        return cls(directory / WORDPIECE_VOCAB_FILE, lower_case=bool(config.get("lower_case", True)), **options)

    def _tokenize(self, strings):
        options = self.options
        normalized = bert_normalize(strings, self.lower_case, options["strip_accents"], options["clean_text"])
        kept = f"{PUNCTUATION}|{CJK_CHARS}" if options["chinese_chars"] else PUNCTUATION
        words = tf_text.regex_split(normalized, f"{WHITESPACE}|{kept}", kept)
        return self._wordpiece.tokenize(words).merge_dims(-2, -1)

    def onnx_tokenize(self, graph, texts):
        """Cased WordPiece as ONNX Runtime Extensions' operators: control characters deleted and words split by
        regular expressions (this module's rules for the extensions' older Unicode tables), a word over
        MAX_BYTES_PER_WORD bytes made the unknown token (the split's byte offsets measure it: the extensions'
        `WordpieceTokenizer` counts characters), then `WordpieceTokenizer` and a `LabelEncoder` to the ids.
        Lower-casing and accent stripping have no such form: NFD is not among the operators, and the
        extensions' `StringLower` changes other characters than TensorFlow's."""
        if self.lower_case or self.options["strip_accents"]:
            raise NotExpressible("its lower-casing and accent stripping (NFD) have no ONNX Runtime Extensions "
                                 "operator that rewrites text as tensorflow-text does")
        words, begins, ends, word_splits = self.onnx_words(graph, texts)
        unknown = self._tokens[self.unk_id]
        too_long = graph.op("Greater", graph.op("Sub", ends, begins), graph.scalar(MAX_BYTES_PER_WORD))
        words = graph.op("Where", too_long, graph.const([unknown]), words)
        vocab = json.dumps({token: index for index, token in enumerate(self._tokens)}, ensure_ascii=False)
        pieces, piece_splits, _, _ = graph.contrib(
            "WordpieceTokenizer", words, graph.const(np.zeros(0, np.int64)), outputs=4, vocab=vocab,
            suffix_indicator=WORDPIECE_SUFFIX, unknown_token=unknown, max_input_chars_per_word=MAX_BYTES_PER_WORD)
        ids = graph.op("LabelEncoder", pieces, domain="ai.onnx.ml", keys_strings=self._tokens,
                       values_int64s=list(range(len(self._tokens))), default_int64=self.unk_id)
        ids, piece_splits = _whole_words_unknown(graph, ids, piece_splits, self.unk_id)
        return ids, graph.op("Gather", piece_splits, word_splits)

    def onnx_words(self, graph, texts):
        """(words [N], their byte offsets' begins and ends, row splits [B + 1]) of the [B] strings `texts`, as
        the extensions' operators split them: `bert_normalize`'s deletions, then `_tokenize`'s word split."""
        if self.options["clean_text"]:
            texts = graph.contrib("StringRegexReplace", texts, graph.const([ONNX_DELETED_CHARS]), graph.const([""]))
        kept = f"{ONNX_PUNCTUATION}|{CJK_CHARS}" if self.options["chinese_chars"] else ONNX_PUNCTUATION
        return graph.contrib("StringRegexSplitWithOffsets", texts, graph.const([f"({WHITESPACE}|{kept})"]),
                             graph.const([f"({kept})"]), outputs=4)  # the extensions' split needs groups

    def detokenize(self, ids):
        """Words joined by spaces, pieces merged: "hello , world" for "Hello, world"."""
        return self._wordpiece.detokenize(as_ragged_ids(ids))

    @property
    def word_start_table(self):
        return np.array([not token.startswith(WORDPIECE_SUFFIX) for token in self._tokens], dtype=bool)

    def save(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        text = "".join(token + "\n" for token in self._tokens)
        (directory / WORDPIECE_VOCAB_FILE).write_text(text, encoding="utf-8")
        # Only options off BERT's defaults are written, so default configs stay as older versions wrote them.
        defaults = dict(strip_accents=self.lower_case, chinese_chars=True, clean_text=True)
        self._write_config(directory, self.lower_case,
                           **{key: value for key, value in self.options.items() if value != defaults[key]})


def _whole_words_unknown(graph, ids, splits, unk_id):
    """(ids, row splits) with each word (a row of `splits`) that holds an unknown piece made one unknown
    token: the extensions' `WordpieceTokenizer` keeps the pieces it matched before a character it cannot
    (`he ##l [UNK]`), where WordPiece makes the whole word unknown."""
    count = graph.op("Shape", ids)
    word = graph.row_of_each(splits, count)
    starts, lengths = graph.rows(splits)
    unknown = graph.op("Cast", graph.op("Equal", ids, graph.scalar(unk_id)), to=7)  # 7: int64
    holds = graph.op("ScatterElements", graph.zeros(graph.op("Shape", lengths)), word, unknown, reduction="max")
    holds = graph.op("Cast", holds, to=9)  # 9: bool, per word
    first = graph.op("Equal", graph.op("Range", graph.scalar(0), graph.op("Squeeze", count), graph.scalar(1)),
                     graph.op("Gather", starts, word))
    kept = graph.op("Or", graph.op("Not", graph.op("Gather", holds, word)), first)
    ids = graph.op("Where", graph.op("Gather", holds, word), graph.scalar(unk_id), ids)
    lengths = graph.op("Where", holds, graph.scalar(1), lengths)
    return (graph.op("Compress", ids, kept, axis=0),
            graph.op("Concat", graph.const([0], np.int64), graph.op("CumSum", lengths, graph.scalar(0)), axis=0))


def train_wordpiece(sentences: Sequence[str], vocab_size: int, lower_case: bool = True) -> WordPieceTokenizer:
    """Learn a WordPiece vocabulary with tensorflow_text's BERT vocab tools.

    These are the two steps of `bert_vocab_from_dataset`: count the words
    (sentences get `WordPieceTokenizer`'s normalisation and BERT's word
    splitting, so the pieces match what the tokenizer sees), then learn the
    vocabulary its learner makes (`WordPieceVocabLearner`), here with a faster
    threshold search (`_learn_wordpiece_vocab`).
    The result has at most `vocab_size` tokens, within 5% of it unless the
    corpus is too small: a piece must occur at least 10 times, which caps
    the 0.9 M-word Shakespeare corpus at about 6,300 tokens. [PAD] [UNK]
    [CLS] [SEP] [MASK] get ids 0-4.
    """
    check_training_input(sentences, vocab_size, minimum=len(WORDPIECE_SPECIAL_TOKENS) + 1)
    normalized = (
        tf.data.Dataset.from_tensor_slices(tf.constant(list(sentences), tf.string))
        .batch(4096)
        .map(do_not_convert(lambda batch: bert_normalize(batch, lower_case, strip_accents=lower_case)))
    )
    words = normalized.map(do_not_convert(BasicTokenizer(lower_case=False).tokenize))
    word_counts = wordpiece_learner.count_words(words)
    # Every character and its ## form stay in the vocabulary, so fail fast.
    alphabet_size = len(set().union(*word_counts))
    if len(WORDPIECE_SPECIAL_TOKENS) + 2 * alphabet_size > vocab_size:
        raise ConfigError(
            f"vocab_size {vocab_size} is too small: the corpus has {alphabet_size} distinct "
            f"characters, which with their ## forms and the specials need about "
            f"{len(WORDPIECE_SPECIAL_TOKENS) + 2 * alphabet_size} tokens."
        )
    vocab = _learn_wordpiece_vocab(word_counts, vocab_size)
    return WordPieceTokenizer(vocab, lower_case=lower_case)


def _learn_wordpiece_vocab(word_counts: dict[str, int], vocab_size: int) -> list[str]:
    """Search the count threshold, one vocabulary per try.

    tensorflow_text's learner bisects the threshold linearly between 10 and
    the top word count: about 16 tries. Vocabulary size falls roughly as a
    power of the threshold, so trying the lowest threshold first, then
    geometric midpoints until one fits, then log-log interpolation, needs
    3-5 tries.
    """
    vocab_at = WordPieceVocabLearner(word_counts, WORDPIECE_SPECIAL_TOKENS).vocabulary

    low, high = _WORDPIECE_MIN_COUNT, max(word_counts.values()) + 1
    low_size = len(best := vocab_at(low))
    if low_size <= vocab_size:
        return best
    best, high_size = None, None
    while high - low > 1:
        threshold = _next_threshold(low, low_size, high, high_size, vocab_size * (1 - _WORDPIECE_SLACK / 2))
        vocab = vocab_at(threshold)
        if len(vocab) > vocab_size:
            low, low_size = threshold, len(vocab)
            continue
        best, high, high_size = vocab, threshold, len(vocab)
        if vocab_size - len(vocab) <= _WORDPIECE_SLACK * vocab_size:
            break
    if best is None:
        raise ConfigError(
            f"vocab_size {vocab_size} is too small for this corpus: the smallest vocabulary "
            f"the learner makes has {low_size} tokens."
        )
    return best


def _next_threshold(low: int, low_size: int, high: int, high_size: int | None, target: float) -> int:
    """Log-log interpolation towards `target` size; the geometric midpoint while no size fits."""
    if high_size is None:
        guess = math.sqrt(low * high)
    else:
        fraction = math.log(low_size / target) / math.log(low_size / high_size)
        guess = low * (high / low) ** fraction
    return min(max(round(guess), low + 1), high - 1)


def _read_vocab_file(path: Path) -> list[str]:
    """One token per line, UTF-8; only the newline is stripped, as in BERT."""
    data = read_bytes(path, "WordPiece vocabulary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"WordPiece vocabulary {path} is not UTF-8 (bad byte at offset {error.start})."
        ) from None
    tokens = text.split("\n")
    if tokens[-1] == "":
        tokens.pop()
    return tokens


def _check_wordpiece_vocab(tokens: list[str]) -> None:
    """Reject vocabularies that would tokenize wrongly instead of failing later."""
    if not tokens:
        raise ConfigError("WordPiece vocabulary is empty.")
    seen = {}
    for line, token in enumerate(tokens, start=1):
        if not token.strip():
            raise ConfigError(f"WordPiece vocabulary has an empty token at line {line}.")
        if token in seen:
            raise ConfigError(f"WordPiece vocabulary repeats {token!r} (lines {seen[token]} and {line}).")
        seen[token] = line
    missing = [token for token in WORDPIECE_SPECIAL_TOKENS if token not in seen]
    if missing:
        raise ConfigError(f"WordPiece vocabulary lacks the special tokens {missing}.")
    if len(seen) == len(WORDPIECE_SPECIAL_TOKENS):
        raise ConfigError("WordPiece vocabulary holds only the special tokens: every word would be [UNK].")
