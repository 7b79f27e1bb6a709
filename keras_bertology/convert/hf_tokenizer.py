"""The in-graph tokenizer of a Hugging Face model folder, from whichever files it ships.

transformers 4 writes `vocab.txt` (WordPiece) or `vocab.json` + `merges.txt`
(byte-level BPE); transformers 5 writes only `tokenizer.json`; ALBERT-style
models ship `spiece.model` (SentencePiece; T5's gains its `extra_ids` sentinels at the end), DeBERTa-v2/v3
`spm.model`. All are read into tokenizers that run inside the SavedModel graph.
"""

from pathlib import Path

from keras_bertology.data.byte_bpe import END_OF_TEXT, GPT2_SPECIAL_TOKENS, SPECIAL_TOKENS, ByteLevelBPETokenizer
from keras_bertology.data.tokenizers import (
    ALBERT_SPECIAL_TOKENS,
    DEBERTA_SPECIAL_TOKENS,
    T5_SENTINELS,
    T5_SPECIAL_TOKENS,
    WORDPIECE_SPECIAL_TOKENS,
    XLNET_SPECIAL_TOKENS,
    SentencePieceTokenizer,
    WordPieceTokenizer,
    read_json_object,
    sentencepiece_pieces,
    tokens_by_id,
    with_sentinels,
    with_user_pieces,
)
from keras_bertology.errors import CheckpointError, ConfigError

# tokenizer_config.json classes that run tokenizer.json as written; every other class (BertTokenizer and
# its kin) rebuilds its normaliser from tokenizer_config.json, as transformers 5 does.
_GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
_WORDPIECE_ROLES = ("pad", "unk", "cls", "sep", "mask")  # the order of WORDPIECE_SPECIAL_TOKENS
# WordPieceTokenizer's options, BertNormalizer's defaults, and their keys in each file.
_WORDPIECE_DEFAULTS = dict(lower_case=True, strip_accents=None, chinese_chars=True, clean_text=True)
_CONFIG_KEYS = dict(lower_case="do_lower_case", strip_accents="strip_accents", chinese_chars="tokenize_chinese_chars")
_NORMALIZER_KEYS = dict(lower_case="lowercase", strip_accents="strip_accents", chinese_chars="handle_chinese_chars",
                        clean_text="clean_text")


# How transformers 5's tokenizer classes lay out one text and a pair (the post-processor each builds): roles
# (the folder's cls and sep tokens) and texts ($A, $B), each with its segment id after a colon (0 if none).
# A class not named here runs tokenizer.json's post_processor as written.
_BERT_LAYOUT = ("cls $A sep", "cls $A sep $B:1 sep:1")
_CLASS_LAYOUTS = {
    **dict.fromkeys(("BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer", "AlbertTokenizer",
                     "BigBirdTokenizer", "DebertaV2Tokenizer"), _BERT_LAYOUT),
    **dict.fromkeys(("RobertaTokenizer", "DebertaTokenizer"), ("cls $A sep", "cls $A sep sep $B sep")),
    "GPT2Tokenizer": ("$A", "$A $B:1"),
    "T5Tokenizer": ("$A sep", "$A sep $B:1 sep:1"),
    "XLNetTokenizer": ("$A sep cls:2", "$A sep $B:1 sep:1 cls:2"),
}
def hf_text_layout(hf_dir, tokenizer, default_class=None):
    """How the folder's transformers tokenizer lays out a text and a pair (`Tokenizer.layout`, tokens as
    `tokenizer` writes them): its class's way (tokenizer_config.json's class, else `default_class`, the
    one AutoTokenizer builds for the model type), or, for the generic class, tokenizer.json's
    post_processor. None where the folder does not say (no class, no post_processor to read)."""
    hf_dir = Path(hf_dir)
    try:
        return _text_layout(hf_dir, tokenizer, default_class)
    except ConfigError as error:
        raise CheckpointError(f"the tokenizer in {hf_dir} cannot be read: {error}") from None


