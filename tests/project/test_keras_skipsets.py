"""tests/conftest.py keeps Keras' attribute skip-sets, which Keras 3.15.1 builds again for every layer it saves or
loads (it reads them under another key than it stores them)."""

import sys

import keras
from keras.src.backend.common import global_state
from keras.src.saving import saving_lib


def test_the_workers_build_each_skipset_once_and_keras_still_would_not():
    kept = sys.modules["conftest"].KERAS_SKIPSETS
    first = saving_lib.get_attr_skipset("Layer")
    assert saving_lib.get_attr_skipset("Layer") is first is kept["Layer"]
    assert "name" in first and "call" in first  # what a bare Layer has: the walk skips it
    keras.backend.clear_session()  # as the tests call it: it wipes Keras' own store, not this one
    assert saving_lib.get_attr_skipset("Layer") is first
    keras_own = saving_lib.get_attr_skipset.__defaults__[0]
    for obj_type in ("Layer", "Functional", "Operation", "Optimizer", "Metric", "Loss"):
        assert saving_lib.get_attr_skipset(obj_type) == keras_own(obj_type), obj_type
    assert global_state.get_global_attribute("saving_attr_skiplist_Layer") is None, \
        "Keras now finds the skip-set it stored: remove _kept_skipset from tests/conftest.py"
