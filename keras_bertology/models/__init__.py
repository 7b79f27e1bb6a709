"""Model families: backbones, presets and pretrainers.

Family records and presets import without Keras; the model classes load on
first use (`from keras_bertology.models import BertBackbone`).
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.bert import BERT
from keras_bertology.models.registry import FAMILIES, check_preset, get_family, register_family
from keras_bertology.models.roberta import ROBERTA

__getattr__ = lazy_attributes(__name__, {
    "Backbone": "keras_bertology.models.backbone",
    "Pretrainer": "keras_bertology.models.pretrainer",
    "SequenceClassifier": "keras_bertology.models.task_models",
    "TokenClassifier": "keras_bertology.models.task_models",
    "SpanExtractor": "keras_bertology.models.task_models",
    "BertBackbone": "keras_bertology.models.bert.backbone",
    "BertPretrainer": "keras_bertology.models.bert.pretrainer",
    "RobertaPretrainer": "keras_bertology.models.roberta.pretrainer",
})

__all__ = [
    "BERT",
    "FAMILIES",
    "ROBERTA",
    "Backbone",
    "BertBackbone",
    "BertPretrainer",
    "Pretrainer",
    "RobertaPretrainer",
    "SequenceClassifier",
    "SpanExtractor",
    "TokenClassifier",
    "check_preset",
    "get_family",
    "register_family",
]
