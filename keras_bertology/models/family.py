"""What the training, conversion and export code needs to know about a model family."""

from dataclasses import dataclass

from keras_bertology.lazy_imports import import_object


@dataclass(frozen=True)
class ModelFamily:
    """A model family: its presets, classes and the data recipe it pretrains with.

    The data recipe is named by plain strings so data code never imports
    models, and the classes by import paths so that listing families and
    presets does not start TensorFlow.

    Attributes:
        name: CLI name (`--model`).
        presets: preset name -> {"config", "params", "description"}.
        backbone_path: "module:Class" of the backbone built from a preset's config.
        pretrainer_path: "module:Class" wrapping a backbone with the family's objectives.
        tokenizer: "wordpiece" or "sentencepiece".
        instances: "sentence_pairs" (NSP) or "full_sentences" / "doc_sentences".
        masking: default masking, "static" (written once) or "dynamic".
    """

    name: str
    presets: dict
    backbone_path: str
    pretrainer_path: str
    tokenizer: str
    instances: str
    masking: str

    @property
    def backbone_cls(self):
        return import_object(self.backbone_path)

    @property
    def pretrainer_cls(self):
        return import_object(self.pretrainer_path)

    def backbone_config(self, preset, **overrides):
        """The backbone kwargs of `preset` with `overrides` applied."""
        return dict(self.presets[preset]["config"], **overrides)


def sized_preset(base_config, num_layers, hidden_size, params, description):
    """A preset in the BERT sizing rule: 64-wide heads and a 4x feed-forward."""
    return {
        "config": dict(base_config, num_layers=num_layers, hidden_size=hidden_size,
                       num_heads=hidden_size // 64, intermediate_size=4 * hidden_size),
        "params": params,
        "description": description,
    }
