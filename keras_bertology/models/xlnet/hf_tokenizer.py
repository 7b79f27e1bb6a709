"""XLNet's transformers tokenizer: ALBERT's way of reading spiece.model, cased by default, with <cls> <sep>,
laying out A <sep> B <sep> <cls> (the <cls> in segment 2)."""

from functools import partial

from keras_bertology.convert.hf_tokenizer import HFTokenizerFormat
from keras_bertology.models.albert.hf_tokenizer import read_spiece, write_spiece
from keras_bertology.models.xlnet.tokenizer import XLNET_SPECIAL_TOKENS

HF_TOKENIZER = HFTokenizerFormat(classes=("XLNetTokenizer",),
                                 read=partial(read_spiece, defaults=XLNET_SPECIAL_TOKENS, cased=True),
                                 write=write_spiece, layout=("$A sep cls:2", "$A sep $B:1 sep:1 cls:2"))
