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
    """Hands out checkpoint tensors by name, remembering which were used and what the import noted."""

    def __init__(self, weights, prefix):
        self.weights = weights
        # Task models (`BertForMaskedLM`, ...) prefix the encoder's names; bare encoders do not.
        self.prefix = prefix if any(name.startswith(prefix) for name in weights) else ""
        self.used = set()
        self.notes = []  # one line each, for the convert report: where the import read past config.json

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

    def take_if_equal(self, name, expected):
        """Consume `name` when it holds exactly `expected` (a copy of a tied tensor); whether it did."""
        if not self.has(name) or not np.array_equal(self.weights[self._key(name)], expected):
            return False
        self.get(name)
        return True


def ties_word_embeddings(config):
    """transformers' reading of the flag: true unless config.json sets it to a false value."""
    return bool(config.get("tie_word_embeddings", True))


def untied_decoder(source, name, embeddings, config):
    """The output decoder [vocab, width] transformers computes logits with, or None where that is
    `embeddings`, the word embeddings our heads tie it to.

    transformers 5 uses a decoder tensor saved in the folder whatever tie_word_embeddings says (set,
    it ties the two only where they are equal), and the word embeddings where none is saved, unless
    tie_word_embeddings is false: that decoder would keep random initial values.
    """
    if source.take_if_equal(name, embeddings):
        return None
    if not source.has(name):
        if not ties_word_embeddings(config):
            raise CheckpointError(f"config.json sets tie_word_embeddings=false but the checkpoint has no {name}: "
                                  "transformers would compute with a randomly initialised decoder")
        return None
    source.notes.append(f"{name} differs from the word embeddings: imported as an untied decoder, "
                        "the one transformers computes with")
    return np.asarray(source.get(name))


def decoder_bias(source, head, config):
    """The output bias of a head that holds `{head}.bias` and `{head}.decoder.bias` (BERT, RoBERTa,
    ALBERT): transformers adds the decoder's own to the logits, and takes `{head}.bias` (tied to it)
    only where the decoder's is not saved and tie_word_embeddings is not false."""
    bias, own = f"{head}.bias", f"{head}.decoder.bias"
    if not source.has(own):
        if not ties_word_embeddings(config):
            raise CheckpointError(f"config.json sets tie_word_embeddings=false but the checkpoint has no {own}: "
                                  "transformers would add a freshly initialised bias to the logits")
        return source.get(bias)
    value = source.get(own)
    if source.has(bias) and not source.take_if_equal(bias, value):
        source.notes.append(f"{bias} differs from {own}: imported {own}, the bias transformers adds to the logits")
    return value


def load_decoder(head, decoder, name):
    """Copy an untied decoder [vocab, width] into `head.decoder_kernel`; nothing for a tied one (None)."""
    if decoder is not None:
        assign(head.decoder_kernel, np.asarray(decoder).T, name)


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


# The other direction: Keras variables into Hugging Face tensors (`bertology export --format hf`).

# Our activation names and the Hugging Face `hidden_act` that computes each (the inverse of HF_ACTIVATIONS).
HF_ACTIVATION_NAMES = {"gelu": "gelu", "gelu_approximate": "gelu_new", "quick_gelu": "quick_gelu", "relu": "relu",
                       "silu": "silu"}


def hf_activation(name, what="activation"):
    """The Hugging Face name of our activation `name`; CheckpointError where transformers has none."""
    if name not in HF_ACTIVATION_NAMES:
        raise CheckpointError(f"the {what} {name!r} has no Hugging Face name; exportable: "
                              f"{', '.join(HF_ACTIVATION_NAMES)}")
    return HF_ACTIVATION_NAMES[name]


class WeightSink:
    """Collects Hugging Face tensors (float32 NumPy) by name, the mirror of `WeightSource`: Keras Dense
    kernels [in, out] become PyTorch Linear weights [out, in]; `prefix` starts every encoder name."""

    def __init__(self, prefix=""):
        self.prefix = prefix
        self.tensors = {}

    def put(self, name, value, prefixed=True):
        name = self.prefix + name if prefixed else name
        if name in self.tensors:
            raise ValueError(f"tensor {name} written twice")
        self.tensors[name] = np.ascontiguousarray(_numpy(value), dtype="float32")

    def dense(self, dense, name, prefixed=True):
        self.put(f"{name}.weight", _numpy(dense.kernel).T, prefixed)
        self.put(f"{name}.bias", dense.bias, prefixed)

    def layer_norm(self, norm, name, prefixed=True):
        self.put(f"{name}.weight", norm.gamma, prefixed)
        self.put(f"{name}.bias", norm.beta, prefixed)


def _numpy(value):
    """A Keras variable's or an array's values as NumPy."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
