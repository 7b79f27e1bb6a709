"""User-facing errors.

Anything a user can cause (bad corpus, bad flag, wrong vocab, mismatched
checkpoint) raises a `BertologyError`; the CLI prints its message on one line
and exits non-zero instead of showing a traceback.
"""

import sys


def warn(line):
    """A warning about input that still makes a sensible run: one line on stderr, as errors are."""
    print(f"bertology: warning: {line}", file=sys.stderr, flush=True)


class BertologyError(Exception):
    """An error caused by the user's input, with a message that says how to fix it."""


class CorpusError(BertologyError):
    """The training corpus is missing, empty or unreadable."""


class ConfigError(BertologyError):
    """A preset, flag or configuration value is invalid."""


class CheckpointError(BertologyError):
    """A checkpoint or run folder cannot be loaded into the requested model."""


class DataError(BertologyError):
    """Labeled data for fine-tuning is missing, empty or malformed."""


class TrainingError(BertologyError):
    """Training diverged (a loss that is not a finite number): pretraining keeps its last good checkpoint,
    fine-tuning writes nothing."""


class NotExpressible(BertologyError):
    """A tokenizer or a text layout has no form in ONNX Runtime's operators; the message says why (an export
    then writes the model on ids alone)."""
