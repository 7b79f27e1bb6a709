"""ModernBERT's transformers tokenizer: the generic class, which runs tokenizer.json as written (transformers
5 calls it TokenizersBackend), for model types without a class of their own; ModernBERT's vocabulary is a
byte-level BPE with DeBERTa's specials."""

from functools import partial

from keras_bertology.convert.hf_export import write_tokenizer_json
from keras_bertology.convert.hf_tokenizer import HFTokenizerFormat, read_tokenizer_json
from keras_bertology.models.deberta.tokenizer import DEBERTA_SPECIAL_TOKENS

# No layout of its own: tokenizer.json's post_processor places the specials.
HF_TOKENIZER = HFTokenizerFormat(classes=("PreTrainedTokenizerFast", "TokenizersBackend"),
                                 read=partial(read_tokenizer_json, default_specials=DEBERTA_SPECIAL_TOKENS),
                                 write=write_tokenizer_json)
