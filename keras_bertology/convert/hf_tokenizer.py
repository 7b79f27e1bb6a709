"""The in-graph tokenizer of a Hugging Face model folder, read as its transformers tokenizer class reads it.

Each family declares how the transformers tokenizer classes of its models are
read and written (`HFTokenizerFormat`, named by `Conversion.hf_tokenizer_path`):
the class that tokenizer_config.json names is looked up among what families
declare, else the format of the model's family (config.json's `model_type`)
serves. The readers share the helpers below, one per kind of vocabulary file:
`vocab.txt` (WordPiece) or `vocab.json` + `merges.txt` (byte-level BPE), as
transformers 4 writes them; `tokenizer.json`, which transformers 5 writes alone;
SentencePiece models (`spiece.model`, `spm.model`). All are read into tokenizers
that run inside the SavedModel graph.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.tokenizers.base import read_json_object, tokens_by_id
from keras_bertology.tokenizers.byte_bpe import ByteLevelBPETokenizer
from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer, sentencepiece_pieces, with_user_pieces
from keras_bertology.tokenizers.wordpiece import WORDPIECE_SPECIAL_TOKENS, WordPieceTokenizer

# Text layouts as templates (`HFTokenizerFormat.layout`): roles (the folder's cls and sep tokens) and texts
# ($A, $B), each with its segment id after a colon (0 if none); a text alone, then a pair.
CLS_SEP_LAYOUT = ("cls $A sep", "cls $A sep $B:1 sep:1")
DOUBLE_SEP_LAYOUT = ("cls $A sep", "cls $A sep sep $B sep")


@dataclass(frozen=True)
class HFTokenizerFormat:
    """How transformers tokenizer classes of a family are read into our tokenizers and written from them.

    Attributes:
        classes: the transformers tokenizer classes read so (tokenizer_config.json's `tokenizer_class`,
            without "Fast"); the first is the one AutoTokenizer builds for the family's model types where
            tokenizer_config.json names none.
        read: `read(hf_dir) -> Tokenizer`, None where the folder lacks the files these classes read.
        write: `write(tokenizer, folder, tokenizer_class, layout) -> dict`: writes the files the class
            reads and returns tokenizer_config.json's entries for them (`layout` is the run's, for a class
            that writes its placement of specials into tokenizer.json); None: the classes are not written.
        layout: how the classes lay out a text and a pair (templates, see `CLS_SEP_LAYOUT`); None: as
            tokenizer.json's post_processor says.
    """

    classes: tuple
    read: Callable
    write: Callable | None = None
    layout: tuple | None = None

    @property
    def default_class(self):
        return self.classes[0]


def declared_formats():
    """{transformers tokenizer class: the `HFTokenizerFormat` a registered family declares for it}."""
    from keras_bertology.models import FAMILIES

    formats = (family.hf_tokenizer for family in FAMILIES.values())
    return {name: form for form in formats if form is not None for name in form.classes}


def format_for_class(tokenizer_class):
    """The format that reads and writes `tokenizer_class`, or a CheckpointError naming those declared."""
    formats = declared_formats()
    if tokenizer_class not in formats:
        raise CheckpointError(f"transformers' {tokenizer_class} is no tokenizer class a family declares; "
                              f"declared: {', '.join(sorted(formats))}")
    return formats[tokenizer_class]


def _folder_format(hf_dir, family):
    """(format, transformers class) of the folder's tokenizer: tokenizer_config.json's class where a family
    declares it, else the default class of `family` (given, or config.json's model type's). (None, None)
    where neither names one."""
    named = tokenizer_config(hf_dir).get("tokenizer_class")
    named = str(named).removesuffix("Fast") if named is not None else None
    formats = declared_formats()
    if named in formats:
        return formats[named], named
    family = family or _model_family(hf_dir)
    form = family.hf_tokenizer if family is not None else None
    return (form, form.default_class) if form is not None else (None, None)


def _model_family(hf_dir):
    """The family of config.json's model type; None without config.json or for a type no family imports."""
    from keras_bertology.models import FAMILIES

    path = hf_dir / "config.json"
    model_type = read_json_object(path, "config.json").get("model_type") if path.is_file() else None
    return next((family for family in FAMILIES.values() if model_type in family.conversion.hf_model_types), None)


def hf_text_layout(hf_dir, tokenizer, family=None):
    """How the folder's transformers tokenizer lays out a text and a pair (`Tokenizer.layout`, tokens as
    `tokenizer` writes them): its class's way (tokenizer_config.json's class, else the default class of
    `family`, which AutoTokenizer builds for the model type), or, where the class runs tokenizer.json as
    written, its post_processor. None where the folder does not say (no class, no post_processor to read)."""
    hf_dir = Path(hf_dir)
    try:
        return _text_layout(hf_dir, tokenizer, *_folder_format(hf_dir, family))
    except ConfigError as error:
        raise CheckpointError(f"the tokenizer in {hf_dir} cannot be read: {error}") from None


