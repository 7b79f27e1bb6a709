"""BERT: encoder backbone, presets, and the MLM + NSP pretrainer."""

from keras_bertology.models.bert.backbone import BertBackbone
from keras_bertology.models.bert.presets import BERT_PRESETS
from keras_bertology.models.bert.pretrainer import BertPretrainer
from keras_bertology.models.family import ModelFamily

BERT = ModelFamily(
    name="bert",
    presets=BERT_PRESETS,
    backbone_cls=BertBackbone,
    pretrainer_cls=BertPretrainer,
    tokenizer="wordpiece",
    instances="sentence_pairs",
    masking="static",
)

__all__ = ["BERT", "BERT_PRESETS", "BertBackbone", "BertPretrainer"]
