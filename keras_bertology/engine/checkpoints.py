"""Resumable runs: what a run folder keeps so an interrupted pretraining can go on.

    RUN_DIR/options.json                         the options the run started with, `precision` the
                                                 dtype policy it resolved to (the one checkpoints load in)
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
the ones a killed run left are deleted when the run starts again. A
checkpoint damaged afterwards (a truncated file) is named and passed over
for the newest intact one.
"""

import dataclasses
import hashlib
import json
import re
import sys
import zipfile
import zlib
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_bertology.atomic import atomic_directory, atomic_file, clear_leftovers, remove_directory
from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.keras_archives import load_keras_archive
from keras_bertology.engine.keras_distribution import outside_distribution
from keras_bertology.engine.precision import dtype_policy_scope

# Options that may change between the start of a run and its resumption.
_FREE_ON_RESUME = {"resume", "verbose", "out", "export", "no_export", "length_buckets", "serving_xla", "strategy",
                   "remat"}
_STEP_FOLDER = re.compile(r"step-(\d+)$")
MODEL_FILE = "model.keras"
RANDOM_STATE_FILE = "random_state.npz"
REPLICA_STATE_FILE = "replica_state.npz"
HISTORY_FILE = "history.json"


def _write_json(path, payload):
    with atomic_file(path) as staging:
        staging.write_text(json.dumps(payload, indent=2))


def recorded_options(options):
    """What options.json keeps of a run's options, which `--resume` must give again: all but those free on
    resume, as JSON holds them (tuples become lists), so that a resumed run compares like with like."""
    return json.loads(json.dumps({k: v for k, v in dataclasses.asdict(options).items() if k not in _FREE_ON_RESUME}))


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
        self._checked = None  # (complete checkpoints, the newest intact one) when last looked at

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

    def resumable(self):
        """(folder, step) of the newest intact checkpoint, or None where there is none.

        A damaged newer one (a truncated file: a full disk, a copy cut short) is named in one line on
        stderr and passed over; CheckpointError where every one is damaged."""
        found = self._complete()
        if self._checked is None or self._checked[0] != found:
            self._checked = (found, _newest_intact(found))
        return self._checked[1]

    def start(self, options):
        """Record `options`; refuse to mix two runs' checkpoints in one folder.

        Also deletes what a killed save left (its hidden staging folder).
        """
        recorded = recorded_options(options)
        if self.writer and self.directory.is_dir():  # a run is the only writer of its checkpoints
            clear_leftovers(self.directory)
        if self.latest() is not None:
            if not options.resume:
                raise ConfigError(
                    f"{self.run_dir} already holds checkpoints of a run; pass --resume to continue "
                    "it, or choose another --out"
                )
            previous = self._recorded_options()
            if previous.get("precision") == "auto":  # recorded unresolved by an earlier version
                previous["precision"] = options.precision
            if previous.get("precision", options.precision) != options.precision:
                raise ConfigError(f"this run trained in {previous['precision']} and --precision gives "
                                  f"{options.precision}; resume with --precision {previous['precision']}")
            changed = sorted(k for k in recorded if previous.get(k) != recorded[k])
            if changed:
                raise ConfigError(
                    f"--resume needs the options the run started with; changed: {', '.join(changed)}"
                )
        if self.writer:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            _write_json(self.options_path, recorded)

    def _recorded_options(self):
        return json.loads(self.options_path.read_text()) if self.options_path.is_file() else {}

    def load_model(self):
        """(compiled model with its optimizer state, step) of the newest intact checkpoint."""
        latest = self.resumable()
        if latest is None:
            raise CheckpointError(f"{self.directory} holds no complete checkpoint to resume from")
        folder, step = latest
        # Under the recorded policy: layers left to the global one (the pretrainer itself) get it back.
        precision = self._recorded_options().get("precision")
        try:
            with dtype_policy_scope(keras.config.dtype_policy() if precision in (None, "auto") else precision):
                model = load_keras_archive(folder / MODEL_FILE, compile=True)
        except Exception as error:  # Keras raises many types for damaged archives
            raise CheckpointError(f"cannot resume from {folder / MODEL_FILE}: {error}") from None
        _restore_random_state(model, folder / RANDOM_STATE_FILE)
        _restore_replica_state(model, folder / REPLICA_STATE_FILE)
        return model, step

    def load_history(self):
        """The metric records saved with the newest intact checkpoint ([] before the first one)."""
        latest = self.resumable()
        if latest is None:
            return []
        path = latest[0] / HISTORY_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:  # bad JSON or bad UTF-8
            raise CheckpointError(f"cannot resume from {path}: {error}") from None

    def save(self, model, step, records, keep=2):
        """Write checkpoint `step` (model + history) as one unit; keep the newest `keep`."""
        with atomic_directory(self.directory / f"step-{step:07d}") as staging, outside_distribution():
            model.save(staging / MODEL_FILE)
            np.savez(staging / RANDOM_STATE_FILE, *[v.numpy() for v in _random_state(model)])
            replica_state = _replica_state(model)
            if replica_state:
                np.savez(staging / REPLICA_STATE_FILE, **replica_state)
            (staging / HISTORY_FILE).write_text(json.dumps(records, indent=2))
        for _, old in self._complete()[:-keep]:
            remove_directory(old)
        self._checked = None  # a folder of the same name may have been replaced


def _newest_intact(found):
    damaged = []
    for step, folder in reversed(found):
        problem = _damage(folder)
        if problem is None:
            if damaged:
                print(f"bertology: {'; '.join(damaged)}; resuming from {folder.name}", file=sys.stderr)
            return folder, step
        damaged.append(problem)
    if damaged:
        raise CheckpointError(f"no intact checkpoint to resume from: {'; '.join(damaged)}")
    return None


def _damage(folder):
    """Why a file of checkpoint `folder` is damaged, or None: every archive member must pass its CRC
    check and the history must parse (a truncated archive would fail deep inside Keras or NumPy)."""
    for name in (MODEL_FILE, RANDOM_STATE_FILE, REPLICA_STATE_FILE):
        path = folder / name
        if name != MODEL_FILE and not path.is_file():  # optional files
            continue
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
            return f"{path} is damaged ({error})"
        if bad is not None:
            return f"{path} is damaged (its member {bad} fails its CRC check)"
    try:
        json.loads((folder / HISTORY_FILE).read_text(encoding="utf-8"))
    except ValueError as error:  # bad JSON or bad UTF-8
        return f"{folder / HISTORY_FILE} is damaged ({error})"
    return None


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
        # The weights (model.keras) said it is this model: its layers' seeds changed with the library's version.
        print(f"bertology: {path} holds the random state of another version of the model's layers; dropout and "
              "sampling draw anew from here", file=sys.stderr)
        return
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