def _text_layout(hf_dir, tokenizer, form, tokenizer_class):
    if form is not None and form.layout is not None:
        tokens = tokenizer.vocabulary
        roles = {role: tokens[tokenizer.optional_id(role)] for role in ("cls", "sep")
                 if tokenizer.optional_id(role) is not None}
        try:
            return {kind: [_template_piece(item, roles) for item in template.split()]
                    for kind, template in zip(("single", "pair"), form.layout)}
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
        template = CLS_SEP_LAYOUT if kind == "BertProcessing" else DOUBLE_SEP_LAYOUT
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


def load_hf_tokenizer(hf_dir, model_vocab_size, family=None):
    """The folder's tokenizer, or None when it ships none that its class (see `hf_text_layout`; `family`
    is the model's where the folder has no config.json) reads; ids must fit the model's vocabulary."""
    hf_dir = Path(hf_dir)
    try:
        form, _ = _folder_format(hf_dir, family)
        tokenizer = form.read(hf_dir) if form is not None else None
    except ConfigError as error:
        raise CheckpointError(f"the tokenizer in {hf_dir} cannot be read: {error}") from None
    if tokenizer is not None and tokenizer.vocab_size > model_vocab_size:
        raise CheckpointError(
            f"the tokenizer in {hf_dir} has {tokenizer.vocab_size} tokens but the model only "
            f"{model_vocab_size} embeddings: they do not belong together"
        )
    return tokenizer


# Readers of each kind of vocabulary file, which the families' formats call with their own settings --------


def tokenizer_config(hf_dir):
    path = Path(hf_dir) / "tokenizer_config.json"
    return read_json_object(path, "tokenizer_config.json") if path.is_file() else {}


def tokenizer_spec(hf_dir):
    """tokenizer.json's content, None without one."""
    path = Path(hf_dir) / "tokenizer.json"
    return read_json_object(path, "tokenizer.json") if path.is_file() else None


def configured_specials(config, defaults):
    """{role: token} of tokenizer_config.json's `{role}_token` entries, `defaults` where it has none."""
    specials = {}
    for role, default in defaults.items():
        token = config.get(f"{role}_token", default)
        specials[role] = token.get("content", default) if isinstance(token, dict) else str(token)
    return specials


# The order in which transformers appends the special tokens a SentencePiece model lacks: bos (these models'
# cls), eos (their sep), unk, pad, mask.
_ADDED_ORDER = ("cls", "sep", "unk", "pad", "mask")


def with_missing_specials(model_proto, specials):
    """The model with the configured `specials` it lacks appended as pieces of their own, new ids after its
    pieces in transformers' order, as transformers adds them: DeBERTa-v3's [MASK] (id 128,000 after the
    released model's 128,000 pieces), or a [UNK] that tokenizer_config.json names over a model whose unknown
    piece is <unk> (characters outside the vocabulary still become <unk>, as in transformers)."""
    pieces = set(sentencepiece_pieces(model_proto))
    missing = list(dict.fromkeys(specials[role] for role in _ADDED_ORDER if role in specials
                                 and specials[role] not in pieces))
    return with_user_pieces(model_proto, missing) if missing else model_proto


def read_model_file(hf_dir, name):
    """The bytes of the folder's SentencePiece model `name`, None without one."""
    path = Path(hf_dir) / name
    return path.read_bytes() if path.is_file() else None


def read_sentencepiece(hf_dir, name, defaults, options=None):
    """The folder's SentencePiece model `name` with tokenizer_config.json's specials (`defaults` where it
    names none; those the model lacks appended, `with_missing_specials`) and the preprocessing that
    `options(tokenizer_config)` gives (none without it); None without the model."""
    model_proto = read_model_file(hf_dir, name)
    if model_proto is None:
        return None
    config = tokenizer_config(hf_dir)
    specials = configured_specials(config, defaults)
    return SentencePieceTokenizer(with_missing_specials(model_proto, specials), specials,
                                  **(options(config) if options else {}))


