"""`pretrain --init-from RUN_DIR`: a new run that starts from a finished run's weights and vocabulary.

The second phase of a recipe that changes what a run cannot change on resume:
ModernBERT's context extension trains at 8,192 tokens with the global rotary
base raised, from a 1,024-token run. The new run keeps the source's
architecture (its backbone config, vocabulary and weights) and takes from its
own options what changes no weight's shape: the sequence length, the data,
the schedule, the family's backbone options given (a rotary base, a window),
`--packing unpadded`. Its optimizer starts afresh.
"""

import json
from pathlib import Path

from keras_bertology.errors import CheckpointError, ConfigError
from keras_bertology.models.family import ENCODER_SIZES, RunContext

# Keys of a saved backbone config that say how it was built, not what it is.
_BUILD_KEYS = ("name", "trainable", "dtype")


def check_source(init_from, family):
    """The run.json of `init_from`, or a ConfigError when it is not a finished run of `family`."""
    from keras_bertology.runs import MODEL_DIR, RUN_FILE

    run_file = Path(init_from) / MODEL_DIR / RUN_FILE
    if not run_file.is_file():
        raise ConfigError(f"--init-from {init_from} is not a finished run folder (no {MODEL_DIR}/{RUN_FILE}); pass "
                          "a folder written by `bertology pretrain` or `bertology convert`")
    description = json.loads(run_file.read_text(encoding="utf-8"))
    if description.get("family") != family.name:
        raise ConfigError(f"--init-from {init_from} holds a {description.get('family')} model, not --model "
                          f"{family.name}")
    return description


def check_source_sizes(family, preset, description, init_from):
    """ConfigError where the sizes of `preset` disagree with those of the run in `init_from` (`description`:
    its run.json): a run started from it keeps its shape, and would run and be recorded under a wrong name."""
    ours, theirs = family.presets[preset]["config"], description.get("backbone", {})
    keys = [family.training.size_keys.get(size, size) for size in ENCODER_SIZES]
    keys = [key for key in keys if key is not None and key in ours and key in theirs]
    if any(ours[key] != theirs[key] for key in keys):
        def sizes(config):
            return ", ".join(f"{key} {config[key]}" for key in keys)

        source = description.get("preset") or "converted"
        raise ConfigError(f"--preset {preset} ({sizes(ours)}) disagrees with the {source} model of --init-from "
                          f"{init_from} ({sizes(theirs)}), whose shape the run keeps: leave --preset out"
                          + (f" or give --preset {description['preset']}" if description.get("preset") else ""))


def init_context(init_from, family, options):
    """The `RunContext` of a run that starts from `init_from`: its tokenizer, its backbone config under what
    this run's options set (the family's backbone options given, the packing), and its weights to load."""
    from keras_bertology.runs import load_run_tokenizer

    description = check_source(init_from, family)
    tokenizer = load_run_tokenizer(init_from, description)
    if tokenizer is None:
        raise ConfigError(f"--init-from {init_from} has no tokenizer that runs in-graph: a run needs one to read "
                          "its corpus")
    set_here = {name for name, value in family.option_values(options.family_options, "backbone").items()
                if value is not None}
    set_here.add("packed_documents")
    overrides = {key: value for key, value in description["backbone"].items()
                 if key not in _BUILD_KEYS and key not in set_here}
    # What this run's objectives need and the source lacks (a masked-LM checkpoint's missing pooler) is built.
    overrides.update(family.backbone_needs(options.family_options, options.preset))
    return RunContext(tokenizer=tokenizer, backbone_overrides=overrides,
                      record={"init_from": str(Path(init_from).resolve())}, initial_weights=str(init_from))


def load_initial_weights(pretrainer, init_from):
    """Copy the weights of the run in `init_from` into `pretrainer` (its pretraining heads too where the run
    has them, else the backbone's alone); a CheckpointError where their shapes differ. Returns the names
    of the layers the run lacks, left freshly initialised (a headless run's heads; the pooler and
    next-sentence head of a masked-LM checkpoint, as transformers builds them)."""
    from keras_bertology.runs import load_run_model

    source = load_run_model(init_from, with_tokenizer=False)
    fresh = []
    try:
        if source.pretrainer is not None and _same_weights(pretrainer, source.pretrainer):
            pretrainer.set_weights(source.pretrainer.get_weights())
        else:  # the backbone, then the heads layer by layer, by name (the backbone's own is numbered by Keras)
            saved = source.pretrainer.backbone if source.pretrainer is not None else source.backbone
            if _same_weights(pretrainer.backbone, saved):
                pretrainer.backbone.set_weights(saved.get_weights())
            else:
                _copy_layers(pretrainer.backbone, saved, fresh)
            _copy_layers([layer for layer in pretrainer.layers if layer is not pretrainer.backbone],
                         [layer for layer in source.pretrainer.layers if layer is not saved]
                         if source.pretrainer is not None else [], fresh)
    except ValueError as error:
        raise CheckpointError(f"--init-from {init_from}: its weights do not fit this run's model ({error}); "
                              "change only settings that keep every weight's shape") from None
    return fresh


def _same_weights(model, other):
    return [weight.shape for weight in model.weights] == [weight.shape for weight in other.weights]


def _copy_layers(target, saved, fresh):
    """Copy the weights of the `saved` layers (a model's, or a list) into the `target` layers of the same
    names; a ValueError where one has no such layer, the names of the target layers without one go to `fresh`."""
    target = {layer.name: layer for layer in getattr(target, "layers", target) if layer.weights}
    for layer in getattr(saved, "layers", saved):
        if layer.weights:
            if layer.name not in target:
                raise ValueError(f"this run's model has no layer {layer.name!r}")
            target.pop(layer.name).set_weights(layer.get_weights())
    fresh.extend(target)
