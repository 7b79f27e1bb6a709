"""In-graph tokenizers: BERT WordPiece and SentencePiece (RoBERTa-style specials).

Both are `tf.Module`s built on tensorflow_text ops, so `tokenize` runs in
eager mode, inside `tf.function` and inside `tf.data` maps, and the lookup
tables travel with a SavedModel (the loader only needs `import
tensorflow_text`). Neither adds special tokens: the data pipeline places
[CLS]/[SEP] itself.
"""

from __future__ import annotations

import abc
import io
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert
import tensorflow_text as tf_text
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as wordpiece_learner

from keras_bertology.data.wordpiece_vocab import WordPieceVocabLearner
from keras_bertology.errors import ConfigError, CorpusError

PathLike = str | os.PathLike

CONFIG_FILE = "tokenizer.json"
WORDPIECE_VOCAB_FILE = "vocab.txt"
SENTENCEPIECE_MODEL_FILE = "sentencepiece.model"

WORDPIECE_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WORDPIECE_SUFFIX = "##"
# Hugging Face limits words to 100 characters, tensorflow_text to bytes: the
# same for ASCII, but a word over 100 bytes and within 100 characters is
# split into pieces by HF and becomes [UNK] here.
MAX_BYTES_PER_WORD = 100
# The vocab learner's defaults: a piece must occur this often, and a
# vocabulary this much smaller than asked for is accepted.
_WORDPIECE_MIN_COUNT = 10
_WORDPIECE_SLACK = 0.05

# Special-token roles and pieces, in id order (the mask last): RoBERTa's, and ALBERT's.
ROBERTA_SPECIAL_TOKENS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
ALBERT_SPECIAL_TOKENS = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
XLNET_SPECIAL_TOKENS = {"unk": "<unk>", "cls": "<cls>", "sep": "<sep>", "pad": "<pad>", "mask": "<mask>"}
SPECIAL_ROLES = ("cls", "pad", "sep", "unk", "mask")
# The roles every SentencePiece vocabulary has; cls and mask are optional (T5 has neither).
REQUIRED_ROLES = ("pad", "sep", "unk")
# T5's: pad 0, end of sequence 1, unk 2, no beginning token and no mask.
# DeBERTa's: [PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3 (its published vocabularies end with [MASK]).
DEBERTA_SPECIAL_TOKENS = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}
T5_SPECIAL_TOKENS = {"pad": "<pad>", "sep": "</s>", "unk": "<unk>"}
T5_SENTINELS = 100  # <extra_id_0> .. <extra_id_99> after T5's pieces, <extra_id_0> the last id
SENTENCEPIECE_WORD_START = "\u2581"

# Control characters that Hugging Face's BERT normaliser deletes: NUL,
# U+FFFD and every category-C character except tab, newline and return.
_BERT_DELETED_CHARS = r"[\x{0}\x{FFFD}]|[^\P{C}\t\n\r]"
# Hugging Face's BertPreTokenizer splits words on Rust's `char::is_whitespace`
# (Unicode White_Space; RE2's \s is ASCII only) and isolates punctuation
# (ASCII symbols and Unicode P*); its normaliser isolates CJK ideographs
# (these ranges) unless tokenize_chinese_chars is off.
_WHITESPACE_RANGES = (r"\t\n\x{0B}\x{0C}\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}"
                      r"\x{205F}\x{3000}")
_PUNCTUATION_RANGES = r"!-/:-@\[-`{-~\p{P}"
_CJK_RANGES = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
               r"\x{2B740}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")
_BERT_WHITESPACE = f"[{_WHITESPACE_RANGES}]+"
_BERT_PUNCTUATION = f"[{_PUNCTUATION_RANGES}]"
_CJK_CHARS = f"[{_CJK_RANGES}]"
# A character that ends a word as BERT's pre-tokenizer delimits words (one of the above): a run of other
# characters longer than MAX_BYTES_PER_WORD is one [UNK] however long it runs.
WORD_DELIMITER = f"[{_WHITESPACE_RANGES}{_PUNCTUATION_RANGES}{_CJK_RANGES}]"


