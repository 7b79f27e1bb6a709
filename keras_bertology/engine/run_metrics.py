"""What pretraining and fine-tuning runs record of their metrics: the JSON file, and the name of the
held-out metrics in a run's history."""

import json

from keras_bertology import __version__
from keras_bertology.atomic import atomic_file

HELD_OUT_PREFIX = "val_"  # what Keras' validation (the held-out evaluation, --eval-every) reports


def write_metrics(path, payload):
    """Write metrics.json atomically, with the version of the library that wrote it."""
    with atomic_file(path) as staging:
        staging.write_text(json.dumps({"bertology_version": __version__, **payload}, indent=2))
