"""Loading a tokenizer that `Tokenizer.save` wrote, by the type its tokenizer.json names.

Importing this module registers the built-in types (`tokenizers.base.register_tokenizer_type`).
"""

import hashlib
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


def describe_saved_tokenizer(directory: PathLike) -> dict:
    """What tells one saved vocabulary from another: {"type", "lower_case", "vocab_size", "sha256"}, the
    digest over its files' names and bytes (a retrained or edited vocabulary differs there even at one
    size and casing)."""
    directory = Path(directory)
    config = read_json_object(directory / CONFIG_FILE, "tokenizer configuration")
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return {"type": config.get("type"), "lower_case": bool(config.get("lower_case")),
            "vocab_size": load_tokenizer(directory).vocab_size, "sha256": digest.hexdigest()}
