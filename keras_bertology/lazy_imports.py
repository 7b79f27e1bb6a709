"""Deferred imports, so the command line and preset listings start without TensorFlow.

Family records and presets are plain data; the Keras classes behind them are
imported only when a model is really built or loaded.
"""

import importlib


def import_object(path):
    """The object named by "package.module:Name"."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def lazy_attributes(module_name, names):
    """A module `__getattr__` that imports each of `names` from its module on first use.

    `names` maps an attribute to the module defining it, e.g.
    {"BertBackbone": "keras_bertology.models.bert.backbone"}.
    """

    def __getattr__(name):
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name]), name)

    return __getattr__