def _text_layout(hf_dir, tokenizer, default_class):
    tokenizer_class = str(_tokenizer_config(hf_dir).get("tokenizer_class", default_class)).removesuffix("Fast")
    if tokenizer_class in _CLASS_LAYOUTS:
        tokens = tokenizer.vocabulary
        roles = {role: tokens[tokenizer.optional_id(role)] for role in ("cls", "sep")
                 if tokenizer.optional_id(role) is not None}
        try:
            return {kind: [_template_piece(item, roles) for item in template.split()]
                    for kind, template in zip(("single", "pair"), _CLASS_LAYOUTS[tokenizer_class])}
        except KeyError as error:
            raise ConfigError(f"transformers' {tokenizer_class} places a {error.args[0]} token, which the "
                              "tokenizer lacks") from None
    spec_path = hf_dir / "tokenizer.json"
    if not spec_path.is_file():
        return None
    return _post_processor_layout(read_json_object(spec_path, "tokenizer.json").get("post_processor"))


def _template_piece(item, roles):
    piece, _, segment = item.partition(":")
    return [piece if piece.startswith("$") else roles[piece], int(segment or 0)]


def _post_processor_layout(processor):
    """A tokenizer.json post_processor as a text layout: TemplateProcessing's templates, or those that
    BertProcessing and RobertaProcessing fix; nothing added by ByteLevel or no post-processor."""
    kind = processor.get("type") if isinstance(processor, dict) else None
    if kind == "Sequence":
        adding = [p for p in processor.get("processors") or [] if isinstance(p, dict) and p.get("type") != "ByteLevel"]
        if len(adding) > 1:
            raise ConfigError("tokenizer.json's post_processor adds tokens in more than one step, which is not "
                              "supported")
        return _post_processor_layout(adding[0] if adding else None)
    if kind in (None, "ByteLevel"):
        return {"single": [["$A", 0]], "pair": [["$A", 0], ["$B", 1]]}
    if kind in ("BertProcessing", "RobertaProcessing"):
        roles = {role: processor[role][0] for role in ("cls", "sep")}
        template = _BERT_LAYOUT if kind == "BertProcessing" else _CLASS_LAYOUTS["RobertaTokenizer"]
        return {name: [_template_piece(item, roles) for item in text.split()]
                for name, text in zip(("single", "pair"), template)}
    if kind == "TemplateProcessing":
        specials = processor.get("special_tokens") or {}
        try:
            return {name: [piece for item in processor[name] for piece in _template_item(item, specials)]
                    for name in ("single", "pair")}
        except (KeyError, TypeError, AttributeError, ValueError):
            raise ConfigError("tokenizer.json's TemplateProcessing is not one transformers writes") from None
    raise ConfigError(f"tokenizer.json's post_processor {kind!r} is not supported: only TemplateProcessing, "
                      "BertProcessing, RobertaProcessing and ByteLevel")


