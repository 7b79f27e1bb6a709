"""Exporting a run trained on another Keras backend (JAX): `bertology export` in a TensorFlow process."""

import os
import subprocess
import sys

from keras_bertology.atomic import atomic_directory
from keras_bertology.errors import CheckpointError


def export_in_tensorflow(run_dir, export_dir, length_buckets=(), xla=False):
    """Write the SavedModel of the run folder `run_dir` from a fresh process on the TensorFlow backend.

    A SavedModel is TensorFlow graphs traced from the Keras model, and a
    process runs one Keras backend; the run folder's `.keras` files load on
    any backend, so the export reads them there.

    The caller holds `export_dir` (its lock), so the other process writes into
    a new folder inside this one's staging folder, which then replaces `export_dir`.
    """
    with atomic_directory(export_dir) as staging:
        written = staging / "saved_model"
        command = [sys.executable, "-m", "keras_bertology.cli", "export", str(run_dir), "--out", str(written)]
        if length_buckets:
            command += ["--length-buckets", ",".join(map(str, length_buckets))]
        if xla:
            command.append("--serving-xla")
        done = subprocess.run(command, env=dict(os.environ, KERAS_BACKEND="tensorflow"), capture_output=True,
                              text=True)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["it printed nothing"])[-1]
            raise CheckpointError(f"the export of {run_dir} in a TensorFlow process failed: {last}")
        for entry in written.iterdir():
            os.replace(entry, staging / entry.name)
        written.rmdir()
