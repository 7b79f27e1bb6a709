"""ALBERT's transformers tokenizer: spiece.model, text lowercased unless cased, accents stripped unless kept,
`` and '' turned into ", laying out [CLS] A [SEP] B [SEP]. XLNet's reads and writes the same way."""

from functools import partial

from keras_bertology.convert.hf_export import check_unknown_characters, special_entries
from keras_bertology.convert.hf_tokenizer import CLS_SEP_LAYOUT, HFTokenizerFormat, read_sentencepiece
from keras_bertology.errors import CheckpointError
from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS


def read_spiece(hf_dir, defaults, cased):
    """spiece.model with the specials and preprocessing of tokenizer_config.json (`defaults` and the
    vocabulary's case, `cased`, where it names none): `` and '' become ", accents are stripped unless
    keep_accents, text is lowercased when do_lower_case."""
    def preprocessing(config):
        return dict(lower_case=bool(config.get("do_lower_case", not cased)),
                    strip_accents=not config.get("keep_accents", False), replace_quotes=True)

    return read_sentencepiece(hf_dir, "spiece.model", defaults, preprocessing)


def write_spiece(tokenizer, folder, tokenizer_class, layout=None):
    """spiece.model, with the quote, accent and case preprocessing the class applies itself."""
    check_unknown_characters(tokenizer, tokenizer_class)
    if not tokenizer.preprocessing["replace_quotes"]:
        raise CheckpointError(f"the run's SentencePiece tokenizer keeps `` and ''; transformers' {tokenizer_class} "
                              "always turns them into \"")
    (folder / "spiece.model").write_bytes(tokenizer.model_proto)
    return dict(do_lower_case=tokenizer.preprocessing["lower_case"],
                keep_accents=not tokenizer.preprocessing["strip_accents"],
                **special_entries(tokenizer, ("unk", "sep", "pad", "cls", "mask")))


HF_TOKENIZER = HFTokenizerFormat(classes=("AlbertTokenizer",),
                                 read=partial(read_spiece, defaults=ALBERT_SPECIAL_TOKENS, cased=False),
                                 write=write_spiece, layout=CLS_SEP_LAYOUT)
