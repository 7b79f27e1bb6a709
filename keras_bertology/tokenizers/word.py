"""A word-level tokenizer, in-graph: whole words as tokens, for models that read words (ELMo).

Text is split as BERT's basic tokenizer splits it (Unicode whitespace, every
punctuation character a word of its own), case kept. The vocabulary is
every word of the training text, most frequent first, after the specials.
Its first `vocab_size` entries are the words a language model predicts
(its softmax); the rest are spelled only: a character-level encoder still
reads them from their characters, and as targets they are the unknown word.
A word never seen is the unknown word.
"""

import collections
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_bertology.errors import ConfigError
from keras_bertology.tokenizers.base import Tokenizer, as_ragged_ids, check_training_input, register_tokenizer_type
from keras_bertology.tokenizers.bert_text import DELETED_CHARS, PUNCTUATION, WHITESPACE

WORDS_FILE = "words.txt"
# ELMo's vocabulary files begin with <S>, </S> and <UNK>; padding comes first here, so that id 0 pads.
WORD_SPECIAL_TOKENS = {"pad": "<pad>", "cls": "<S>", "sep": "</S>", "unk": "<UNK>"}
# Spelled-only words kept beyond the predicted ones: enough for a large corpus' distinct words, bounded.
MAX_WORDS = 1_000_000


def split_words(strings):
    """Ragged [N, None] words of a string tensor [N]: control characters dropped, whitespace splits,
    punctuation stands alone."""
    cleaned = tf.strings.regex_replace(strings, DELETED_CHARS, "")
    return tf_text.regex_split(cleaned, f"{WHITESPACE}|{PUNCTUATION}", PUNCTUATION)


@register_tokenizer_type
class WordTokenizer(Tokenizer):
    """Words -> ids, in-graph, over a vocabulary of which the first `vocab_size` entries are predicted.

    Args:
        words: the vocabulary in id order, the specials of WORD_SPECIAL_TOKENS
            first; or the path of a `words.txt`, one word per line.
        predicted: how many of them a language model predicts (None: all).
    """

    type_name = "word"

    def __init__(self, words, predicted=None):
        words = _read_words(Path(words)) if isinstance(words, (str, Path)) else list(words)
        _check_words(words)
        super().__init__(words, WORD_SPECIAL_TOKENS, name="word_tokenizer")
        self.predicted = len(words) if predicted is None else int(predicted)
        if not len(WORD_SPECIAL_TOKENS) < self.predicted <= len(words):
            raise ConfigError(f"a word vocabulary predicts between {len(WORD_SPECIAL_TOKENS) + 1} and all "
                              f"{len(words)} of its words (got {predicted})")
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(words), tf.range(len(words), dtype=tf.int32)),
            default_value=self.unk_id)

    @classmethod
    def from_saved(cls, directory, config):
        return cls(directory / WORDS_FILE, predicted=config.get("predicted"))

    @property
    def vocab_size(self):
        """The words a language model predicts (its softmax); ids at or above it are spelled only."""
        return self.predicted

    @property
    def num_words(self):
        """Every word with an id, the spelled-only ones included."""
        return len(self._tokens)

    def _tokenize(self, strings):
        return tf.ragged.map_flat_values(self._table.lookup, split_words(strings))

    def words(self, strings):
        """The words of each string, ragged [N, None] strings, as `tokenize` sees them."""
        return split_words(tf.convert_to_tensor(strings, tf.string))

    def detokenize(self, ids):
        tokens = tf.gather(tf.constant(self._tokens.tolist()), as_ragged_ids(ids))
        return tf.strings.reduce_join(tokens, axis=-1, separator=" ")

    @property
    def word_start_table(self):
        return np.ones(self.num_words, dtype=bool)

    def save(self, directory):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / WORDS_FILE).write_text("".join(word + "\n" for word in self._tokens), encoding="utf-8")
        self._write_config(directory, lower_case=False, predicted=self.predicted)


def train_word_tokenizer(sentences, vocab_size):
    """A WordTokenizer of every word of `sentences` (most frequent first, ties in order of appearance, up to
    MAX_WORDS), predicting the specials and the `vocab_size` - 4 most frequent."""
    check_training_input(sentences, vocab_size, len(WORD_SPECIAL_TOKENS) + 1)
    counts = collections.Counter()
    for batch in range(0, len(sentences), 8192):
        words = split_words(tf.constant(sentences[batch:batch + 8192])).flat_values.numpy()
        counts.update(word.decode("utf-8") for word in words)
    specials = list(WORD_SPECIAL_TOKENS.values())
    for special in specials:
        counts.pop(special, None)  # literal "<S>" in text is the mark's word
    ranked = [word for word, _ in counts.most_common(MAX_WORDS - len(specials))]
    return WordTokenizer(specials + ranked, predicted=min(vocab_size, len(specials) + len(ranked)))


def _read_words(path):
    if not path.is_file():
        raise ConfigError(f"word list not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"word list {path} is not UTF-8 (bad byte at offset {error.start})") from None
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def _check_words(words):
    specials = list(WORD_SPECIAL_TOKENS.values())
    if words[:len(specials)] != specials:
        raise ConfigError(f"a word vocabulary begins with {', '.join(specials)} (got {words[:len(specials)]})")
    if len(words) == len(specials):
        raise ConfigError("the word vocabulary holds only its specials: every word would be unknown")
    seen = set()
    for line, word in enumerate(words, start=1):
        if not word or word != word.strip() or any(character.isspace() for character in word):
            raise ConfigError(f"the word vocabulary has an empty word or one with spaces at line {line}")
        if word in seen:
            raise ConfigError(f"the word vocabulary repeats {word!r} (line {line})")
        seen.add(word)
