"""Preset sizes: published parameter counts, cross-checked against keras-hub's backbones."""

import keras_hub
import pytest
from counting import shapes_only

from keras_bertology.models import FAMILIES

# Published/keras-hub counts (embeddings + encoder, pooler for BERT; no MLM head).
PUBLISHED = {
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "roberta-base": 124_052_736,
    "roberta-large": 354_307_072,
    "albert-base": 11_683_584,
    "albert-large": 17_683_968,
    "albert-xlarge": 58_724_864,
    "albert-xxlarge": 222_595_584,
    # BERT-Base/Large cased (108,310,272 / 333,579,264) without the pooler.
    "spanbert-base": 107_719_680,
    "spanbert-large": 332_529_664,
    # ELECTRA discriminators: keras-hub's counts (13,548,800 / 109,482,240 / 335,141,888) without the pooler.
    "electra-small": 13_483_008,
    "electra-base": 108_891_648,
    "electra-large": 334_092_288,
}
SMALL = ["bert-tiny", "bert-mini", "bert-small", "bert-medium", "roberta-tiny", "roberta-mini", "albert-tiny",
         "spanbert-tiny", "electra-tiny"]
# Counted against transformers' own models in the family's tests.
CHECKED_ELSEWHERE = {"xlnet-tiny", "xlnet-base", "xlnet-large",  # test_xlnet.py
                     "gpt-tiny", "gpt2", "gpt2-medium",  # test_gpt.py
                     "transformer-xl-tiny", "transformer-xl-wt103-base", "transformer-xl-wt103-large",  # its own
                     "t5-tiny", "t5-small", "t5-base", "t5-v1_1-small", "t5-v1_1-base",  # test_t5.py
                     "deberta-tiny", "deberta-base", "deberta-v3-tiny", "deberta-v3-xsmall", "deberta-v3-small",
                     "deberta-v3-base", "deberta-v3-large",  # test_deberta.py
                     "bigbird-tiny", "bigbird-roberta-base", "bigbird-roberta-large",  # test_bigbird.py
                     "linformer-tiny", "linformer-base",  # test_linformer.py
                     "distilbert-tiny", "distilbert-base",  # test_distilbert.py
                     "ernie-tiny", "ernie-base",  # test_ernie.py
                     "elmo-tiny", "elmo-small", "elmo-medium", "elmo-original",  # test_elmo.py
                     "modernbert-tiny", "modernbert-base", "modernbert-large"}  # test_modernbert.py
PRESETS = [(family, name) for family in FAMILIES.values() for name in family.presets]


def _ours(family, name):
    return family.backbone_cls(**family.backbone_config(name))


def _keras_hub(family, name):
    config = family.presets[name]["config"]
    common = dict(
        vocabulary_size=config["vocab_size"], num_layers=config["num_layers"],
        num_heads=config["num_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_positions"],
    )
    if family.name == "electra":
        return keras_hub.models.ElectraBackbone(
            vocab_size=config["vocab_size"], num_layers=config["num_layers"], num_heads=config["num_heads"],
            hidden_dim=config["hidden_size"], embedding_dim=config["embedding_size"],
            intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_positions"])
    if family.name in ("bert", "spanbert"):
        return keras_hub.models.BertBackbone(num_segments=config["num_segments"], **common)
    if family.name == "albert":
        return keras_hub.models.AlbertBackbone(
            num_groups=config["num_groups"], num_inner_repetitions=config["inner_group_num"],
            embedding_dim=config["embedding_size"], num_segments=config["num_segments"], **common)
    return keras_hub.models.RobertaBackbone(**common)


@pytest.mark.parametrize("name,expected", sorted(PUBLISHED.items()))
@pytest.mark.slow
def test_big_presets_match_published_counts(name, expected):
    family = FAMILIES[name.split("-")[0]]
    with shapes_only():
        assert _ours(family, name).count_params() == expected
    assert family.presets[name]["params"] == expected


@pytest.mark.parametrize("name", SMALL)
def test_small_presets_match_keras_hub(name):
    family = FAMILIES[name.split("-")[0]]
    config = family.presets[name]["config"]
    # keras-hub's BERT always has the pooler (hidden x hidden + bias); SpanBERT has none.
    pooler = config["hidden_size"] * (config["hidden_size"] + 1) if family.name in ("spanbert", "electra") else 0
    with shapes_only():  # counts: no weight values are read
        ours = _ours(family, name).count_params()
        assert ours == _keras_hub(family, name).count_params() - pooler
    assert ours == family.presets[name]["params"]


def test_every_preset_is_covered():
    assert {name for _, name in PRESETS} == set(PUBLISHED) | set(SMALL) | CHECKED_ELSEWHERE


# Published ELECTRA generators (keras-hub's counts, with a pooler): 256 wide for base (1/3) and large (1/4).
GENERATORS = {"electra-base": 33_576_960, "electra-large": 51_065_344}


@pytest.mark.parametrize("name,published", sorted(GENERATORS.items()))
@pytest.mark.slow
def test_electra_generators_match_published_counts(name, published):
    family = FAMILIES["electra"]
    with shapes_only():
        model = family.build_pretrainer(_ours(family, name), preset=name)
        hidden = model.generator.hidden_size
        assert hidden == 256 and model.generator.count_params() + hidden * (hidden + 1) == published
