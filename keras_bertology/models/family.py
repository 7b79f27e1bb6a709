"""What the training, conversion and export code needs to know about a model family."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFamily:
    """A model family: its presets, classes and the data recipe it pretrains with.

    The data recipe is named by plain strings so data code never imports models.

    Attributes:
        name: CLI name (`--model`).
        presets: preset name -> {"config", "params", "description"}.
        backbone_cls: the backbone class built from a preset's config.
        pretrainer_cls: wraps a backbone with the family's objectives.
        tokenizer: "wordpiece" or "sentencepiece".
        instances: "sentence_pairs" (NSP) or "full_sentences" / "doc_sentences".
        masking: default masking, "static" (written once) or "dynamic".
    """

    name: str
    presets: dict
    backbone_cls: type
    pretrainer_cls: type
    tokenizer: str
    instances: str
    masking: str

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
