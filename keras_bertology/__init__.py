"""keras-bertology: BERT-family pretraining, checkpoint import and SavedModel export in Keras 3.

Subpackages: `layers` (model-agnostic building blocks), `models` (one folder
per family: backbone, presets, pretrainer), `data` (corpus, tokenizers,
instances, masking, tf.data pipelines), `engine`, `pretraining`, `export`, `convert`.
"""

__version__ = "0.2.0"
