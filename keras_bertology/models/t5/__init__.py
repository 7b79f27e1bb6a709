"""T5: the encoder-decoder family."""

from keras_bertology.models.t5.backbone import T5Backbone

__all__ = ["T5Backbone"]
