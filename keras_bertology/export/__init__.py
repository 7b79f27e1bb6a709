"""Export to SavedModel for serving."""

from keras_bertology.export.saved_model import export_saved_model

__all__ = ["export_saved_model"]
