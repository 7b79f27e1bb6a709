"""BigBird's transformers tokenizer: spiece.model with ALBERT's specials, text reaching SentencePiece exactly
as it is, laying out [CLS] A [SEP] B [SEP]."""

from functools import partial

from keras_bertology.convert.hf_export import write_unchanged_text_model
from keras_bertology.convert.hf_tokenizer import CLS_SEP_LAYOUT, HFTokenizerFormat, read_sentencepiece
from keras_bertology.models.albert.tokenizer import ALBERT_SPECIAL_TOKENS


def write(tokenizer, folder, tokenizer_class, layout=None):
    return write_unchanged_text_model(tokenizer, folder / "spiece.model", tokenizer_class,
                                      tuple(tokenizer.preprocessing))


HF_TOKENIZER = HFTokenizerFormat(classes=("BigBirdTokenizer",),
                                 read=partial(read_sentencepiece, name="spiece.model", defaults=ALBERT_SPECIAL_TOKENS),
                                 write=write, layout=CLS_SEP_LAYOUT)
