"""BigBird's transformers tokenizer: spiece.model with ALBERT's specials, text reaching SentencePiece exactly
as it is, laying out [CLS] A [SEP] B [SEP]."""

from keras_bertology.convert.hf_export import write_unchanged_text_model
from keras_bertology.convert.hf_tokenizer import (
    CLS_SEP_LAYOUT,
    HFTokenizerFormat,
    configured_specials,
    read_model_file,
    tokenizer_config,
    with_missing_specials,
)
from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS
from keras_bertology.tokenizers.sentencepiece import SentencePieceTokenizer


def read(hf_dir):
    """spiece.model with tokenizer_config.json's specials (those the model lacks appended)."""
    model_proto = read_model_file(hf_dir, "spiece.model")
    if model_proto is None:
        return None
    specials = configured_specials(tokenizer_config(hf_dir), ALBERT_SPECIAL_TOKENS)
    return SentencePieceTokenizer(with_missing_specials(model_proto, specials), specials)


def write(tokenizer, folder, tokenizer_class, layout=None):
    return write_unchanged_text_model(tokenizer, folder / "spiece.model", tokenizer_class,
                                      tuple(tokenizer.preprocessing))


HF_TOKENIZER = HFTokenizerFormat(classes=("BigBirdTokenizer",), read=read, write=write, layout=CLS_SEP_LAYOUT)
