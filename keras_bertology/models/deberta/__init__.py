"""DeBERTa: disentangled attention over relative positions (v1), and DeBERTa-v3's layout."""

from keras_bertology.lazy_imports import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "DebertaBackbone": "keras_bertology.models.deberta.backbone",
    "DebertaPretrainer": "keras_bertology.models.deberta.pretrainer",
})

__all__ = ["DebertaBackbone", "DebertaPretrainer"]
