"""Lookup of model families and presets by name (used by the CLI and converters)."""

from keras_bertology.errors import ConfigError
from keras_bertology.models.bert import BERT
from keras_bertology.models.roberta import ROBERTA

FAMILIES = {family.name: family for family in (BERT, ROBERTA)}


def get_family(name):
    """The `ModelFamily` called `name`, or a ConfigError listing the known ones."""
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family {name!r}; choose one of: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def check_preset(family, preset):
    """Raise a ConfigError naming the valid presets when `preset` is not one of them."""
    if preset not in family.presets:
        raise ConfigError(
            f"unknown preset {preset!r} for --model {family.name}; "
            f"choose one of: {', '.join(family.presets)}"
        )
