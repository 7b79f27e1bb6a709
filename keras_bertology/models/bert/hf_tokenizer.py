"""BERT's transformers tokenizer: WordPiece (vocab.txt, or tokenizer.json alone) laying out [CLS] A [SEP] B [SEP]."""

from functools import partial

from keras_bertology.convert.hf_export import write_wordpiece
from keras_bertology.convert.hf_tokenizer import CLS_SEP_LAYOUT, HFTokenizerFormat, read_wordpiece

# The class rebuilds its normaliser from tokenizer_config.json rather than run tokenizer.json's.
HF_TOKENIZER = HFTokenizerFormat(classes=("BertTokenizer",), read=partial(read_wordpiece, as_written=False),
                                 write=write_wordpiece, layout=CLS_SEP_LAYOUT)