class Tokenizer(tf.Module, metaclass=abc.ABCMeta):
    """Common interface: string tensor [N] in, int32 ragged ids [N, None] out.

    Subclasses provide `_tokenize`, `detokenize`, `save` and the token
    strings; ids of the specials are looked up by their token string.
    """

    type_name: str

    def __init__(
        self,
        vocabulary: Sequence[str],
        special_tokens: dict[str, str],
        name: str,
        control_ids: Sequence[int] = (),
    ):
        super().__init__(name=name)
        # A numpy array is not tracked by tf.Module, so it never enters a SavedModel.
        self._tokens = np.array(vocabulary, dtype=object)
        index = {token: i for i, token in enumerate(vocabulary)}
        self._special = {role: index[token] for role, token in special_tokens.items()}
        self._special_ids = sorted(set(self._special.values()) | set(control_ids))

    @classmethod
    def from_preset(cls, name_or_path: PathLike, weights=None) -> "Tokenizer":
        """The tokenizer of a run folder of this library, a Hugging Face folder or `hf://ORG/NAME[@REVISION]`
        repository (its in-graph equivalent). A preset name fixes only sizes (the vocabulary is learned
        from a corpus), unless `weights="pretrained"` asks for its published repository's."""
        from keras_bertology import preset_loading

        return preset_loading.tokenizer(cls, name_or_path, weights)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Token ids of each string, int32 ragged [N, None]; no specials added."""
        return self._tokenize(strings)

    @abc.abstractmethod
    def _tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """The tokenizer-specific graph behind `tokenize`."""

    @abc.abstractmethod
    def detokenize(self, ids) -> tf.Tensor:
        """Best-effort text of ids [N, None] (ragged, dense or lists); for debugging."""

    @abc.abstractmethod
    def save(self, directory: PathLike) -> None:
        """Write the vocabulary assets and tokenizer.json into `directory`."""

    @property
    def vocabulary(self) -> list[str]:
        """Token strings; the index is the id."""
        return self._tokens.tolist()

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def _role(self, role: str) -> int:
        if role not in self._special:
            raise ConfigError(f"this {self.type_name} tokenizer has no {role} token (it has "
                              f"{', '.join(sorted(self._special))})")
        return self._special[role]

    def has_role(self, role: str) -> bool:
        """Whether a special token plays `role` ("mask", "eot", ...): a causal LM's vocabulary has no mask."""
        return role in self._special

    def optional_id(self, role: str) -> int | None:
        """The id of `role`, None where the vocabulary has no such token (T5's has no cls)."""
        return self._special.get(role)

    @property
    def pad_id(self) -> int:
        return self._role("pad")

    @property
    def cls_id(self) -> int:
        return self._role("cls")

    @property
    def sep_id(self) -> int:
        return self._role("sep")

    @property
    def mask_id(self) -> int:
        return self._role("mask")

    @property
    def unk_id(self) -> int:
        return self._role("unk")

    @property
    def eot_id(self) -> int:
        """End of text: what a causal LM predicts after a document's last token, and stops generating at."""
        return self._role("eot")

    # What a word tokenized alone is written after, to get the pieces it has inside text: byte-level BPE
    # spells a word after a space differently (RoBERTa's "Ġking", not "king"), so a tagger's words need one
    # (Hugging Face's `add_prefix_space`); WordPiece and SentencePiece pieces do not depend on it.
    word_prefix = ""

    @property
    def special_ids(self) -> list[int]:
        """Sorted ids of pad, cls, sep, mask, unk and other control tokens: never text."""
        return list(self._special_ids)

    @property
    @abc.abstractmethod
    def word_start_table(self) -> np.ndarray:
        """Bool [vocab_size]: True where a token begins a word (whole-word masking)."""

    # How text is laid out around this vocabulary's specials where it is not the family's way: a converted
    # checkpoint's, recorded from its Hugging Face tokenizer ({"single": [[piece, segment id], ...], "pair":
    # ...}, a piece "$A", "$B" or a token; `data.packing.layout_packer`). Kept as JSON text, which tf.Module
    # does not track into a SavedModel. None: the family's layout.
    _layout_json = "null"

    @property
    def layout(self) -> dict | None:
        return json.loads(self._layout_json)

    def with_layout(self, layout: dict | None) -> "Tokenizer":
        """This tokenizer, laying text out as `layout` says (see `layout`); saved and loaded with it."""
        if layout is not None:
            from keras_bertology.data.packing import TEXT_PIECES

            try:
                layout = {kind: [[str(piece), int(segment)] for piece, segment in layout[kind]]
                          for kind in ("single", "pair")}
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"a text layout is {{'single': [[piece, segment id], ...], 'pair': ...}}; "
                                  f"got {layout!r}") from None
            unknown = sorted({piece for template in layout.values() for piece, _ in template
                              if piece not in TEXT_PIECES and piece not in self._tokens})
            if unknown:
                raise ConfigError(f"the text layout names tokens the vocabulary lacks: {unknown}")
        self._layout_json = json.dumps(layout)
        return self

    @property
    def layout_ids(self) -> dict | None:
        """`layout` with its tokens as ids, what `data.packing.layout_packer` takes; None without one."""
        from keras_bertology.data.packing import TEXT_PIECES

        layout = self.layout
        if layout is None:
            return None
        return {kind: [[piece if piece in TEXT_PIECES else int(np.flatnonzero(self._tokens == piece)[0]), segment]
                       for piece, segment in template] for kind, template in layout.items()}

    def _layout_config(self) -> dict:
        """The config file's entry for `layout`: none without one."""
        layout = self.layout
        return {} if layout is None else {"layout": layout}

    def _write_config(self, directory: Path, lower_case: bool, **extra) -> None:
        config = {"type": self.type_name, "lower_case": lower_case, **extra, **self._layout_config()}
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


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

    def _tokenize(self, strings):
        options = self.options
        normalized = bert_normalize(strings, self.lower_case, options["strip_accents"], options["clean_text"])
        kept = f"{_BERT_PUNCTUATION}|{_CJK_CHARS}" if options["chinese_chars"] else _BERT_PUNCTUATION
        words = tf_text.regex_split(normalized, f"{_BERT_WHITESPACE}|{kept}", kept)
        return self._wordpiece.tokenize(words).merge_dims(-2, -1)

    def detokenize(self, ids):
        """Words joined by spaces, pieces merged: "hello , world" for "Hello, world"."""
        return self._wordpiece.detokenize(_as_ragged_ids(ids))

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


