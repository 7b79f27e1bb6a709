"""DeBERTa-v2/v3's transformers tokenizer (DebertaV2Tokenizer): spm.model with DeBERTa's specials (those the
model lacks appended), text cased unless do_lower_case and otherwise unchanged, laying out [CLS] A [SEP] B [SEP]."""

from functools import partial

from keras_bertology.convert.hf_export import write_unchanged_text_model
from keras_bertology.convert.hf_tokenizer import CLS_SEP_LAYOUT, HFTokenizerFormat, read_sentencepiece
from keras_bertology.errors import ConfigError
from keras_bertology.models.deberta.tokenizer import DEBERTA_SPECIAL_TOKENS


def preprocessing(config):
    """Lower-casing as tokenizer_config.json says; its splitting of punctuation is refused."""
    if config.get("split_by_punct"):
        raise ConfigError("tokenizer_config.json sets split_by_punct (punctuation split off before "
                          "SentencePiece), which is not supported")
    return dict(lower_case=bool(config.get("do_lower_case", False)))


def write(tokenizer, folder, tokenizer_class, layout=None):
    config = write_unchanged_text_model(tokenizer, folder / "spm.model", tokenizer_class,
                                        ("strip_accents", "replace_quotes"))
    return dict(do_lower_case=tokenizer.preprocessing["lower_case"], split_by_punct=False, vocab_type="spm", **config)


HF_TOKENIZER = HFTokenizerFormat(classes=("DebertaV2Tokenizer",),
                                 read=partial(read_sentencepiece, name="spm.model", defaults=DEBERTA_SPECIAL_TOKENS,
                                              options=preprocessing),
                                 write=write, layout=CLS_SEP_LAYOUT)
