"""What this runtime has, told without importing Keras: a notebook reads it to pick the Keras backend,
which Keras fixes when first imported."""

import os
from pathlib import Path


def tpu_reachable():
    """A TPU is announced by the runtime (Colab's COLAB_TPU_ADDR, TPU_NAME) or attached (a TPU VM).

    Only these hints are read: asking the cluster resolver on a machine
    without TPU would query a cloud metadata server and wait for it.
    """
    return bool(os.environ.get("COLAB_TPU_ADDR") or os.environ.get("TPU_NAME")
                or any(Path("/dev").glob("accel*")) or any(Path("/dev").glob("vfio/[0-9]*")))
