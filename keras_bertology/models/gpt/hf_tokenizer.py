"""GPT-2's transformers tokenizer: byte-level BPE with <|endoftext|>, adding nothing around a text."""

from functools import partial

from keras_bertology.convert.hf_export import write_byte_bpe
from keras_bertology.convert.hf_tokenizer import HFTokenizerFormat, read_byte_bpe
from keras_bertology.models.gpt.tokenizer import GPT2_SPECIAL_TOKENS

HF_TOKENIZER = HFTokenizerFormat(classes=("GPT2Tokenizer",),
                                 read=partial(read_byte_bpe, special_tokens=GPT2_SPECIAL_TOKENS),
                                 write=write_byte_bpe, layout=("$A", "$A $B:1"))
