"""The in-graph tokenizer of a Hugging Face model folder, from whichever files it ships.

transformers 4 writes `vocab.txt` (WordPiece) or `vocab.json` + `merges.txt`
(byte-level BPE); transformers 5 writes only `tokenizer.json`. All three are
read into tokenizers that run inside the SavedModel graph.
"""

import json
from pathlib import Path

from keras_bertology.errors import CheckpointError, ConfigError


def load_hf_tokenizer(hf_dir, model_vocab_size):
    """The folder's tokenizer, or None when it ships none; ids must fit the model's vocabulary."""
    hf_dir = Path(hf_dir)
    try:
        tokenizer = _read_tokenizer(hf_dir)
    except ConfigError as error:
        raise CheckpointError(f"the tokenizer in {hf_dir} cannot be read: {error}") from None
    if tokenizer is not None and tokenizer.vocab_size > model_vocab_size:
        raise CheckpointError(
            f"the tokenizer in {hf_dir} has {tokenizer.vocab_size} tokens but the model only "
            f"{model_vocab_size} embeddings: they do not belong together"
        )
    return tokenizer


def _read_tokenizer(hf_dir):
    from keras_bertology.data.tokenizers import WordPieceTokenizer

    if (hf_dir / "vocab.txt").is_file():
        return WordPieceTokenizer(hf_dir / "vocab.txt", lower_case=_config_lower_case(hf_dir))
    if (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        from keras_bertology.data.byte_bpe import ByteLevelBPETokenizer

        return ByteLevelBPETokenizer.from_hf_dir(hf_dir)
    if not (hf_dir / "tokenizer.json").is_file():
        return None
    spec = _read_json(hf_dir / "tokenizer.json")
    model = spec.get("model") or {}
    kind = model.get("type")
    if kind == "WordPiece":
        if model.get("continuing_subword_prefix", "##") != "##":
            raise ConfigError("only the '##' continuation prefix of BERT WordPiece is supported")
        normalizer = spec.get("normalizer") or {}
        lower_case = normalizer.get("lowercase", _config_lower_case(hf_dir))
        return WordPieceTokenizer(_tokens_by_id(model.get("vocab")), lower_case=lower_case)
    if kind == "BPE":
        from keras_bertology.data.byte_bpe import ByteLevelBPETokenizer

        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        return ByteLevelBPETokenizer(model.get("vocab"), merges)
    raise ConfigError(f"tokenizer.json has a {kind!r} model; supported: WordPiece, BPE (byte-level)")


def _config_lower_case(hf_dir):
    """`do_lower_case` from tokenizer_config.json; uncased (True) when absent, as HF defaults."""
    path = hf_dir / "tokenizer_config.json"
    if not path.is_file():
        return True
    return bool(_read_json(path).get("do_lower_case", True))


def _read_json(path):
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return value


def _tokens_by_id(vocab):
    """A token -> id mapping as the list of tokens in id order; ids must run 0..n-1."""
    if not isinstance(vocab, dict) or not vocab:
        raise ConfigError("tokenizer.json has no vocabulary")
    tokens = sorted(vocab, key=vocab.get)
    if [vocab[token] for token in tokens] != list(range(len(tokens))):
        raise ConfigError("tokenizer.json vocabulary ids are not 0..n-1 without gaps")
    return tokens
