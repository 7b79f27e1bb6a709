"""Loading a `.keras` archive whatever the process imported before.

Keras finds a custom class by the name it was registered under, and a class
registers when its module is imported. An archive written by one family may
hold the classes of another family's modules (DeBERTa-v3's pretrainer is
DeBERTa's), so registering what one family record names is not enough in a
fresh process. The archive's own config says which module each class came
from: the loader imports those of this package before Keras reads it.
"""

import importlib
import json
import zipfile

import keras

PACKAGE = "keras_bertology"
CONFIG_FILE = "config.json"


def modules_named_in(path):
    """The modules of this package that the archive at `path` names for its classes, in config order."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read(CONFIG_FILE))
    found = []
    _collect_modules(config, found)
    return list(dict.fromkeys(found))


def _collect_modules(node, found):
    if isinstance(node, dict):
        module = node.get("module")
        if isinstance(module, str) and (module == PACKAGE or module.startswith(PACKAGE + ".")):
            found.append(module)
        for value in node.values():
            _collect_modules(value, found)
    elif isinstance(node, list):
        for value in node:
            _collect_modules(value, found)


def register_classes_of(path):
    """Import every module of this package that the archive names, which registers its classes; only this
    package's modules, so an archive cannot make the loader import anything else."""
    for module in modules_named_in(path):
        importlib.import_module(module)


def load_keras_archive(path, compile=False):
    """`keras.saving.load_model(path)` after registering the classes the archive names."""
    register_classes_of(path)
    return keras.saving.load_model(path, compile=compile)