def _template_item(item, specials):
    """[[piece, segment id], ...] of one item of a TemplateProcessing template."""
    if "Sequence" in item:
        return [["$" + item["Sequence"]["id"], int(item["Sequence"].get("type_id", 0))]]
    special = item["SpecialToken"]
    tokens = (specials.get(special["id"]) or {}).get("tokens") or [special["id"]]
    return [[token, int(special.get("type_id", 0))] for token in tokens]


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
    if (hf_dir / "spiece.model").is_file():
        return _sentencepiece(hf_dir)
    if (hf_dir / "spm.model").is_file():
        return _deberta_v2_sentencepiece(hf_dir)
    spec = read_json_object(hf_dir / "tokenizer.json", "tokenizer.json") \
        if (hf_dir / "tokenizer.json").is_file() else None
    if (hf_dir / "vocab.txt").is_file() and not _runs_tokenizer_json(hf_dir, spec):
        return _wordpiece(hf_dir, hf_dir / "vocab.txt", spec)
    if (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        vocab = read_json_object(hf_dir / "vocab.json", "byte-level BPE vocabulary")
        specials = _byte_bpe_specials(vocab)
        return ByteLevelBPETokenizer.from_files(hf_dir, mask_lstrip=_mask_lstrip(hf_dir, spec, specials),
                                                special_tokens=specials)
    if spec is None:
        return None
    model = spec.get("model") or {}
    kind = model.get("type")
    if kind == "WordPiece":
        if model.get("continuing_subword_prefix", "##") != "##":
            raise ConfigError("only the '##' continuation prefix of BERT WordPiece is supported")
        if model.get("unk_token", "[UNK]") != "[UNK]":
            raise ConfigError(f"tokenizer.json's unk_token {model['unk_token']!r} is not supported: "
                              "only BERT's '[UNK]'")
        return _wordpiece(hf_dir, tokens_by_id(model.get("vocab")), spec)
    if kind == "BPE":
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        vocab = model.get("vocab") or {}
        specials = _byte_bpe_specials(vocab)
        return ByteLevelBPETokenizer(vocab, merges, mask_lstrip=_mask_lstrip(hf_dir, spec, specials),
                                     special_tokens=specials)
    raise ConfigError(f"tokenizer.json has a {kind!r} model; supported: WordPiece, BPE (byte-level)")


def _byte_bpe_specials(vocab):
    """RoBERTa's special tokens; DeBERTa's where the vocabulary has [CLS] and not RoBERTa's <s>; GPT-2's
    where it has <|endoftext|> and neither."""
    if SPECIAL_TOKENS["cls"] in vocab:
        return SPECIAL_TOKENS
    if DEBERTA_SPECIAL_TOKENS["cls"] in vocab:
        return DEBERTA_SPECIAL_TOKENS
    return GPT2_SPECIAL_TOKENS if END_OF_TEXT in vocab else SPECIAL_TOKENS


def _sentencepiece(hf_dir):
    """spiece.model with the specials and preprocessing of tokenizer_config.json: `` and '' become ",
    accents are stripped unless keep_accents, lowercased when do_lower_case. Without that file, the
    defaults of the model's kind: XLNet's (<cls> <sep>, cased) when it has a <cls> piece, else
    ALBERT's ([CLS] [SEP], uncased)."""
    config = _tokenizer_config(hf_dir)
    model_proto = (hf_dir / "spiece.model").read_bytes()
    if _names_class(hf_dir, config, "BigBirdTokenizer", "big_bird"):  # text reaches SentencePiece as it is
        specials = _configured_specials(config, ALBERT_SPECIAL_TOKENS)
        return SentencePieceTokenizer(_with_missing_specials(model_proto, specials), specials)
    pieces = sentencepiece_pieces(model_proto)
    cased = "<cls>" in pieces
    defaults = XLNET_SPECIAL_TOKENS if cased else ALBERT_SPECIAL_TOKENS
    if "</s>" in pieces and "<cls>" not in pieces and "[CLS]" not in pieces:  # T5's: no beginning token
        defaults = T5_SPECIAL_TOKENS
    specials = _configured_specials(config, defaults)
    if defaults is T5_SPECIAL_TOKENS:
        sentinels = int(config.get("extra_ids", T5_SENTINELS))
        return SentencePieceTokenizer(with_sentinels(model_proto, sentinels), specials, sentinels=sentinels)
    return SentencePieceTokenizer(
        _with_missing_specials(model_proto, specials), specials,
        lower_case=bool(config.get("do_lower_case", not cased)), strip_accents=not config.get("keep_accents", False), replace_quotes=True)


def _names_class(hf_dir, config, tokenizer_class, model_type):
    """Whether the folder's tokenizer is `tokenizer_class`: tokenizer_config.json says so, or, without a
    class there, config.json's model is `model_type`."""
    if "tokenizer_class" in config:
        return config["tokenizer_class"].removesuffix("Fast") == tokenizer_class
    model_config = hf_dir / "config.json"
    return model_config.is_file() and read_json_object(model_config, "config.json").get("model_type") == model_type


def _configured_specials(config, defaults):
    """{role: token} of tokenizer_config.json's `{role}_token` entries, `defaults` where it has none."""
    specials = {}
    for role, default in defaults.items():
        token = config.get(f"{role}_token", default)
        specials[role] = token.get("content", default) if isinstance(token, dict) else str(token)
    return specials


def _deberta_v2_sentencepiece(hf_dir):
    """spm.model as transformers' DebertaV2Tokenizer reads it: DeBERTa's specials (those the model lacks
    appended, `_with_missing_specials`), text cased unless do_lower_case and otherwise unchanged."""
    config = _tokenizer_config(hf_dir)
    if config.get("split_by_punct"):
        raise ConfigError("tokenizer_config.json sets split_by_punct (punctuation split off before "
                          "SentencePiece), which is not supported")
    model_proto = (hf_dir / "spm.model").read_bytes()
    specials = _configured_specials(config, DEBERTA_SPECIAL_TOKENS)
    return SentencePieceTokenizer(_with_missing_specials(model_proto, specials), specials,
                                  lower_case=bool(config.get("do_lower_case", False)))


# The order in which transformers appends the special tokens a SentencePiece model lacks: bos (these models'
# cls), eos (their sep), unk, pad, mask.
_ADDED_ORDER = ("cls", "sep", "unk", "pad", "mask")


def _with_missing_specials(model_proto, specials):
    """The model with the configured `specials` it lacks appended as pieces of their own, new ids after its
    pieces in transformers' order, as transformers adds them: DeBERTa-v3's [MASK] (id 128,000 after the
    released model's 128,000 pieces), or a [UNK] that tokenizer_config.json names over a model whose unknown
    piece is <unk> (characters outside the vocabulary still become <unk>, as in transformers)."""
    pieces = set(sentencepiece_pieces(model_proto))
    missing = list(dict.fromkeys(specials[role] for role in _ADDED_ORDER if role in specials
                                 and specials[role] not in pieces))
    return with_user_pieces(model_proto, missing) if missing else model_proto


def _runs_tokenizer_json(hf_dir, spec):
    """Whether transformers runs tokenizer.json as written (the generic tokenizer class), rather than a
    BERT class built from vocab.txt and tokenizer_config.json."""
    return spec is not None and _tokenizer_config(hf_dir).get("tokenizer_class") in _GENERIC_CLASSES


def _tokenizer_config(hf_dir):
    path = hf_dir / "tokenizer_config.json"
    return read_json_object(path, "tokenizer_config.json") if path.is_file() else {}


def _wordpiece(hf_dir, vocab, spec):
    """BERT WordPiece with the options transformers 5 would run, refusing those it cannot honour."""
    config = _tokenizer_config(hf_dir)
    for role, default in zip(_WORDPIECE_ROLES, WORDPIECE_SPECIAL_TOKENS):
        token = config.get(f"{role}_token", default)
        token = token.get("content") if isinstance(token, dict) else token
        if token != default:
            raise ConfigError(f"tokenizer_config.json's {role}_token {token!r} is not supported: "
                              f"only BERT's {default!r}")
    return WordPieceTokenizer(vocab, **_wordpiece_options(config, spec))


def _wordpiece_options(config, spec):
    """A BERT tokenizer class builds its BertNormalizer from tokenizer_config.json (clean_text always on)
    and ignores tokenizer.json's; the generic class runs tokenizer.json's normalizer and pre-tokenizer as
    written. Absent options take BertNormalizer's defaults; strip_accents None follows lower-casing."""
    if spec is None or config.get("tokenizer_class") not in _GENERIC_CLASSES:
        source, values, keys = "tokenizer_config.json", config, _CONFIG_KEYS
    else:
        normalizer, pre_tokenizer = spec.get("normalizer"), spec.get("pre_tokenizer") or {}
        for part, value, kind in (("normalizer", normalizer, "BertNormalizer"),
                                  ("pre_tokenizer", pre_tokenizer, "BertPreTokenizer")):
            found = value.get("type") if isinstance(value, dict) else value
            if value is not None and found != kind:
                raise ConfigError(f"tokenizer.json's {part} {found!r} is not supported: only {kind}")
        # Without a normalizer nothing is normalised.
        source, keys = "tokenizer.json's normalizer", _NORMALIZER_KEYS
        values = normalizer or {key: False for key in keys.values()}
    options = dict(_WORDPIECE_DEFAULTS)
    for name, key in keys.items():
        options[name] = values.get(key, options[name])
        if not isinstance(options[name], bool) and not (name == "strip_accents" and options[name] is None):
            raise ConfigError(f"{source} has {key} {options[name]!r}; it must be true or false")
    return options


def _mask_lstrip(hf_dir, spec, specials):
    """Whether the mask token of `specials` (`<mask>`, `[MASK]`) takes the spaces before it: from
    tokenizer.json's added tokens, else tokenizer_config.json's, else RoBERTa's convention (True)."""
    entries = list((spec or {}).get("added_tokens") or [])
    config_path = hf_dir / "tokenizer_config.json"
    if config_path.is_file():
        decoder = read_json_object(config_path, "tokenizer_config.json").get("added_tokens_decoder") or {}
        entries += list(decoder.values()) if isinstance(decoder, dict) else []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("content") == specials.get("mask"):
            return bool(entry.get("lstrip", False))
    return True
