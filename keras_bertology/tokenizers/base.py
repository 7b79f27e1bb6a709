"""The tokenizer interface, and the registry by type that loads a saved tokenizer.

Every tokenizer is a `tf.Module` built on tensorflow_text ops, so `tokenize`
runs in eager mode, inside `tf.function` and inside `tf.data` maps, and the
lookup tables travel with a SavedModel (the loader only needs `import
tensorflow_text`). None adds special tokens: the data pipeline places
[CLS]/[SEP] itself. A saved tokenizer's tokenizer.json names its type
(`Tokenizer.type_name`); `tokenizers.saved.load_tokenizer` rebuilds it with
the class registered for that type (`register_tokenizer_type`).
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_bertology.errors import ConfigError, CorpusError, NotExpressible
from keras_bertology.lazy_imports import import_object

PathLike = str | os.PathLike


def is_utf8(text: bytes) -> bool:
    """Whether `text` decodes as UTF-8: what ONNX Runtime's string operators read as it is, and what its
    Python binding can return."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True

CONFIG_FILE = "tokenizer.json"
# The default special tokens of the SentencePiece and byte-level BPE types (RoBERTa's), in id order.
DEFAULT_SPECIAL_TOKENS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}
# What `Tokenizer.from_preset` reads sources with, named by import path as family records name their builders:
# it converts checkpoints with the tokenizer types of this package, which therefore cannot import it.
PRESET_READER = "keras_bertology.preset_loading:tokenizer"

_TYPES = {}


def register_tokenizer_type(cls):
    """Class decorator: saved tokenizers whose config names `cls.type_name` load with `cls.from_saved`.
    The built-in types register when their module is imported (`tokenizers.saved` imports them all); a
    type of another package registers the same way."""
    _TYPES[cls.type_name] = cls
    return cls


def tokenizer_type(name: str, config_path: Path) -> type:
    """The registered class of the tokenizer type `name`, read from `config_path`."""
    if name not in _TYPES:
        known = sorted(_TYPES)
        expected = ", ".join(repr(kind) for kind in known[:-1]) + f" or {known[-1]!r}"
        raise ConfigError(f"{config_path} has type {name!r}; expected {expected} (was it written by "
                          "keras-bertology?).")
    return _TYPES[name]


class Tokenizer(tf.Module, metaclass=abc.ABCMeta):
    """Common interface: string tensor [N] in, int32 ragged ids [N, None] out.

    Subclasses provide `_tokenize`, `detokenize`, `save`, `from_saved` and the
    token strings; ids of the specials are looked up by their token string.
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
        return import_object(PRESET_READER)(cls, name_or_path, weights)

    @classmethod
    @abc.abstractmethod
    def from_saved(cls, directory: Path, config: dict) -> "Tokenizer":
        """The tokenizer that `save` wrote into `directory`, whose tokenizer.json holds `config`."""

    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Token ids of each string, int32 ragged [N, None]; no specials added."""
        # A plain method around the traced one: a tf.function bound to an instance holds it only weakly, so
        # `Tokenizer.from_preset(path).tokenize(texts)` lost its tokenizer before the call.
        return self._traced_tokenize(strings)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _traced_tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        return self._tokenize(strings)

    @abc.abstractmethod
    def _tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """The tokenizer-specific graph behind `tokenize`."""

    # What `onnx_reads` refuses, in words (onnx.json's text_model.unreadable); None where it reads every text.
    onnx_unreadable_texts: str | None = None

    def onnx_reads(self, text: bytes) -> bool:
        """Whether `onnx_tokenize` reads `text` as `tokenize` does; a text it cannot read fails in ONNX Runtime
        instead of being read otherwise (see `onnx_unreadable`)."""
        return True

    def onnx_unreadable(self, graph, texts: str) -> str | None:
        """The name of a [B] bool in `graph`: which of the raw strings `texts` `onnx_reads` refuses (their ids
        are then put past the vocabulary, which the model's embedding lookup refuses); None where it reads all."""
        return None

    def onnx_tokenize(self, graph, texts: str) -> tuple[str, str]:
        """`tokenize` as ONNX nodes added to `graph` (an `export.onnx_graph.OnnxGraph`): the names of the ids
        (int64 [N]) and row splits (int64 [B + 1]) of the [B] strings named `texts`, equal to `tokenize`'s on
        every text, with ONNX Runtime Extensions' operators; NotExpressible, saying why, where they cannot."""
        raise NotExpressible(f"ONNX Runtime Extensions have no operator that tokenizes as the {self.type_name} "
                             "tokenizer does")

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



def as_ragged_ids(ids) -> tf.RaggedTensor:
    """Accept ragged tensors, dense tensors or nested lists of ids."""
    if isinstance(ids, tf.RaggedTensor):
        return ids
    if isinstance(ids, (tf.Tensor, np.ndarray)):
        return tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int32))
    return tf.ragged.constant(ids, dtype=tf.int32)


def check_training_input(sentences: Sequence[str], vocab_size: int, minimum: int) -> None:
    if isinstance(sentences, str) or not any(sentence.strip() for sentence in sentences):
        raise CorpusError("Tokenizer training needs a non-empty list of sentences.")
    if vocab_size < minimum:
        raise ConfigError(f"vocab_size must be at least {minimum}, got {vocab_size}.")


def read_bytes(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    data = path.read_bytes()
    if not data:
        raise ConfigError(f"{what} is empty: {path}")
    return data

