"""One clock for every system of the peer suite: Keras `fit` callbacks and PyTorch loops report to it.

The first `warmup` steps (tracing, compilation, first-touch allocation) are
not timed. A step ends when its loss has been read back as a Python float,
so the clock never stops while work is still queued.
"""

import os
import resource
import sys
import time

from benchmarks.bench_mlm import _cpu_seconds, _current_rss_mib, _machine_cpu_seconds


class StepClock:
    """Times steps `warmup` .. `warmup + steps - 1` of a training loop."""

    def __init__(self, warmup):
        self.warmup = warmup
        self.created = time.perf_counter()
        # Made once the model and its arrays are built: the peak beyond this is what training itself holds
        # (activations, gradients, optimizer slots, a traced or compiled step), apart from the runtime's own.
        self.resident_before = _current_rss_mib()
        self.tensors_before = tensor_allocator_mib(reset_peak=True)
        self.start = self.end = None
        self.cpu_start = self.cpu_end = None
        self.machine_start = self.machine_end = None
        self.last_loss = None

    def begin_step(self, index):
        if index == self.warmup:
            self.start = time.perf_counter()
            self.cpu_start = _cpu_seconds()
            self.machine_start = _machine_cpu_seconds()

    def end_step(self, loss):
        self.last_loss = float(loss)
        self.end = time.perf_counter()
        self.cpu_end = _cpu_seconds()
        self.machine_end = _machine_cpu_seconds()

    def result(self, steps, batch_size, seq_len):
        """Throughput, memory and how busy the machine was while the timed steps ran."""
        seconds = self.end - self.start
        own_cpu = self.cpu_end - self.cpu_start
        others = None
        if self.machine_start and self.machine_end:
            busy, total, _ = (end - start for end, start in zip(self.machine_end, self.machine_start))
            others = max(0.0, busy - own_cpu) / total if total > 0 else None
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return {
            "samples_per_sec": steps * batch_size / seconds,
            "tokens_per_sec": steps * batch_size * seq_len / seconds,
            "ms_per_step": 1000.0 * seconds / steps,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "resident_before_mib": self.resident_before,
            **self._tensors_peak(),
            "cpu_busy": own_cpu / (seconds * cores),
            "others_cpu_busy": others,
            "warmup_s": self.start - self.created,
            "final_loss": self.last_loss,
        }

    def _tensors_peak(self):
        """{"tensors_peak_mib": the most memory TensorFlow's allocator handed out to tensors beyond what it held
        when the clock was made}, where it counts (see `tensor_allocator_mib`)."""
        counted = tensor_allocator_mib()
        if counted is None or self.tensors_before is None:
            return {}
        return {"tensors_peak_mib": counted[1] - self.tensors_before[0]}


def tensor_allocator_mib(reset_peak=False):
    """(in use, peak) MiB of the tensors TensorFlow holds on the CPU, or None where it keeps no count.

    TensorFlow's CPU allocator counts them where it is oneDNN's pooled allocator (its default on x86; not
    with TF_ENABLE_ONEDNN_OPTS=0, nor where Keras trains on another backend or is not loaded: TensorFlow's
    count would then miss what trains). `reset_peak` starts the peak again from what is in use."""
    keras = sys.modules.get("keras")
    if keras is None or keras.config.backend() != "tensorflow":
        return None
    import tensorflow as tf

    try:
        if reset_peak:
            tf.config.experimental.reset_memory_stats("CPU:0")
        info = tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:  # "Allocator stats not available"
        return None
    return info["current"] / 2 ** 20, info["peak"] / 2 ** 20


def keras_callback(clock):
    """A Keras callback that reports each `fit` step to `clock`."""
    import keras
    import numpy as np

    class Clocked(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            clock.begin_step(batch)

        def on_train_batch_end(self, batch, logs=None):
            clock.end_step(np.asarray(logs["loss"]))

    return Clocked()
