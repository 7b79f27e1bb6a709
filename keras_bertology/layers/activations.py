"""Activations by name, including the tanh-approximate GELU that ALBERT and some BERTs use.

Layers keep the name in their config and resolve it here when they build, so
a saved model records "gelu_approximate" rather than a function object.
"""

import keras
from keras import ops

# Hugging Face `hidden_act` values and the activation each one computes.
HF_ACTIVATIONS = {
    "gelu": "gelu",  # exact, erf-based
    "gelu_python": "gelu",
    "gelu_new": "gelu_approximate",  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "quick_gelu": "quick_gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_TANH_SCALE = 0.7978845608028654  # sqrt(2 / pi)


@ops.custom_gradient
def _gelu(x):
    """Keras' exact GELU, whose backward pass keeps only x: differentiating its ops kept their intermediates
    too (erfc of every feed-forward unit, twice the layer's width in bytes), 300 MiB of BERT-base's step."""

    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        cdf = 0.5 * (1.0 + ops.erf(x * _SQRT_HALF))
        return upstream * (cdf + x * _INV_SQRT_2PI * ops.exp(-0.5 * x * x))

    return keras.activations.gelu(x, approximate=False), grad


@ops.custom_gradient
def _gelu_approximate(x):
    """The tanh GELU, whose backward pass keeps only x (see `_gelu`)."""

    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        tanh = ops.tanh(_TANH_SCALE * (x + 0.044715 * x * x * x))
        inner = _TANH_SCALE * (1.0 + 3 * 0.044715 * x * x)
        return upstream * (0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh * tanh) * inner)

    return keras.activations.gelu(x, approximate=True), grad


def _quick_gelu(x):
    return x * ops.sigmoid(1.702 * x)


_CUSTOM = {"gelu": _gelu, "gelu_approximate": _gelu_approximate, "quick_gelu": _quick_gelu}
ACTIVATIONS = ("gelu", "gelu_approximate", "quick_gelu", "relu", "silu", "tanh")


def get_activation(name):
    """The activation function called `name` (one of ACTIVATIONS)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")
    return _CUSTOM.get(name) or keras.activations.get(name)
