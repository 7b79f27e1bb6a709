"""What `from_preset` reads: a preset name, a run folder of this library, a Hugging Face folder or
repository.

One argument, four sources, resolved in this order:

- `hf://ORG/NAME[@REVISION]`: a Hugging Face Hub repository, fetched through
  huggingface_hub's cache and converted once (`convert.hub`);
- a folder holding `model/` (written by `bertology pretrain` or `convert`):
  the trained or converted model, its tokenizer and sequence length;
- a folder holding `config.json` (a transformers checkpoint): converted in
  memory, as `bertology convert` would;
- a preset name of any family (`bertology presets`): a freshly initialised
  model of that size, or with `weights="pretrained"` the published weights of
  the repository the preset names.

The family is found from the source, so the base classes
(`models.Backbone`, `models.Pretrainer`, `tokenizers.Tokenizer`) load any
family; a family's own class refuses a source that holds another.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from keras_bertology.errors import ConfigError

RUN, HF, PRESET = "run folder", "Hugging Face folder", "preset"
WEIGHTS = (None, "pretrained")


@dataclass(frozen=True)
class Source:
    """Where `from_preset` reads from: `kind` (RUN, HF or PRESET), the family record, and the folder or
    the preset name."""

    kind: str
    family: object
    location: str

    @property
    def path(self):
        return Path(self.location)


def locate(name_or_path, weights=None):
    """The `Source` that `name_or_path` names, or a ConfigError saying what it is not. `weights`:
    None (what the source holds) or "pretrained" (a preset's published weights)."""
    from keras_bertology.convert import hub
    from keras_bertology.models.registry import FAMILIES
    from keras_bertology.runs import MODEL_DIR

    if weights not in WEIGHTS:
        raise ConfigError(f"weights={weights!r}: use None (what the source holds) or 'pretrained' (a preset's "
                          "published weights)")
    text = os.fspath(name_or_path)
    presets = {preset: family for family in FAMILIES.values() for preset in family.presets}
    if weights == "pretrained":
        repo = presets[text].presets[text].get("hf_repo") if text in presets else None
        if repo is None:
            published = [name for name, family in presets.items() if "hf_repo" in family.presets[name]]
            raise ConfigError(f"weights='pretrained' needs a preset with published weights, not {text!r}; "
                              f"those presets: {', '.join(published)}")
        text = hub.HANDLE_PREFIX + repo
    if text.startswith(hub.HANDLE_PREFIX):
        run_dir = hub.converted_run(hub.parse_handle(text))
        return Source(RUN, _run_family(run_dir), str(run_dir))
    path = Path(text)
    if (path / MODEL_DIR).is_dir() or (path / "checkpoints").is_dir():  # the latter: a run not finished
        return Source(RUN, _run_family(path), text)
    if (path / "config.json").is_file():
        from keras_bertology.convert.hf_checkpoint import family_for_model_type, read_hf_config

        return Source(HF, family_for_model_type(read_hf_config(path).get("model_type")), text)
    if path.exists():
        raise ConfigError(f"{text} is neither a run folder (with {MODEL_DIR}/) nor a Hugging Face folder "
                          "(with config.json)")
    if text not in presets:
        if hub.handle_for_source(text) is not None:  # ORG/NAME without its prefix
            raise ConfigError(f"{text!r} is no folder here; for the Hugging Face Hub repository write "
                              f"{hub.HANDLE_PREFIX}{text}")
        raise ConfigError(f"{text!r} is not a preset name, an existing folder nor an {hub.HANDLE_PREFIX}ORG/NAME "
                          f"handle; presets: {', '.join(presets)}")
    return Source(PRESET, presets[text], text)


def _run_family(path):
    from keras_bertology.models.registry import get_family
    from keras_bertology.runs import read_run_description

    return get_family(read_run_description(path)["family"])


def load_model(source, with_tokenizer=True):
    """The `runs.RunModel` of a run or Hugging Face folder (converted in memory)."""
    if source.kind == RUN:
        from keras_bertology.runs import load_run_model

        return load_run_model(source.path, with_tokenizer=with_tokenizer)
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint

    return convert_hf_checkpoint(source.path, with_tokenizer=with_tokenizer)[0]


def check_class(obj, cls, source):
    """`obj`, or a ConfigError when it is not the `cls` the caller asked for."""
    if not isinstance(obj, cls):
        raise ConfigError(f"{source.location} ({source.kind}) holds a {type(obj).__name__} of --model "
                          f"{source.family.name}, not a {cls.__name__}: load it with "
                          f"{type(obj).__name__}.from_preset or the base class's")
    return obj


def backbone(cls, name_or_path, weights=None, **overrides):
    """A `cls` backbone: a new one of a preset's size (`overrides` change its config, e.g. vocab_size), or
    the weights of a folder (`overrides` rebuild it with another config of the same shapes, e.g. dropout
    or dtype)."""
    return _backbone(cls, locate(name_or_path, weights), overrides)


def _backbone(cls, source, overrides):
    if source.kind == PRESET:
        family = source.family
        return check_class(family.backbone_cls(**family.backbone_config(source.location, **overrides)), cls,
                           source)
    loaded = check_class(load_model(source, with_tokenizer=False).backbone, cls, source)
    return reconfigured(loaded, overrides, source) if overrides else loaded


def reconfigured(model, overrides, source):
    """`model` rebuilt from its config with `overrides` and given its weights; a ConfigError when the
    overrides change a weight's shape (vocab_size, hidden_size, ...)."""
    config = dict(model.get_config(), **overrides)
    rebuilt = type(model).from_config(config)
    try:
        rebuilt.set_weights(model.get_weights())
    except ValueError as error:
        changed = ", ".join(sorted(overrides))
        raise ConfigError(f"{source.location}: {changed} would change the shape of trained weights "
                          f"({error}); pass only settings that keep them, such as dropout or dtype") from None
    return rebuilt


def pretrainer(cls, name_or_path, batch_size=None, weights=None, **overrides):
    """A `cls` pretrainer: the family's objectives on a new backbone of a preset's size (`overrides` go to
    the backbone config; `batch_size`, per replica, for families that keep a memory per row), or the
    pretraining heads a folder holds."""
    source = locate(name_or_path, weights)
    if source.kind == PRESET:
        family = source.family
        new_backbone = family.backbone_cls(**family.backbone_config(source.location, **overrides))
        return check_class(family.build_pretrainer(new_backbone, preset=source.location, batch_size=batch_size),
                           cls, source)
    if overrides:
        raise ConfigError(f"{', '.join(sorted(overrides))}: a {source.kind}'s pretrainer is loaded as trained; "
                          "settings apply to presets only")
    model = load_model(source, with_tokenizer=False)
    if model.pretrainer is None:
        raise ConfigError(f"{source.location} holds an encoder without pretraining heads; load it with "
                          "Backbone.from_preset")
    return check_class(model.pretrainer, cls, source)


def _with_vocabulary(source):
    """`source`, or a ConfigError for a preset name: a preset fixes a model's sizes, not a vocabulary."""
    if source.kind == PRESET:
        raise ConfigError(f"preset {source.location!r} fixes a model's sizes, not a vocabulary: learn one "
                          f"from a corpus (the {source.family.name} family's train_tokenizer(sentences, "
                          "vocab_size)) or load the tokenizer of a run or Hugging Face folder")
    return source


def tokenizer(cls, name_or_path, weights=None):
    """The `cls` tokenizer of a run or Hugging Face folder. A preset fixes sizes, not a vocabulary."""
    source = _with_vocabulary(locate(name_or_path, weights))
    if source.kind == RUN:
        from keras_bertology.runs import load_run_tokenizer

        loaded = load_run_tokenizer(source.path)
    else:
        loaded = load_model(source).tokenizer
    if loaded is None:
        raise ConfigError(f"{source.location} holds no tokenizer that runs in-graph")
    return check_class(loaded, cls, source)


def task_model(cls, backbone_cls, name_or_path, weights=None, **head_kwargs):
    """A `cls` task model on the backbone (a `backbone_cls`, the caller's base class) of `name_or_path`, with
    the head arguments that follow its family (`cls.family_defaults`) unless given."""
    source = locate(name_or_path, weights)
    encoder = _backbone(backbone_cls, source, {}).encoder_backbone()  # a head reads an encoder-decoder's encoder
    return cls(encoder, **{**cls.family_defaults(source.family), **head_kwargs})


def preprocessor(cls, name_or_path, seq_len=None, weights=None):
    """A `cls` (`data.preprocessor.TextPreprocessor`) with the tokenizer, layout, inputs and sequence
    length of a run or Hugging Face folder (`seq_len` overrides the last, up to the model's positions)."""
    source = _with_vocabulary(locate(name_or_path, weights))
    model = load_model(source)
    if model.tokenizer is None:
        raise ConfigError(f"{source.location} holds no tokenizer that runs in-graph")
    positions = getattr(model.backbone, "max_positions", None)
    if seq_len is not None and (seq_len < 2 or (positions and seq_len > positions)):
        raise ConfigError(f"seq_len must be in [2, {positions}] for {source.location} (got {seq_len})")
    # The inputs of the model that encodes a text alone: an encoder-decoder's decoder reads no packed text.
    return cls(model.tokenizer, source.family, seq_len or model.seq_len, list(model.backbone.text_encoder().input))
