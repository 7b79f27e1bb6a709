"""tests/support/counting.py: counting a big preset's parameters fills none of its weights."""

import keras
import numpy as np
from counting import shapes_only

from keras_bertology.models import FAMILIES


def test_a_counted_preset_leaves_no_weight_filled():
    """BERT-Large's 335 M parameters counted; afterwards none of its variables holds a value, so the count
    leaves nothing for the collector (1.3 GB of zeros each when the scope initialised on leaving), and a
    variable made after the count is filled as usual (the scope is closed, random draws are real again)."""
    family = FAMILIES["bert"]
    with shapes_only():
        model = family.backbone_cls(**family.backbone_config("bert-large"))
        assert model.count_params() == 335_141_888
    assert model.weights and all(variable._value is None for variable in model.weights)
    model = keras.layers.Dense(3)
    model.build((None, 2))
    assert model.kernel._value is not None and np.any(keras.ops.convert_to_numpy(model.kernel) != 0)
