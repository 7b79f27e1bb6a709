"""The optional dependencies, each installed by an extra of the package (`pip install
'keras-bertology[jax]'`): a feature whose extra is missing stops with one line that names it, not with an
ImportError from deep inside."""

import importlib.util

from keras_bertology.errors import ConfigError

# Module -> the extra that installs it (pyproject.toml, requirements/<extra>.txt).
EXTRAS = {"jax": "jax", "apache_beam": "beam", "huggingface_hub": "hub"}


def missing_extra(module, feature):
    """The line that says `feature` needs `module` and how to install it, or None when it is installed."""
    if importlib.util.find_spec(module) is not None:
        return None
    return f"{feature} needs {module}, which comes with an extra: pip install 'keras-bertology[{EXTRAS[module]}]'"


def require_extra(module, feature):
    """Raise the ConfigError of `missing_extra` when `module` is not installed."""
    problem = missing_extra(module, feature)
    if problem:
        raise ConfigError(problem)
