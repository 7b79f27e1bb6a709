"""T5: the encoder-decoder family (its backbone, pretrainer, conversion and presets so far; the family
object that the CLI reads comes with its tokenizer and serving).

Imported lazily: discovering the families (`models.registry`) must not start TensorFlow.
"""

from keras_bertology.lazy_imports import lazy_attributes

__getattr__ = lazy_attributes(__name__, {
    "T5Backbone": "keras_bertology.models.t5.backbone",
    "T5Pretrainer": "keras_bertology.models.t5.pretrainer",
})

__all__ = ["T5Backbone", "T5Pretrainer"]
