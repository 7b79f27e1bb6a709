"""DistilBERT's transformers tokenizer: BERT's under its own class name."""

import dataclasses

from keras_bertology.models.bert.hf_tokenizer import HF_TOKENIZER as BERT_HF_TOKENIZER

HF_TOKENIZER = dataclasses.replace(BERT_HF_TOKENIZER, classes=("DistilBertTokenizer",))
