"""The options that decide what a run's instances are, importable without TensorFlow.

`bertology prepare` records them in the manifest of its shards, and `bertology
pretrain --data` takes them from there (`PretrainOptions.with_prepared_data`):
shards fix them, so a run from shards cannot set them otherwise.
"""

RECIPE_FIELDS = ("model", "seq_len", "vocab_size", "masking", "packing", "whole_word", "dupe_factor",
                 "max_predictions", "masking_units", "phrases", "gazetteer")
