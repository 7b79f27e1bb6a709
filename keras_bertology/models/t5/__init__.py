"""T5: the encoder-decoder family."""

from keras_bertology.models.t5.backbone import T5Backbone
from keras_bertology.models.t5.pretrainer import T5Pretrainer

__all__ = ["T5Backbone", "T5Pretrainer"]