class SentencePieceTokenizer(Tokenizer):
    """SentencePiece model run in-graph by tensorflow_text, with the special pieces it names.

    `special_tokens` maps the roles cls, pad, sep, unk and mask to pieces of
    the model (RoBERTa's <s> <pad> </s> <unk> <mask> by default, ALBERT's
    [CLS] [SEP] [MASK] <pad> <unk> with `ALBERT_SPECIAL_TOKENS`); it is saved
    with the model, so a tokenizer loads back with its own specials. Word
    starts are pieces beginning with "▁" plus the specials; byte-fallback
    pieces (<0x00>..<0xFF>) continue the word begun by the "▁" before them.
    """

    type_name = "sentencepiece"

    def __init__(self, model_proto: bytes | PathLike, special_tokens: dict | None = None,
                 lower_case: bool = False, strip_accents: bool = False, replace_quotes: bool = False,
                 sentinels: int = 0):
        if isinstance(model_proto, (str, os.PathLike)):
            model_proto = _read_bytes(Path(model_proto), "SentencePiece model")
        model_proto = bytes(model_proto)
        special_tokens = dict(special_tokens or ROBERTA_SPECIAL_TOKENS)
        _check_roles(special_tokens)
        processor = _load_sentencepiece(model_proto)
        pieces = sentencepiece_pieces(model_proto)
        missing = [token for token in special_tokens.values() if token not in pieces]
        if missing:
            raise ConfigError(
                f"SentencePiece model lacks the special pieces {missing}; train it with "
                "train_sentencepiece() and the same special_tokens."
            )
        super().__init__(
            pieces,
            special_tokens,
            name="sentencepiece_tokenizer",
            control_ids=[i for i in range(len(pieces)) if processor.is_control(i)],
        )
        self.special_tokens = special_tokens
        self.preprocessing = dict(lower_case=lower_case, strip_accents=strip_accents, replace_quotes=replace_quotes)
        self.sentinels = sentinels
        self._model_proto = model_proto
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=self._model_proto, out_type=tf.int32)
        self._lone_word_start = pieces.index(SENTENCEPIECE_WORD_START) \
            if sentinels and SENTENCEPIECE_WORD_START in pieces else None

    def _tokenize(self, strings):
        strings = _sentencepiece_preprocess(strings, **self.preprocessing)
        if self.sentinels:
            strings = _space_after_sentinels(strings)
        ids = self._sentencepiece.tokenize(strings)
        return ids if self._lone_word_start is None else self._drop_word_starts_before_sentinels(ids)

    def _drop_word_starts_before_sentinels(self, ids):
        """Ids without the lone "▁" that a space before a sentinel becomes: pretraining's inputs have a
        sentinel where the span's pieces were, "▁" included, and Hugging Face's T5 tokenizer splits
        sentinels out of the text before SentencePiece sees the space."""
        flat, rows = ids.flat_values, ids.value_rowids()
        following = tf.concat([flat[1:], [-1]], axis=0)
        same_row = tf.concat([tf.equal(rows[1:], rows[:-1]), [False]], axis=0)
        lone = tf.equal(flat, self._lone_word_start) & same_row & (following >= self.vocab_size - self.sentinels)
        return tf.ragged.boolean_mask(ids, tf.RaggedTensor.from_nested_row_splits(~lone, ids.nested_row_splits))

    def detokenize(self, ids):
        """Decoded text, byte-fallback pieces turned back into characters."""
        return self._sentencepiece.detokenize(_as_ragged_ids(ids))

    @property
    def word_start_table(self):
        table = np.array([token.startswith(SENTENCEPIECE_WORD_START) for token in self._tokens], dtype=bool)
        table[self.special_ids] = True
        return table

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._model_proto

    def save(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / SENTENCEPIECE_MODEL_FILE).write_bytes(self._model_proto)
        self._write_config(directory, special_tokens=self.special_tokens, **self.preprocessing,
                           **({"sentinels": self.sentinels} if self.sentinels else {}))


