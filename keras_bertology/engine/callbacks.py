"""Callbacks for training runs: metric history, throughput, resumable checkpoints, a stop at a diverged loss."""

import math
import time

import keras

from keras_bertology.errors import TrainingError
from keras_bertology.engine.run_metrics import HELD_OUT_PREFIX

# What a stopped pretraining run should try instead.
RESTART_ADVICE = "Start a new run (another --out) with a lower --learning-rate, or in --precision float32"


class MetricHistory(keras.callbacks.Callback):
    """Records every logged window: the step it ended at, its metrics, and samples/s.

    Each Keras epoch here is one logging window of `steps_per_window` steps; the
    first window includes graph tracing, so throughput is reported for later
    ones. `records` carries the windows of an earlier, resumed part of the run.
    A window cut short by a signal is recorded at the step it reached; the
    resumed run's rest of it is merged into that record (metrics weighted by
    steps), so a stopped and resumed run logs the windows of an uninterrupted one.
    Steps count updates of `batch_size` rows, each made of `accumulate` of
    Keras's steps (micro-batches).
    """

    def __init__(self, steps_per_window, batch_size, records=None, accumulate=1):
        super().__init__()
        self.steps_per_window = steps_per_window
        self.batch_size = batch_size
        self.accumulate = accumulate
        self.records = list(records or [])
        self.step = self.records[-1]["step"] if self.records else 0
        self.ended = None  # (epoch, step) of the last window recorded
        self._started = self._steps = None

    def on_epoch_begin(self, epoch, logs=None):
        self._started, self._steps = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps = (batch + 1) // self.accumulate

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._started
        self.step += self._steps
        record = {"step": self.step, **{name: float(value) for name, value in (logs or {}).items()},
                  "samples_per_second": self._steps * self.batch_size / seconds}
        cut = self.records[-1]["step"] % self.steps_per_window if self.records else 0
        if cut and self.step - self._steps == self.records[-1]["step"]:
            self.records[-1] = _merged(self.records[-1], cut, record, self._steps, self.batch_size)
        else:
            self.records.append(record)
        self.ended = (epoch, self.step)


def _merged(first, first_steps, rest, rest_steps, batch_size):
    """One window's record from its two parts (metrics weighted by steps; throughput over both)."""
    merged = {"step": rest["step"]}
    for name, value in rest.items():
        if name.startswith(HELD_OUT_PREFIX):  # an evaluation at the window's end
            merged[name] = value
        elif name not in ("step", "samples_per_second") and name in first:
            merged[name] = (first[name] * first_steps + value * rest_steps) / (first_steps + rest_steps)
    seconds = sum(steps * batch_size / part["samples_per_second"]
                  for part, steps in ((first, first_steps), (rest, rest_steps)))
    merged["samples_per_second"] = (first_steps + rest_steps) * batch_size / seconds
    return merged


class CheckpointEveryWindow(keras.callbacks.Callback):
    """After each window, saves model + optimizer state and the history so far (atomically).

    It must come after `history` in the callback list, so that the history it
    saves ends with the window the weights just finished.
    """

    def __init__(self, checkpoints, history):
        super().__init__()
        self.checkpoints = checkpoints
        self.history = history

    def on_epoch_end(self, epoch, logs=None):
        self.checkpoints.save(self.model, _recorded_step(self.history, epoch, self), self.history.records)


def _recorded_step(history, epoch, callback):
    """The step at which `history` recorded `epoch`'s end; `callback` must follow it in the list."""
    if history.ended is None or history.ended[0] != epoch:
        raise RuntimeError(f"{type(callback).__name__} must follow its MetricHistory in the callback list")
    return history.ended[1]


class StoppedBySignal(KeyboardInterrupt):
    """Training ended early on a signal, after a checkpoint; `exit_status` is the shell's 128 + signal."""

    def __init__(self, message, exit_status):
        super().__init__(message)
        self.exit_status = exit_status


class StopAtCheckpointOnSignal(keras.callbacks.Callback):
    """Defers SIGTERM (what schedulers and preemptible machines send before a kill) to the end of the
    current step: the window ends there, its checkpoint is saved, and --resume goes on exactly.

    It must follow CheckpointEveryWindow. The CLI's handler calls `request` while a run with this
    callback trains (`deferring`); elsewhere, or at a second signal, it stops at once.
    """

    deferring = None  # the callback of the training under way, if any
    requested = None  # the signal received (a signal.Signals)

    def __init__(self, history):
        super().__init__()
        self.history = history

    @classmethod
    def request(cls, signal):
        """True where the stop is deferred to the next checkpoint; False: the caller stops now."""
        if cls.deferring is None or cls.requested is not None:
            return False
        cls.requested = signal
        return True

    def on_train_begin(self, logs=None):
        type(self).deferring, type(self).requested = self, None

    def on_train_end(self, logs=None):
        type(self).deferring = None

    def on_train_batch_end(self, batch, logs=None):
        # After a whole update: a checkpoint between micro-batches would lose those already summed.
        if type(self).requested is not None and (batch + 1) % self.history.accumulate == 0:
            self.model.stop_training = True  # the fit loop ends the window after this step

    def on_epoch_end(self, epoch, logs=None):
        signal = type(self).requested
        if signal is not None:
            type(self).deferring = None
            raise StoppedBySignal(f"stopped by {signal.name} after step {_recorded_step(self.history, epoch, self)}; "
                                  "checkpoint saved, --resume continues", 128 + signal.value)


class SnapshotAtSteps(keras.callbacks.Callback):
    """At the end of the windows that end at `steps`, hands the step to `save` (once per step: a
    resumed run does not write a snapshot again). It must follow `history`."""

    def __init__(self, steps, history, save, exists):
        super().__init__()
        self.steps, self.history = set(steps), history
        self.save, self.exists = save, exists

    def on_epoch_end(self, epoch, logs=None):
        step = _recorded_step(self.history, epoch, self)
        if step in self.steps and not self.exists(step):
            self.save(step)


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Ends the run at the first window whose loss is NaN or infinite, before anything saves it.

    It must come first in the callback list, so that the window's diverged
    weights never reach a checkpoint: the newest checkpoint stays the last
    good state. Without `checkpoints`, the run writes nothing before training
    ends (fine-tuning), which the message says. `advice` ends the message:
    what to try instead.
    """

    def __init__(self, steps_per_window, checkpoints=None, advice=RESTART_ADVICE):
        super().__init__()
        self.steps_per_window = steps_per_window
        self.checkpoints = checkpoints
        self.advice = advice

    def on_epoch_end(self, epoch, logs=None):
        first, last = epoch * self.steps_per_window + 1, (epoch + 1) * self.steps_per_window
        self._check(logs, f"between steps {first} and {last}")

    def _check(self, logs, when):
        loss = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            raise TrainingError(f"the loss became {loss} {when}; training stopped and {self._kept()}. {self.advice}")

    def _kept(self):
        if self.checkpoints is None:
            return "nothing was written"
        latest = self.checkpoints.latest()
        return (f"the last good checkpoint, {latest[0]} (step {latest[1]}), is kept" if latest
                else "no checkpoint was written before it")


class StopOnNonFiniteStepLoss(StopOnNonFiniteLoss):
    """The same stop, checked after every step too: the first diverged step ends training.

    For fine-tuning, whose steps hand their loss to the host anyway (for its
    curve); pretraining checks once a window, sparing each step a wait on
    the device. Each Keras epoch is `steps_per_window` steps.
    """

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._check(logs, f"at step {self._epoch * self.steps_per_window + batch + 1}")
