"""The run folder: what pretraining and `convert` write, and `export`/fine-tuning read.

    RUN_DIR/
      model/              written atomically at the end of a run
        run.json          family, preset, sequence length, dtype policy, backbone config
        pretrainer.keras  backbone + objective heads (absent after a headless convert)
        backbone.keras    the encoder alone
        tokenizer/        vocabulary / SentencePiece model
      checkpoints/        periodic weights during training
      logs/               TensorBoard
      metrics.json, loss_curve.png
"""

import json
from dataclasses import dataclass
from pathlib import Path

import keras

from keras_bertology.atomic import atomic_directory, recover_directory
from keras_bertology.errors import BertologyError, CheckpointError
from keras_bertology.keras_archives import load_keras_archive

MODEL_DIR = "model"
RUN_FILE = "run.json"


@dataclass
class RunModel:
    """A trained or converted model with everything needed to serve it."""

    family: str
    backbone: keras.Model
    tokenizer: object
    seq_len: int
    pretrainer: keras.Model | None = None
    preset: str | None = None


def save_run_model(run_dir, run):
    """Write `run` to RUN_DIR/model/ atomically: readers see the old model or the new one."""
    with atomic_directory(Path(run_dir) / MODEL_DIR) as staging:
        if run.pretrainer is not None:
            run.pretrainer.save(staging / "pretrainer.keras")
        run.backbone.save(staging / "backbone.keras")
        if run.tokenizer is not None:
            run.tokenizer.save(staging / "tokenizer")
        description = {
            "family": run.family,
            "preset": run.preset,
            "seq_len": run.seq_len,
            "precision": (run.pretrainer or run.backbone).dtype_policy.name,  # the policy it trained in
            "backbone": run.backbone.get_config(),
            "has_pretraining_heads": run.pretrainer is not None,
            "has_tokenizer": run.tokenizer is not None,
        }
        (staging / RUN_FILE).write_text(json.dumps(description, indent=2))


def copy_run_model(source_dir, run_dir, seq_len=None):
    """Copy SOURCE_DIR/model/ to RUN_DIR/model/ atomically, with `seq_len` (when given) as its sequence
    length: a cached conversion written out without loading it."""
    import shutil

    description = read_run_description(source_dir)
    with atomic_directory(Path(run_dir) / MODEL_DIR) as staging:
        shutil.copytree(Path(source_dir) / MODEL_DIR, staging, dirs_exist_ok=True)
        if seq_len is not None:
            (staging / RUN_FILE).write_text(json.dumps({**description, "seq_len": seq_len}, indent=2))
    return description


def read_run_description(run_dir):
    """RUN_DIR/model/run.json, checked: its family is known and its fields are there."""
    from keras_bertology.models import get_family

    model_dir = Path(run_dir) / MODEL_DIR
    recover_directory(model_dir)
    run_file = model_dir / RUN_FILE
    if not run_file.is_file():
        raise CheckpointError(
            f"{run_dir} is not a finished run folder (no {MODEL_DIR}/{RUN_FILE}); "
            "pass a folder written by `bertology pretrain` or `bertology convert`"
        )
    try:
        description = json.loads(run_file.read_text(encoding="utf-8"))
        get_family(description["family"])
        description["seq_len"], description["has_tokenizer"] = int(description["seq_len"]), \
            bool(description["has_tokenizer"])
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, BertologyError) as error:
        raise CheckpointError(f"{run_file} is damaged: {error}") from None
    return description


def load_run_tokenizer(run_dir, description=None):
    """The tokenizer of RUN_DIR/model/, or None where the run has none (`description`: its run.json,
    when already read)."""
    from keras_bertology.tokenizers.saved import load_tokenizer

    description = description or read_run_description(run_dir)
    return load_tokenizer(Path(run_dir) / MODEL_DIR / "tokenizer") if description["has_tokenizer"] else None


def load_run_model(run_dir, with_tokenizer=True):
    """Read RUN_DIR/model/ back (without the tokenizer unless `with_tokenizer`); raises CheckpointError
    when it is missing or broken."""
    description = read_run_description(run_dir)
    model_dir = Path(run_dir) / MODEL_DIR
    pretrainer = None
    if description.get("has_pretraining_heads"):
        pretrainer = _load_keras(model_dir / "pretrainer.keras")
        backbone = pretrainer.served_backbone()
    else:
        backbone = _load_keras(model_dir / "backbone.keras")
    return RunModel(
        family=description["family"],
        backbone=backbone,
        tokenizer=load_run_tokenizer(run_dir, description) if with_tokenizer else None,
        seq_len=int(description["seq_len"]),
        pretrainer=pretrainer,
        preset=description.get("preset"),
    )


def _load_keras(path):
    try:
        return load_keras_archive(path)
    except Exception as error:  # Keras raises many types for missing or damaged archives
        raise CheckpointError(f"cannot load {path}: {error}") from None
