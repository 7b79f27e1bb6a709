"""Import Hugging Face checkpoints (config.json + safetensors) into a run folder's model.

Weights are read with safetensors' NumPy loader: no torch, no pickle; single
files and sharded ones. The family whose `hf_model_types` lists the
checkpoint's `model_type` maps the tensors (its converter module); this
module finds it, reads the tokenizer, and reports the tensors present but
unused instead of silently dropping them, and the converter's notes: where
it followed the tensors over config.json, as transformers does.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from keras_bertology.convert.hf_weights import BUFFERS, rename_legacy_layer_norm
from keras_bertology.errors import CheckpointError

DEFAULT_SEQ_LEN = 128


@dataclass
class ConversionReport:
    """What `convert_hf_checkpoint` found: the architecture, the heads imported, tensors skipped, and
    one line per note of the family's converter."""

    architecture: str
    heads: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def read_hf_checkpoint(hf_dir):
    """Return `(config, weights)` from a Hugging Face model folder."""
    return read_hf_config(hf_dir), _read_weights(Path(hf_dir))


def read_hf_config(hf_dir):
    """The config.json of a Hugging Face model folder, as a dict."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise CheckpointError(f"--from-hf {hf_dir} is not a folder")
    config_path = hf_dir / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path} not found: --from-hf needs a folder with config.json and model.safetensors")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{config_path} is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path} must hold a JSON object, not {type(config).__name__}")
    return config


def _read_weights(hf_dir):
    """All tensors of model.safetensors, or of the shards listed in model.safetensors.index.json."""
    single, index = hf_dir / "model.safetensors", hf_dir / "model.safetensors.index.json"
    if single.is_file():
        return _load_safetensors(single)
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
            raise CheckpointError(f"{index} is not a valid safetensors index: {error}") from None
        weights = {}
        for shard in shards:
            weights.update(_load_safetensors(hf_dir / shard))
        return weights
    if any(hf_dir.glob("*.bin")) or any(hf_dir.glob("*.pt")):
        raise CheckpointError(
            f"{hf_dir} has only PyTorch pickle weights, which are not loaded (they can run code); "
            "re-save the model with transformers' save_pretrained(), which writes model.safetensors"
        )
    raise CheckpointError(f"{single} not found: --from-hf needs a folder with config.json and model.safetensors")


def _load_safetensors(path):
    from safetensors.numpy import load_file

    if not path.is_file():
        raise CheckpointError(f"{path} not found (named by the safetensors index)")
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for bad files
        raise CheckpointError(f"cannot read {path} (truncated or not safetensors?): {error}") from None


def family_for_model_type(model_type):
    """The registered family that converts Hugging Face `model_type` checkpoints."""
    from keras_bertology.models import FAMILIES

    supported = {t: family for family in FAMILIES.values() for t in family.conversion.hf_model_types}
    if model_type not in supported:
        raise CheckpointError(f"model_type {model_type!r} is not supported; supported: {', '.join(supported)}")
    return supported[model_type]


def convert_hf_checkpoint(hf_dir, seq_len=None, with_tokenizer=True):
    """`(runs.RunModel, ConversionReport)` from a Hugging Face folder.

    The encoder always; the heads the family's converter finds; the tokenizer
    when the folder ships one that runs in-graph (and `with_tokenizer`). The
    sequence length defaults to the smaller of 128 and the model's positions.
    """
    from keras_bertology.convert.hf_tokenizer import hf_text_layout, load_hf_tokenizer
    from keras_bertology.runs import RunModel

    config, weights = read_hf_checkpoint(hf_dir)
    family = family_for_model_type(config.get("model_type"))
    # A converter may add a fifth item: its notes (lines for the report).
    backbone, pretrainer, heads, used, *notes = family.convert_hf(config, weights)
    positions = getattr(backbone, "max_positions", None)  # None: relative positions only (T5)
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, positions or DEFAULT_SEQ_LEN)
    elif positions and seq_len > positions:
        raise CheckpointError(f"--seq-len {seq_len} is above the checkpoint's {positions} positions")
    report = ConversionReport(architecture=(config.get("architectures") or ["unknown"])[0], heads=heads,
                              notes=list(notes[0]) if notes else [])
    renamed = rename_legacy_layer_norm(weights)
    report.skipped = sorted(name for name in renamed if name not in used and not name.endswith(BUFFERS))
    tokenizer = load_hf_tokenizer(hf_dir, backbone.vocab_size, family=family) if with_tokenizer else None
    if tokenizer is not None:  # recorded where the family's own packing lays text out otherwise
        layout = hf_text_layout(hf_dir, tokenizer, family)
        tokenizer.with_layout(None if layout == family.text_layout(tokenizer, own_layout=True) else layout)
    return RunModel(family.name, backbone, tokenizer, seq_len, pretrainer=pretrainer), report

