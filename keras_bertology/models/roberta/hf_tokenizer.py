"""RoBERTa's transformers tokenizer: byte-level BPE with <s> <pad> </s> <unk> <mask>, laying out
<s> A </s></s> B </s>."""

from functools import partial

from keras_bertology.convert.hf_export import write_byte_bpe
from keras_bertology.convert.hf_tokenizer import DOUBLE_SEP_LAYOUT, HFTokenizerFormat, read_byte_bpe
from keras_bertology.models.roberta.tokenizer import ROBERTA_SPECIAL_TOKENS

HF_TOKENIZER = HFTokenizerFormat(classes=("RobertaTokenizer",),
                                 read=partial(read_byte_bpe, special_tokens=ROBERTA_SPECIAL_TOKENS),
                                 write=write_byte_bpe, layout=DOUBLE_SEP_LAYOUT)
