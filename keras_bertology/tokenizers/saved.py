"""Loading a tokenizer that `Tokenizer.save` wrote, by the type its tokenizer.json names.

Importing this module registers the built-in types (`tokenizers.base.register_tokenizer_type`).
"""

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
