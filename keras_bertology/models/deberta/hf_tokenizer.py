"""DeBERTa's transformers tokenizer: byte-level BPE with [PAD] [CLS] [SEP] [UNK] [MASK], laying out pairs
as RoBERTa's does ([CLS] A [SEP] [SEP] B [SEP])."""

from functools import partial

from keras_bertology.convert.hf_export import write_byte_bpe
from keras_bertology.convert.hf_tokenizer import DOUBLE_SEP_LAYOUT, HFTokenizerFormat, read_byte_bpe
from keras_bertology.models.deberta.tokenizer import DEBERTA_SPECIAL_TOKENS

HF_TOKENIZER = HFTokenizerFormat(classes=("DebertaTokenizer",),
                                 read=partial(read_byte_bpe, special_tokens=DEBERTA_SPECIAL_TOKENS),
                                 write=write_byte_bpe, layout=DOUBLE_SEP_LAYOUT)
