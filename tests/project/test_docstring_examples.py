"""The `Example:` blocks of the library's docstrings run as written (doctest).

Each example carries its own imports, so it can be pasted into a session.
"""

import doctest
import importlib
import pkgutil

import pytest

import keras_bertology

MODULES = sorted(info.name for info in pkgutil.walk_packages(keras_bertology.__path__, "keras_bertology."))


def _examples(module_name):
    module = importlib.import_module(module_name)
    return [test for test in doctest.DocTestFinder().find(module, module_name) if test.examples]


WITH_EXAMPLES = [name for name in MODULES if _examples(name)]


def test_public_layers_and_models_have_examples():
    for name in ("keras_bertology.layers.attention", "keras_bertology.layers.embeddings",
                 "keras_bertology.layers.heads", "keras_bertology.layers.transformer_block",
                 "keras_bertology.models.bert.backbone", "keras_bertology.models.bert.pretrainer"):
        assert name in WITH_EXAMPLES


@pytest.mark.parametrize("module_name", WITH_EXAMPLES)
def test_docstring_examples_run(module_name):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in _examples(module_name):
        test.globs = {}  # no names from the module: an example must import what it uses
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted > 0
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed in {module_name}"
