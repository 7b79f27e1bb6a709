"""`--attention-dropout`: the recipe's dropout of the attention probabilities replaced, which at 0 lets every
attention take the backend's fused kernel while training (layers/dot_product.py)."""

import pytest

from keras_bertology.layers import MultiHeadSelfAttention
from keras_bertology.pretraining.options import PretrainOptions


@pytest.mark.parametrize("model,preset", [("bert", "bert-tiny"), ("gpt", "gpt-tiny"), ("deberta", "deberta-tiny")])
def test_every_attention_of_the_backbone_takes_the_given_rate(model, preset):
    """GPT's backbone hands it to BERT's through its keyword arguments; DeBERTa's attention is a subclass."""
    options = PretrainOptions(model=model, preset=preset, attention_dropout=0.0)
    family = options.validate()
    config = options.backbone_config(family, vocab_size=128)
    assert config["attention_dropout"] == 0.0
    backbone = family.backbone_cls(**config)
    attentions = [layer for layer in backbone._flatten_layers() if isinstance(layer, MultiHeadSelfAttention)]
    assert attentions and all(layer.dropout == 0.0 for layer in attentions)
    default = family.backbone_cls(**PretrainOptions(model=model, preset=preset).backbone_config(family, vocab_size=128))
    assert {layer.dropout for layer in default._flatten_layers() if isinstance(layer, MultiHeadSelfAttention)} == {0.1}


def test_it_overrides_a_source_runs_rate():
    """A run from --init-from (or a converted model) takes the source's config, dropout included, unless given."""
    options = PretrainOptions(model="bert", preset="bert-tiny", attention_dropout=0.05)
    assert options.backbone_config(options.validate(), attention_dropout=0.1)["attention_dropout"] == 0.05
