"""Resumable runs: what a run folder keeps so an interrupted pretraining can go on.

    RUN_DIR/options.json                   the options the run started with
    RUN_DIR/tokenizer/                     the vocabulary, trained once
    RUN_DIR/checkpoints/step-N.keras       full model + optimizer state, newest two
    RUN_DIR/history.json                   metrics of every finished window

Every file is written atomically, so an interruption at any moment leaves the
previous consistent state.
"""

import dataclasses
import json
import re
from pathlib import Path

import keras

from keras_bertology.atomic import atomic_file
from keras_bertology.errors import CheckpointError, ConfigError

# Options that may change between the start of a run and its resumption.
_FREE_ON_RESUME = {"resume", "verbose", "out", "export", "strategy"}
_STEP_FILE = re.compile(r"step-(\d+)\.keras$")


def _write_json(path, payload):
    with atomic_file(path) as staging:
        staging.write_text(json.dumps(payload, indent=2))


class RunCheckpoints:
    """The resumable state of one run folder."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.directory = self.run_dir / "checkpoints"
        self.tokenizer_dir = self.run_dir / "tokenizer"
        self.history_path = self.run_dir / "history.json"
        self.options_path = self.run_dir / "options.json"

    def latest(self):
        """(path, step) of the newest checkpoint, or None."""
        found = [(int(m.group(1)), path) for path in self.directory.glob("step-*.keras")
                 if (m := _STEP_FILE.search(path.name))]
        if not found:
            return None
        step, path = max(found)
        return path, step

    def start(self, options):
        """Record `options`; refuse to mix two runs' checkpoints in one folder."""
        recorded = {k: v for k, v in dataclasses.asdict(options).items() if k not in _FREE_ON_RESUME}
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
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _write_json(self.options_path, recorded)

    def load_model(self):
        """The newest checkpoint's model, compiled, with its optimizer state."""
        path, step = self.latest()
        try:
            return keras.saving.load_model(path), step
        except (OSError, ValueError) as error:
            raise CheckpointError(f"cannot resume from {path}: {error}") from None

    def load_history(self):
        return json.loads(self.history_path.read_text()) if self.history_path.is_file() else []

    def save(self, model, step, records, keep=2):
        """Write step-N.keras and history.json; drop all but the newest `keep` checkpoints."""
        with atomic_file(self.directory / f"step-{step:07d}.keras") as staging:
            model.save(staging)
        _write_json(self.history_path, records)
        for old in sorted(self.directory.glob("step-*.keras"))[:-keep]:
            old.unlink()
