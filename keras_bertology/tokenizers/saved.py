"""Loading a tokenizer that `Tokenizer.save` wrote, by the type its tokenizer.json names.

Importing this module registers the built-in types (`tokenizers.base.register_tokenizer_type`).
"""

import hashlib
import json
from pathlib import Path

from keras_bertology.errors import ConfigError
from keras_bertology.tokenizers import byte_bpe, sentencepiece, word, wordpiece  # noqa: F401  the built-in types
from keras_bertology.tokenizers.base import CONFIG_FILE, PathLike, Tokenizer, read_json_object, tokenizer_type


def load_tokenizer(directory: PathLike) -> Tokenizer:
    """Rebuild a tokenizer written by `Tokenizer.save`, with its text layout."""
    directory = Path(directory)
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise ConfigError(f"No {CONFIG_FILE} in {directory}: not a saved keras-bertology tokenizer.")
    config = read_json_object(config_path, "tokenizer configuration")
    tokenizer = tokenizer_type(config.get("type"), config_path).from_saved(directory, config)
    return tokenizer.with_layout(config.get("layout"))


# Entries of tokenizer.json that say how a family reads a vocabulary, not what the vocabulary is.
_READING_ENTRIES = ("special_tokens", "sentinels", "layout")


def describe_saved_tokenizer(directory: PathLike) -> dict:
    """What tells one vocabulary from another, whichever special tokens a family reads it with: {"type",
    "lower_case", "vocab_size", "sha256"}, the size and the digest those of its text options and its pieces in
    id order (T5's sentinels, appended after them, left out). A retrained vocabulary differs in the digest
    even at one size and casing; the shared vocabulary read by GPT and by BERT does not."""
    directory = Path(directory)
    config = read_json_object(directory / CONFIG_FILE, "tokenizer configuration")
    tokenizer = load_tokenizer(directory)
    pieces = tokenizer.vocabulary[:tokenizer.vocab_size - int(config.get("sentinels", 0))]
    options = {key: value for key, value in sorted(config.items()) if key not in _READING_ENTRIES}
    return {"type": config.get("type"), "lower_case": bool(config.get("lower_case")), "vocab_size": len(pieces),
            "sha256": hashlib.sha256(json.dumps([options, pieces]).encode("utf-8")).hexdigest()}
