"""SentencePiece models run in-graph, with the special pieces a family names, and training them in memory."""

import hashlib
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

from keras_bertology.errors import ConfigError, NotExpressible
from keras_bertology.tokenizers.base import (DEFAULT_SPECIAL_TOKENS, PathLike, Tokenizer, as_ragged_ids,
                                             check_training_input, read_bytes, register_tokenizer_type)

SENTENCEPIECE_MODEL_FILE = "sentencepiece.model"
SPECIAL_ROLES = ("cls", "pad", "sep", "unk", "mask", "eot")
# The roles every SentencePiece vocabulary has; cls and mask are optional (T5 has neither).
REQUIRED_ROLES = ("pad", "sep", "unk")
SENTENCEPIECE_WORD_START = "\u2581"


@register_tokenizer_type
class SentencePieceTokenizer(Tokenizer):
    """SentencePiece model run in-graph by tensorflow_text, with the special pieces it names.

    `special_tokens` maps the roles cls, pad, sep, unk, mask and eot (a causal
    LM's end of text; roles may share a piece) to pieces of the model (RoBERTa's <s> <pad> </s> <unk> <mask> by default, ALBERT's
    [CLS] [SEP] [MASK] <pad> <unk> with ALBERT's, `models.albert.tokenizer.ALBERT_SPECIAL_TOKENS`); it is saved
    with the model, so a tokenizer loads back with its own specials. Word
    starts are pieces beginning with "▁" plus the specials; byte-fallback
    pieces (<0x00>..<0xFF>) continue the word begun by the "▁" before them.
    """

    type_name = "sentencepiece"

    def __init__(self, model_proto: bytes | PathLike, special_tokens: dict | None = None,
                 lower_case: bool = False, strip_accents: bool = False, replace_quotes: bool = False,
                 sentinels: int = 0):
        if isinstance(model_proto, (str, os.PathLike)):
            model_proto = read_bytes(Path(model_proto), "SentencePiece model")
        model_proto = bytes(model_proto)
        special_tokens = dict(special_tokens or DEFAULT_SPECIAL_TOKENS)
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
        self._sentencepiece._model_resource = _NamedSentencePieceModel(self._model_proto)
        self._lone_word_start = pieces.index(SENTENCEPIECE_WORD_START) \
            if sentinels and SENTENCEPIECE_WORD_START in pieces else None

    @classmethod
    def from_saved(cls, directory, config):
        preprocessing = {key: bool(config.get(key, False)) for key in ("lower_case", "strip_accents", "replace_quotes")}
        return cls(directory / SENTENCEPIECE_MODEL_FILE, config.get("special_tokens"), **preprocessing,
                   sentinels=int(config.get("sentinels", 0)))

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

    def onnx_tokenize(self, graph, texts):
        """The extensions' SentencepieceTokenizer on the model's bytes; T5's sentinels spaced and the lone "▁"
        before them dropped as `_tokenize` does. ALBERT's and XLNet's text rewriting (NFKD, lower-casing) has
        no operator there."""
        rewriting = [name for name, on in self.preprocessing.items() if on]
        if rewriting:
            raise NotExpressible(f"its text rewriting ({', '.join(rewriting)}) has no ONNX Runtime Extensions "
                                 "operator (no Unicode normalisation; its lower-casing covers fewer characters)")
        if self.sentinels:
            for _ in range(2):
                texts = graph.contrib("StringRegexReplace", texts, graph.const([r"(<extra_id_\d+>)(\S)"]),
                                      graph.const([r"\1 \2"]))
        no = graph.const(np.array(False))
        ids, splits = graph.contrib("SentencepieceTokenizer", texts, graph.const(np.array(0, np.int64)),
                                    graph.const(np.array(0, np.float32)), no, no, no, no, outputs=2,
                                    model=self._model_proto)
        ids = graph.op("Cast", ids, to=7)  # 7: int64
        return (ids, splits) if self._lone_word_start is None else self._onnx_drop_word_starts(graph, ids, splits)

    def _onnx_drop_word_starts(self, graph, ids, splits):
        """`_drop_word_starts_before_sentinels` as ONNX nodes."""
        following, same_row = graph.next_in_row(ids, splits, np.int64(-1))
        lone = graph.op("And", graph.op("And", graph.op("Equal", ids, graph.scalar(self._lone_word_start)), same_row),
                        graph.op("GreaterOrEqual", following, graph.scalar(self.vocab_size - self.sentinels)))
        dropped = graph.op("CumSum", graph.op("Cast", lone, to=7), graph.scalar(0))
        dropped_before = graph.op("Concat", graph.const([0], np.int64), dropped, axis=0)
        return (graph.op("Compress", ids, graph.op("Not", lone), axis=0),
                graph.op("Sub", splits, graph.op("Gather", dropped_before, splits)))

    def detokenize(self, ids):
        """Decoded text, byte-fallback pieces turned back into characters."""
        return self._sentencepiece.detokenize(as_ragged_ids(ids))

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


class _NamedSentencePieceModel(tf.saved_model.experimental.TrackableResource):
    """The model's TensorFlow resource under a name of its own, its content's hash.

    tensorflow_text's resource has no name: it belongs to the kernel that made it, and `tf.random.set_seed`
    (which `keras.utils.set_random_seed` calls) empties TensorFlow's kernel cache, so a tokenizer made before
    a seed is set failed after it ("SentencepieceOp ... does not exist"). A named one stays in the resource
    manager; tokenizers of the same model share it.
    """

    def __init__(self, model_proto: bytes):
        super().__init__()
        self._model_proto = model_proto
        self._shared_name = "bertology_sentencepiece_" + hashlib.sha256(model_proto).hexdigest()
        _ = self.resource_handle  # made now, as tensorflow_text's own

    def _create_resource(self):
        return gen_sentencepiece_tokenizer.sentencepiece_op(model=self._model_proto, shared_name=self._shared_name)


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
    hard_limit: bool = True,
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
    `with_sentinels`). Without `hard_limit`, a text too small for
    `vocab_size` pieces gives as many as it holds, as WordPiece's learner does.
    """
    if model_type not in ("bpe", "unigram"):
        raise ConfigError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}.")
    special_tokens = dict(special_tokens or DEFAULT_SPECIAL_TOKENS)
    order = list(special_tokens)
    _check_roles(special_tokens)
    if "mask" in order and order[-1] != "mask":
        raise ConfigError(f"special_tokens must name the mask last; got {order}")
    check_training_input(sentences, vocab_size, minimum=len(order) + 1 + sentinels)
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
            hard_vocab_limit=hard_limit,
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


def sentencepiece_pieces(model_proto: bytes) -> list[str]:
    """The pieces of a serialized SentencePiece model, by id."""
    processor = _load_sentencepiece(model_proto)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def _load_sentencepiece(model_proto: bytes) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_proto=model_proto)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(f"Not a valid SentencePiece model: {error}") from None
