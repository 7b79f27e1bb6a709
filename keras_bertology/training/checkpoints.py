"""Resumable runs: what a run folder keeps so an interrupted pretraining can go on.

    RUN_DIR/options.json                         the options the run started with
    RUN_DIR/tokenizer/                           the vocabulary, trained once
    RUN_DIR/checkpoints/step-0000050/            one checkpoint, newest two kept:
        model.keras                              full model + optimizer state
        random_state.npz                         the model's random-number generator states
        replica_state.npz                        non-trainable state that differs per replica
                                                 (XLNet's memory under MirroredStrategy), if any
        history.json                             metrics of every window up to it

A checkpoint folder is written atomically as one unit, so its model and its
history always agree, and an interruption at any moment leaves the previous
consistent state. Staging folders (hidden `.step-*.tmp`) are never read, and
the ones a killed run left are deleted when the run starts again.
"""

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_bertology.atomic import atomic_directory, atomic_file, clear_leftovers, remove_directory
from keras_bertology.errors import CheckpointError, ConfigError

# Options that may change between the start of a run and its resumption.
_FREE_ON_RESUME = {"resume", "verbose", "out", "export", "no_export", "strategy"}
_STEP_FOLDER = re.compile(r"step-(\d+)$")
MODEL_FILE = "model.keras"
RANDOM_STATE_FILE = "random_state.npz"
REPLICA_STATE_FILE = "replica_state.npz"
HISTORY_FILE = "history.json"


def _write_json(path, payload):
    with atomic_file(path) as staging:
        staging.write_text(json.dumps(payload, indent=2))


class RunCheckpoints:
    """The resumable state of one run folder."""

    def __init__(self, run_dir, writer=True):
        """`writer`: this process writes the folder (False on the workers of a multi-worker run
        other than the chief, which only read it)."""
        self.run_dir = Path(run_dir)
        self.writer = writer
        self.directory = self.run_dir / "checkpoints"
        self.tokenizer_dir = self.run_dir / "tokenizer"
        self.options_path = self.run_dir / "options.json"

    def _complete(self):
        """(step, folder) of every complete checkpoint, oldest first; staging folders are hidden."""
        found = []
        for folder in self.directory.glob("step-*"):
            match = _STEP_FOLDER.match(folder.name)
            if match and (folder / MODEL_FILE).is_file() and (folder / HISTORY_FILE).is_file():
                found.append((int(match.group(1)), folder))
        return sorted(found)

    def latest(self):
        """(folder, step) of the newest complete checkpoint, or None."""
        found = self._complete()
        if not found:
            return None
        step, folder = found[-1]
        return folder, step

    def start(self, options):
        """Record `options`; refuse to mix two runs' checkpoints in one folder.

        Also deletes what a killed save left (its hidden staging folder).
        """
        # As JSON holds them (tuples become lists), so that a resumed run compares like with like.
        recorded = json.loads(json.dumps({k: v for k, v in dataclasses.asdict(options).items()
                                          if k not in _FREE_ON_RESUME}))
        if self.writer and self.directory.is_dir():  # a run is the only writer of its checkpoints
            clear_leftovers(self.directory)
        if self.latest() is not None:
            if not options.resume:
                raise ConfigError(
                    f"{self.run_dir} already holds checkpoints of a run; pass --resume to continue "
                    "it, or choose another --out"
                )
            previous = json.loads(self.options_path.read_text()) if self.options_path.is_file() else {}
            changed = sorted(k for k in recorded if previous.get(k) != recorded[k])
            if changed:
                raise ConfigError(
                    f"--resume needs the options the run started with; changed: {', '.join(changed)}"
                )
        if self.writer:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            _write_json(self.options_path, recorded)

    def load_model(self):
        """(compiled model with its optimizer state, step) of the newest checkpoint."""
        latest = self.latest()
        if latest is None:
            raise CheckpointError(f"{self.directory} holds no complete checkpoint to resume from")
        folder, step = latest
        try:
            model = keras.saving.load_model(folder / MODEL_FILE)
        except Exception as error:  # Keras raises many types for damaged archives
            raise CheckpointError(f"cannot resume from {folder / MODEL_FILE}: {error}") from None
        _restore_random_state(model, folder / RANDOM_STATE_FILE)
        _restore_replica_state(model, folder / REPLICA_STATE_FILE)
        return model, step

    def load_history(self):
        """The metric records saved with the newest checkpoint ([] before the first one)."""
        latest = self.latest()
        if latest is None:
            return []
        path = latest[0] / HISTORY_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:  # bad JSON or bad UTF-8
            raise CheckpointError(f"cannot resume from {path}: {error}") from None

    def save(self, model, step, records, keep=2):
        """Write checkpoint `step` (model + history) as one unit; keep the newest `keep`."""
        with atomic_directory(self.directory / f"step-{step:07d}") as staging:
            model.save(staging / MODEL_FILE)
            np.savez(staging / RANDOM_STATE_FILE, *[v.numpy() for v in _random_state(model)])
            replica_state = _replica_state(model)
            if replica_state:
                np.savez(staging / REPLICA_STATE_FILE, **replica_state)
            (staging / HISTORY_FILE).write_text(json.dumps(records, indent=2))
        for _, old in self._complete()[:-keep]:
            remove_directory(old)