def load_tokenizer(directory: PathLike) -> Tokenizer:
    """Rebuild a tokenizer written by `Tokenizer.save`, with its text layout."""
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise ConfigError(f"No {CONFIG_FILE} in {directory}: not a saved keras-bertology tokenizer.")
    config = read_json_object(config_path, "tokenizer configuration")
    return _tokenizer_of_config(directory, config_path, config).with_layout(config.get("layout"))


def _tokenizer_of_config(directory: Path, config_path: Path, config: dict) -> Tokenizer:
    from keras_bertology.data.byte_bpe import ByteLevelBPETokenizer
    from keras_bertology.data.word_tokenizer import WORDS_FILE, WordTokenizer

    kind = config.get("type")
    if kind == WordPieceTokenizer.type_name:
        options = {key: config[key] for key in ("strip_accents", "chinese_chars", "clean_text") if key in config}
        return WordPieceTokenizer(directory / WORDPIECE_VOCAB_FILE, lower_case=bool(config.get("lower_case", True)),
                                  **options)
    if kind == SentencePieceTokenizer.type_name:
        preprocessing = {key: bool(config.get(key, False)) for key in ("lower_case", "strip_accents", "replace_quotes")}
        return SentencePieceTokenizer(directory / SENTENCEPIECE_MODEL_FILE, config.get("special_tokens"),
                                      **preprocessing, sentinels=int(config.get("sentinels", 0)))
    if kind == ByteLevelBPETokenizer.type_name:
        return ByteLevelBPETokenizer.from_files(directory, mask_lstrip=config.get("mask_lstrip", True),
                                                special_tokens=config.get("special_tokens"))
    if kind == WordTokenizer.type_name:
        return WordTokenizer(directory / WORDS_FILE, predicted=config.get("predicted"))
    raise ConfigError(
        f"{config_path} has type {kind!r}; expected 'wordpiece', 'sentencepiece', 'byte_bpe' or 'word' "
        "(was it written by keras-bertology?)."
    )


def read_json_object(path: Path, what: str) -> dict:
    """A JSON object from `path`, or a ConfigError saying what is wrong with the file."""
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return value


def tokens_by_id(vocab) -> list[str]:
    """A token -> id mapping as the tokens in id order; ids must run 0..n-1 without gaps or repeats."""
    if not isinstance(vocab, dict) or not vocab:
        raise ConfigError("the vocabulary is empty or not a token -> id mapping")
    if not all(isinstance(index, int) for index in vocab.values()):
        raise ConfigError("vocabulary ids must be integers")
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[token] for token in tokens] != list(range(len(tokens))):
        raise ConfigError("vocabulary ids must run from 0 without gaps or repeats")
    return tokens


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
    _check_training_input(sentences, vocab_size, minimum=len(WORDPIECE_SPECIAL_TOKENS) + 1)
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