_WORDPIECE_ROLES = ("pad", "unk", "cls", "sep", "mask")  # the order of WORDPIECE_SPECIAL_TOKENS
# WordPieceTokenizer's options, BertNormalizer's defaults, and their keys in each file.
_WORDPIECE_DEFAULTS = dict(lower_case=True, strip_accents=None, chinese_chars=True, clean_text=True)
_CONFIG_KEYS = dict(lower_case="do_lower_case", strip_accents="strip_accents", chinese_chars="tokenize_chinese_chars")
_NORMALIZER_KEYS = dict(lower_case="lowercase", strip_accents="strip_accents", chinese_chars="handle_chinese_chars",
                        clean_text="clean_text")


def read_wordpiece(hf_dir, as_written):
    """BERT WordPiece from vocab.txt, else from tokenizer.json's WordPiece model, with the options
    transformers 5 would run, refusing those it cannot honour. A class that runs tokenizer.json `as_written`
    (the generic one) reads its model and normalizer and leaves a vocab.txt beside it unread; a BERT class
    rebuilds its normaliser from tokenizer_config.json. None where the folder has neither file."""
    hf_dir = Path(hf_dir)
    spec = tokenizer_spec(hf_dir)
    if (hf_dir / "vocab.txt").is_file() and not (as_written and spec is not None):
        vocab = hf_dir / "vocab.txt"
    elif spec is not None:
        model = spec.get("model") or {}
        if model.get("type") != "WordPiece":
            raise ConfigError(f"tokenizer.json has a {model.get('type')!r} model, not the WordPiece expected")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise ConfigError("only the '##' continuation prefix of BERT WordPiece is supported")
        if model.get("unk_token", "[UNK]") != "[UNK]":
            raise ConfigError(f"tokenizer.json's unk_token {model['unk_token']!r} is not supported: "
                              "only BERT's '[UNK]'")
        vocab = tokens_by_id(model.get("vocab"))
    else:
        return None
    config = tokenizer_config(hf_dir)
    for role, default in zip(_WORDPIECE_ROLES, WORDPIECE_SPECIAL_TOKENS):
        token = config.get(f"{role}_token", default)
        token = token.get("content") if isinstance(token, dict) else token
        if token != default:
            raise ConfigError(f"tokenizer_config.json's {role}_token {token!r} is not supported: "
                              f"only BERT's {default!r}")
    return WordPieceTokenizer(vocab, **_wordpiece_options(config, spec if as_written else None))


def _wordpiece_options(config, spec):
    """The options of tokenizer_config.json (clean_text always on), or of `spec`, tokenizer.json run as
    written, with its normalizer and pre-tokenizer. Absent options take BertNormalizer's defaults;
    strip_accents None follows lower-casing."""
    if spec is None:
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


def read_byte_bpe(hf_dir, special_tokens):
    """Byte-level BPE with `special_tokens` (role -> token) from vocab.json + merges.txt, else from
    tokenizer.json's BPE model; None where the folder has neither."""
    hf_dir = Path(hf_dir)
    spec = tokenizer_spec(hf_dir)
    lstrip = _mask_lstrip(hf_dir, spec, special_tokens)
    if (hf_dir / "vocab.json").is_file() and (hf_dir / "merges.txt").is_file():
        return ByteLevelBPETokenizer.from_files(hf_dir, mask_lstrip=lstrip, special_tokens=special_tokens)
    if spec is None:
        return None
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise ConfigError(f"tokenizer.json has a {model.get('type')!r} model, not the byte-level BPE expected")
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    return ByteLevelBPETokenizer(model.get("vocab") or {}, merges, mask_lstrip=lstrip, special_tokens=special_tokens)


def read_tokenizer_json(hf_dir, default_specials):
    """tokenizer.json run as written: its WordPiece or byte-level BPE model, the latter with
    tokenizer_config.json's special tokens (`default_specials` where it names none); None without one."""
    spec = tokenizer_spec(hf_dir)
    if spec is None:
        return None
    kind = (spec.get("model") or {}).get("type")
    if kind == "WordPiece":
        return read_wordpiece(hf_dir, as_written=True)
    if kind == "BPE":
        return read_byte_bpe(hf_dir, configured_specials(tokenizer_config(hf_dir), default_specials))
    raise ConfigError(f"tokenizer.json has a {kind!r} model; supported: WordPiece, BPE (byte-level)")


def _mask_lstrip(hf_dir, spec, specials):
    """Whether the mask token of `specials` (`<mask>`, `[MASK]`) takes the spaces before it: from
    tokenizer.json's added tokens, else tokenizer_config.json's, else RoBERTa's convention (True)."""
    entries = list((spec or {}).get("added_tokens") or [])
    decoder = tokenizer_config(hf_dir).get("added_tokens_decoder") or {}
    entries += list(decoder.values()) if isinstance(decoder, dict) else []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("content") == specials.get("mask"):
            return bool(entry.get("lstrip", False))
    return True