def weights_digest(model):
    """SHA-256 of every weight of `model`, in order: equal digests, bit-identical weights."""
    digest = hashlib.sha256()
    for variable in model.weights:
        digest.update(np.ascontiguousarray(np.asarray(variable)).tobytes())
    return digest.hexdigest()


def _random_state(model):
    """The variables of `model` that `.keras` files leave out: the seed generators' states (dropout,
    sampling). Resuming without them would draw other dropout masks than the uninterrupted run."""
    saved = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in saved]


def _restore_random_state(model, path):
    if not path.is_file():  # a checkpoint of an earlier version: the states start anew
        return
    variables = _random_state(model)
    try:
        with np.load(path) as stored:
            values = [stored[f"arr_{index}"] for index in range(len(stored.files))]
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot resume from {path}: {error}") from None
    if [value.shape for value in values] != [tuple(variable.shape) for variable in variables]:
        raise CheckpointError(f"cannot resume from {path}: it holds the random state of another model")
    for variable, value in zip(variables, values):
        variable.assign(value)


def _local_values(variable):
    """The variable's value on each replica of this process (one value outside tf.distribute)."""
    strategy = getattr(variable.value, "distribute_strategy", None) or tf.distribute.get_strategy()
    return strategy.experimental_local_results(variable.value)


def _replica_state(model):
    """{"v{index}_r{replica}": value} for the non-trainable variables whose replicas hold different
    values: a variable assigned in each replica (XLNet's memory of its own rows). The `.keras`
    file keeps the first replica's value only."""
    state = {}
    for index, variable in enumerate(model.non_trainable_variables):
        values = [np.asarray(value) for value in _local_values(variable)]
        if any(not np.array_equal(value, values[0]) for value in values[1:]):
            state.update({f"v{index}_r{replica}": value for replica, value in enumerate(values)})
    return state


def _restore_replica_state(model, path):
    if not path.is_file():  # every replica held the same values
        return
    try:
        with np.load(path) as stored:
            saved = {name: stored[name] for name in stored.files}
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot resume from {path}: {error}") from None
    variables = model.non_trainable_variables
    for name, value in saved.items():
        index, replica = (int(part[1:]) for part in name.split("_"))
        components = _local_values(variables[index]) if index < len(variables) else ()
        if replica >= len(components) or tuple(components[replica].shape) != value.shape:
            raise CheckpointError(f"cannot resume from {path}: it holds the per-replica state of another "
                                  "model or number of replicas")
        components[replica].assign(value)