def train_sentencepiece(
    sentences: Sequence[str],
    vocab_size: int,
    model_type: str = "bpe",
    byte_fallback: bool = True,
    special_tokens: dict | None = None,
    lower_case: bool = False,
    strip_accents: bool = False,
    replace_quotes: bool = False,
    sentinels: int = 0,
) -> SentencePieceTokenizer:
    """Train a SentencePiece model in memory (no files), deterministically.

    The special pieces take ids 0-4 in the order of `special_tokens`
    (RoBERTa's by default: <s>=0 (cls), <pad>=1, </s>=2 (sep), <unk>=3,
    <mask>=4); the mask is a user-defined piece, so a literal mask token in
    text maps to it. With `byte_fallback` the 256 byte pieces follow, and
    characters outside the vocabulary become their UTF-8 bytes instead of
    <unk>. One thread, so the same sentences always give the same model.
    The preprocessing flags (ALBERT's and XLNet's, see SentencePieceTokenizer)
    apply to the training sentences as the tokenizer applies them to text.
    Without a cls (or mask) role the model has no such piece (T5's). The
    last `sentinels` of the `vocab_size` pieces are T5's sentinels (see
    `with_sentinels`).
    """
    if model_type not in ("bpe", "unigram"):
        raise ConfigError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}.")
    special_tokens = dict(special_tokens or ROBERTA_SPECIAL_TOKENS)
    order = list(special_tokens)
    _check_roles(special_tokens)
    if "mask" in order and order[-1] != "mask":
        raise ConfigError(f"special_tokens must name the mask last; got {order}")
    _check_training_input(sentences, vocab_size, minimum=len(order) + 1 + sentinels)
    preprocessing = dict(lower_case=lower_case, strip_accents=strip_accents, replace_quotes=replace_quotes)
    if any(preprocessing.values()):
        sentences = [s.decode("utf-8") for s in
                     _sentencepiece_preprocess(tf.constant(list(sentences)), **preprocessing).numpy()]
    ids = {role: index for index, role in enumerate(order)}
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=model_type,
            vocab_size=vocab_size - sentinels,
            byte_fallback=byte_fallback,
            bos_id=ids.get("cls", -1),
            bos_piece=special_tokens.get("cls", "<s>"),
            pad_id=ids["pad"],
            pad_piece=special_tokens["pad"],
            eos_id=ids["sep"],
            eos_piece=special_tokens["sep"],
            unk_id=ids["unk"],
            unk_piece=special_tokens["unk"],
            user_defined_symbols=[special_tokens["mask"]] if "mask" in special_tokens else [],
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as error:
        raise _sentencepiece_training_error(error, vocab_size - sentinels, sentinels) from None
    return SentencePieceTokenizer(with_sentinels(model.getvalue(), sentinels), special_tokens, **preprocessing,
                                  sentinels=sentinels)


def _space_after_sentinels(strings):
    """Text with a space after each sentinel that a non-space follows: Hugging Face's T5 tokenizer
    encodes the text after a sentinel as text of its own, which starts a word ("<extra_id_0>," gives
    the sentinel, "▁" and ","). A match consumes the "<" of a sentinel right after it, so a second pass
    reaches those."""
    for _ in range(2):
        strings = tf.strings.regex_replace(strings, r"(<extra_id_\d+>)(\S)", r"\1 \2")
    return strings


def sentinel_piece(index: int) -> str:
    """T5's name of the sentinel that replaces the `index`-th corrupted span of a text."""
    return f"<extra_id_{index}>"


def with_sentinels(model_proto: bytes, count: int) -> bytes:
    """The SentencePiece model with T5's `count` sentinels appended as user-defined pieces, the last id
    being <extra_id_0> and counting down (<extra_id_0> = 32099 after T5's 32,000 pieces): literal
    sentinels in text become their ids, and their ids detokenize to them."""
    if not count:
        return model_proto
    return with_user_pieces(model_proto, [sentinel_piece(index) for index in reversed(range(count))], "sentinel")


def with_user_pieces(model_proto: bytes, pieces: Sequence[str], kind: str = "special") -> bytes:
    """The SentencePiece model with `pieces` appended as user-defined pieces (matched whole in text):
    T5's sentinels, or the [MASK] that DeBERTa-v3's tokenizer adds after its model's pieces."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    present = {piece.piece for piece in model.pieces}
    clashing = [piece for piece in pieces if piece in present]
    if clashing:
        raise ConfigError(f"the SentencePiece model already has the {kind} pieces {clashing[:3]}")
    for piece in pieces:
        model.pieces.add(piece=piece, score=0.0, type=sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED)
    return model.SerializeToString()


def without_sentinels(model_proto: bytes, count: int) -> bytes:
    """The SentencePiece model of `with_sentinels(model_proto, count)`: T5's spiece.model, to which
    transformers' T5Tokenizer appends the sentinels itself (its `extra_ids`)."""
    if not count:
        return model_proto
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    last = [piece.piece for piece in model.pieces[len(model.pieces) - count:]]
    if last != [sentinel_piece(index) for index in reversed(range(count))]:
        raise ConfigError(f"the SentencePiece model does not end with {count} sentinels, <extra_id_0> last")
    del model.pieces[len(model.pieces) - count:]
    return model.SerializeToString()


