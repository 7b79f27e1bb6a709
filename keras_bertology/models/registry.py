"""Lookup of model families and presets by name (used by the CLI, training and converters).

Every subpackage of `keras_bertology.models` that defines `FAMILY` is a family:
adding one is adding its folder. Families defined elsewhere (a plug-in, a
test) join with `register_family`.
"""

import importlib
import pkgutil

from keras_bertology.errors import ConfigError

FAMILIES = {}
# What `bertology pretrain` trains when no --model/--preset is given: the quick CPU run.
DEFAULT_MODEL, DEFAULT_PRESET = "bert", "bert-tiny"


def register_family(family):
    """Make `family` available to `--model`, training, export and conversion."""
    FAMILIES[family.name] = family
    return family


def _discover():
    import keras_bertology.models as models

    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda info: info.name):
        if info.ispkg:
            family = getattr(importlib.import_module(f"{models.__name__}.{info.name}"), "FAMILY", None)
            if family is not None:
                register_family(family)


def get_family(name):
    """The `ModelFamily` called `name`, or a ConfigError listing the known ones."""
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family {name!r}; choose one of: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def default_preset(model):
    """The preset `--model` trains when no --preset is given: bert-tiny for BERT, else the family's first
    (its tiny one); None for a family not known (which is refused later, by name)."""
    if model == DEFAULT_MODEL:
        return DEFAULT_PRESET
    family = FAMILIES.get(model)
    return next(iter(family.presets)) if family is not None else None


def check_preset(family, preset):
    """Raise a ConfigError naming the valid presets when `preset` is not one of them."""
    if preset not in family.presets:
        raise ConfigError(
            f"unknown preset {preset!r} for --model {family.name}; "
            f"choose one of: {', '.join(family.presets)}"
        )


_discover()
