"""Checkpoint import from other libraries' formats."""

from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint

__all__ = ["convert_hf_checkpoint"]