def _check_roles(special_tokens: dict) -> None:
    roles = set(special_tokens)
    if not set(REQUIRED_ROLES) <= roles <= set(SPECIAL_ROLES):
        raise ConfigError(f"special_tokens must name the roles {', '.join(REQUIRED_ROLES)} and may name "
                          f"{', '.join(sorted(set(SPECIAL_ROLES) - set(REQUIRED_ROLES)))}; got {sorted(roles)}")


def _sentencepiece_training_error(error: RuntimeError, vocab_size: int, sentinels: int = 0) -> ConfigError:
    """SentencePiece's internal check failures, said as the flag to change (with the bound it gave, plus
    the `sentinels` appended after training)."""
    message = str(error)
    if match := re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", message):
        bound = int(match[1]) + sentinels
        return ConfigError(f"SentencePiece training failed: this corpus gives at most {bound} pieces, not "
                           f"{vocab_size + sentinels}; pass --vocab-size {bound} or less.")
    if match := re.search(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)", message):
        bound = int(match[1]) + sentinels
        return ConfigError(f"SentencePiece training failed: this corpus needs at least {bound} pieces for its "
                           f"characters, not {vocab_size + sentinels}; pass --vocab-size {bound} or more.")
    return ConfigError(f"SentencePiece training failed: {' '.join(message.split())}")


def _sentencepiece_preprocess(strings, lower_case, strip_accents, replace_quotes):
    """What Hugging Face's ALBERT and XLNet tokenizers do before SentencePiece: `` and '' become ",
    accents go (NFKD, combining marks dropped), and text is lowercased, each when asked."""
    if replace_quotes:
        strings = tf.strings.regex_replace(strings, "``|''", '"')
    if strip_accents:
        strings = tf.strings.regex_replace(tf_text.normalize_utf8(strings, "NFKD"), r"\p{Mn}", "")
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return strings


def bert_normalize(strings: tf.Tensor, lower_case: bool, strip_accents: bool, clean_text: bool = True) -> tf.Tensor:
    """Hugging Face's BertNormalizer as TF ops, in its order (see WordPieceTokenizer); CJK
    isolation is left to the word splitting."""
    if clean_text:
        strings = tf.strings.regex_replace(strings, _BERT_DELETED_CHARS, "")
    else:
        # Lower-casing and word splitting end strings at NUL. HF keeps NUL inside its word, like \x01
        # (neither space nor punctuation, kept by case and accent rules), so \x01 stands in for it;
        # WordPieceTokenizer refuses vocabularies that would tell the two apart.
        strings = tf.strings.regex_replace(strings, r"\x00", "\x01")
    if strip_accents:
        strings = tf.strings.regex_replace(tf_text.normalize_utf8(strings, "NFD"), r"\p{Mn}", "")
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return strings


def _as_ragged_ids(ids) -> tf.RaggedTensor:
    """Accept ragged tensors, dense tensors or nested lists of ids."""
    if isinstance(ids, tf.RaggedTensor):
        return ids
    if isinstance(ids, (tf.Tensor, np.ndarray)):
        return tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int32))
    return tf.ragged.constant(ids, dtype=tf.int32)


def _check_training_input(sentences: Sequence[str], vocab_size: int, minimum: int) -> None:
    if isinstance(sentences, str) or not any(sentence.strip() for sentence in sentences):
        raise CorpusError("Tokenizer training needs a non-empty list of sentences.")
    if vocab_size < minimum:
        raise ConfigError(f"vocab_size must be at least {minimum}, got {vocab_size}.")


def _read_bytes(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    data = path.read_bytes()
    if not data:
        raise ConfigError(f"{what} is empty: {path}")
    return data


def _read_vocab_file(path: Path) -> list[str]:
    """One token per line, UTF-8; only the newline is stripped, as in BERT."""
    data = _read_bytes(path, "WordPiece vocabulary")
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


def sentencepiece_pieces(model_proto: bytes) -> list[str]:
    """The pieces of a serialized SentencePiece model, by id."""
    processor = _load_sentencepiece(model_proto)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def _load_sentencepiece(model_proto: bytes) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_proto=model_proto)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(f"Not a valid SentencePiece model: {error}") from None
