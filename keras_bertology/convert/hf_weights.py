"""Reading Hugging Face tensors into Keras variables: shared by every family's converter.

PyTorch Linear weights are stored [out, in] and become Keras' [in, out]
kernels; every shape is checked before assignment, and each tensor handed
out is remembered so that unused ones can be reported.
"""

import numpy as np

from keras_bertology.errors import CheckpointError

# Index buffers some checkpoints carry; they hold no learned values.
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def check_sizes(config, keys):
    """Each of `keys` must be a positive integer in config.json."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"config.json: {key} must be a positive integer (got {value!r})")


class WeightSource:
    """Hands out checkpoint tensors by name, remembering which were used."""

    def __init__(self, weights, prefix):
        self.weights = weights
        # Task models (`BertForMaskedLM`, ...) prefix the encoder's names; bare encoders do not.
        self.prefix = prefix if any(name.startswith(prefix) for name in weights) else ""
        self.used = set()

    def has(self, name):
        return self._key(name) in self.weights

    def _key(self, name):
        key = self.prefix + name
        return key if key in self.weights else name

    def get(self, name):
        key = self._key(name)
        if key not in self.weights:
            raise CheckpointError(f"checkpoint has no tensor {self.prefix + name!r} (incomplete checkpoint?)")
        self.used.add(key)
        return self.weights[key]

    def take_tied_copy(self, name, expected):
        """Consume `name` when present, refusing it unless it equals `expected` (a tied tensor)."""
        if not self.has(name):
            return
        if not np.array_equal(self.get(name), expected):
            raise CheckpointError(
                f"{self.prefix + name} differs from the tensor it should be tied to; "
                "keras-bertology ties the MLM decoder to the word embeddings"
            )


def assign(variable, value, name):
    value = np.asarray(value, dtype="float32")
    if tuple(variable.shape) != value.shape:
        raise CheckpointError(
            f"shape mismatch for {name}: checkpoint {value.shape}, model {tuple(variable.shape)}"
        )
    variable.assign(value)


def load_dense(dense, source, name):
    assign(dense.kernel, source.get(f"{name}.weight").T, f"{name}.weight")
    assign(dense.bias, source.get(f"{name}.bias"), f"{name}.bias")


def load_layer_norm(norm, source, name):
    assign(norm.gamma, source.get(f"{name}.weight"), f"{name}.weight")
    assign(norm.beta, source.get(f"{name}.bias"), f"{name}.bias")


def rename_legacy_layer_norm(weights):
    """Old BERT checkpoints call LayerNorm parameters gamma/beta instead of weight/bias."""
    renamed = {}
    for name, value in weights.items():
        if "LayerNorm" in name:
            name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[name] = value
    return renamed
