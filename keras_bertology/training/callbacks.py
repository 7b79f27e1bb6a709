"""Callbacks for pretraining runs: metric history, throughput, atomic checkpoints."""

import time
from pathlib import Path

import keras

from keras_bertology.atomic import atomic_file


class MetricHistory(keras.callbacks.Callback):
    """Records every logged window: the step it ended at, its metrics, and samples/s.

    Each Keras epoch here is one logging window of `steps_per_window` steps; the
    first window includes graph tracing, so throughput is reported for later ones.
    """

    def __init__(self, steps_per_window, batch_size):
        super().__init__()
        self.steps_per_window = steps_per_window
        self.batch_size = batch_size
        self.records = []
        self._started = None

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        record = {"step": (epoch + 1) * self.steps_per_window}
        record.update({name: float(value) for name, value in (logs or {}).items()})
        record["samples_per_second"] = self.steps_per_window * self.batch_size / seconds
        self.records.append(record)


class AtomicCheckpoint(keras.callbacks.Callback):
    """Saves the model's weights every window as step-NNNNNNN.weights.h5, keeping the newest `keep`.

    Each file is written under a temporary name and renamed when complete, so a
    checkpoint on disk is never half-written.
    """

    def __init__(self, directory, steps_per_window, keep=2):
        super().__init__()
        self.directory = Path(directory)
        self.steps_per_window = steps_per_window
        self.keep = keep

    def on_epoch_end(self, epoch, logs=None):
        step = (epoch + 1) * self.steps_per_window
        with atomic_file(self.directory / f"step-{step:07d}.weights.h5") as staging:
            self.model.save_weights(staging)
        for old in sorted(self.directory.glob("step-*.weights.h5"))[: -self.keep]:
            old.unlink()
