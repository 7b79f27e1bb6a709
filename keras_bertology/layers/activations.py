"""Activations by name, including the tanh-approximate GELU that ALBERT and some BERTs use.

Layers keep the name in their config and resolve it here when they build, so
a saved model records "gelu_approximate" rather than a function object.
"""

import keras

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


def _gelu_approximate(x):
    return keras.activations.gelu(x, approximate=True)


def _quick_gelu(x):
    return x * keras.ops.sigmoid(1.702 * x)


_CUSTOM = {"gelu_approximate": _gelu_approximate, "quick_gelu": _quick_gelu}
ACTIVATIONS = ("gelu", "gelu_approximate", "quick_gelu", "relu", "silu", "tanh")


def get_activation(name):
    """The activation function called `name` (one of ACTIVATIONS)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")
    return _CUSTOM.get(name) or keras.activations.get(name)
