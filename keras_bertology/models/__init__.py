"""Model families: backbones, presets and pretrainers."""

from keras_bertology.models.bert import BERT, BertBackbone, BertPretrainer
from keras_bertology.models.registry import FAMILIES, check_preset, get_family
from keras_bertology.models.roberta import ROBERTA, RobertaPretrainer

__all__ = [
    "BERT",
    "FAMILIES",
    "ROBERTA",
    "BertBackbone",
    "BertPretrainer",
    "RobertaPretrainer",
    "check_preset",
    "get_family",
]
