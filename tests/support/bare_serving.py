"""Exports as a server runs them: `saved_model_cli` in a process that loads tensorflow-text's ops and
nothing of this project."""

import sys
from forked_python import run_python

# saved_model_cli ships with TensorFlow; the tokenizer's ops come from tensorflow-text, so the tool runs
# in a Python that imported it first (savedmodels/README.md: "saved_model_cli").
SAVED_MODEL_CLI = [sys.executable, "-c",
                   "import sys, tensorflow_text; from tensorflow.python.tools import saved_model_cli; "
                   "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()"]


def saved_model_cli(*args):
    """The standard output of `saved_model_cli ARGS`, which must succeed."""
    result = run_python([*SAVED_MODEL_CLI, *args], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
