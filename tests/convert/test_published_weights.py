"""Each preset that names a Hugging Face repository (`hf_repo`, loaded by `weights="pretrained"`) has the
architecture that repository's config.json declares, written down here from the published files."""

import re
from pathlib import Path

import pytest

from keras_bertology.models import FAMILIES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "converting.md"

_BERT_BASE = dict(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu",
                  layer_norm_eps=1e-12)


def _sized(base, hidden, layers, heads, inner, **extra):
    return dict(base, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=inner, **extra)


_BERT = dict(_BERT_BASE, model_type="bert")
_ROBERTA = dict(model_type="roberta", vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                hidden_act="gelu", layer_norm_eps=1e-5)
_ALBERT = dict(model_type="albert", vocab_size=30000, embedding_size=128, max_position_embeddings=512,
               type_vocab_size=2, hidden_act="gelu_new", layer_norm_eps=1e-12)
_ELECTRA = dict(_BERT_BASE, model_type="electra")
_SPANBERT = dict(_BERT_BASE, model_type="bert", vocab_size=28996)
_BIGBIRD = dict(model_type="big_bird", vocab_size=50358, max_position_embeddings=4096, type_vocab_size=2,
                hidden_act="gelu_new", layer_norm_eps=1e-12, attention_type="block_sparse", block_size=64,
                num_random_blocks=3)
_DEBERTA_V3 = dict(model_type="deberta-v2", vocab_size=128100, max_position_embeddings=512, hidden_act="gelu",
                   layer_norm_eps=1e-7, relative_attention=True, max_relative_positions=-1, position_buckets=256,
                   norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type="p2c|c2p",
                   position_biased_input=False, type_vocab_size=0)
_GPT2 = dict(model_type="gpt2", vocab_size=50257, n_positions=1024, n_inner=None, activation_function="gelu_new",
             layer_norm_epsilon=1e-5)
_T5 = dict(model_type="t5", vocab_size=32128, d_kv=64, feed_forward_proj="relu", tie_word_embeddings=True)
_T5_V1_1 = dict(_T5, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
_MODERNBERT = dict(model_type="modernbert", vocab_size=50368, max_position_embeddings=8192, hidden_activation="gelu",
                   norm_eps=1e-5, local_attention=128, global_attn_every_n_layers=3, global_rope_theta=160000.0,
                   local_rope_theta=10000.0)
_XLNET = dict(model_type="xlnet", vocab_size=32000, ff_activation="gelu", untie_r=True, layer_norm_eps=1e-12)

# The architecture fields of each mapped repository's config.json, as published.
CONFIGS = {
    "google/bert_uncased_L-2_H-128_A-2": _sized(_BERT, 128, 2, 2, 512),
    "google/bert_uncased_L-4_H-256_A-4": _sized(_BERT, 256, 4, 4, 1024),
    "google/bert_uncased_L-4_H-512_A-8": _sized(_BERT, 512, 4, 8, 2048),
    "google/bert_uncased_L-8_H-512_A-8": _sized(_BERT, 512, 8, 8, 2048),
    "google-bert/bert-base-uncased": _sized(_BERT, 768, 12, 12, 3072),
    "google-bert/bert-large-uncased": _sized(_BERT, 1024, 24, 16, 4096),
    "FacebookAI/roberta-base": _sized(_ROBERTA, 768, 12, 12, 3072),
    "FacebookAI/roberta-large": _sized(_ROBERTA, 1024, 24, 16, 4096),
    "albert/albert-base-v2": _sized(_ALBERT, 768, 12, 12, 3072),
    "albert/albert-large-v2": _sized(_ALBERT, 1024, 24, 16, 4096),
    "albert/albert-xlarge-v2": _sized(_ALBERT, 2048, 24, 16, 8192),
    "albert/albert-xxlarge-v2": _sized(_ALBERT, 4096, 12, 64, 16384),
    "google/electra-small-discriminator": _sized(_ELECTRA, 256, 12, 4, 1024, embedding_size=128),
    "google/electra-base-discriminator": _sized(_ELECTRA, 768, 12, 12, 3072, embedding_size=768),
    "google/electra-large-discriminator": _sized(_ELECTRA, 1024, 24, 16, 4096, embedding_size=1024),
    "SpanBERT/spanbert-base-cased": _sized(_SPANBERT, 768, 12, 12, 3072),
    "SpanBERT/spanbert-large-cased": _sized(_SPANBERT, 1024, 24, 16, 4096),
    "google/bigbird-roberta-base": _sized(_BIGBIRD, 768, 12, 12, 3072),
    "google/bigbird-roberta-large": _sized(_BIGBIRD, 1024, 24, 16, 4096),
    "nghuyong/ernie-1.0-base-zh": _sized(dict(model_type="ernie", vocab_size=18000, max_position_embeddings=513,
                                              type_vocab_size=2, hidden_act="relu", layer_norm_eps=1e-5),
                                         768, 12, 12, 3072),
    "distilbert/distilbert-base-uncased": dict(model_type="distilbert", vocab_size=30522, dim=768, n_layers=6,
                                               n_heads=12, hidden_dim=3072, max_position_embeddings=512,
                                               activation="gelu"),
    "microsoft/deberta-base": _sized(dict(model_type="deberta", vocab_size=50265, max_position_embeddings=512,
                                          hidden_act="gelu", layer_norm_eps=1e-7, relative_attention=True,
                                          max_relative_positions=-1, pos_att_type="c2p|p2c",
                                          position_biased_input=False, type_vocab_size=0),
                                     768, 12, 12, 3072),
    "microsoft/deberta-v3-xsmall": _sized(_DEBERTA_V3, 384, 12, 6, 1536),
    "microsoft/deberta-v3-small": _sized(_DEBERTA_V3, 768, 6, 12, 3072),
    "microsoft/deberta-v3-base": _sized(_DEBERTA_V3, 768, 12, 12, 3072),
    "microsoft/deberta-v3-large": _sized(_DEBERTA_V3, 1024, 24, 16, 4096),
    "openai-community/gpt2": dict(_GPT2, n_embd=768, n_layer=12, n_head=12),
    "openai-community/gpt2-medium": dict(_GPT2, n_embd=1024, n_layer=24, n_head=16),
    "google-t5/t5-small": dict(_T5, d_model=512, d_ff=2048, num_layers=6, num_heads=8),
    "google-t5/t5-base": dict(_T5, d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "google/t5-v1_1-small": dict(_T5_V1_1, d_model=512, d_ff=1024, num_layers=8, num_heads=6),
    "google/t5-v1_1-base": dict(_T5_V1_1, d_model=768, d_ff=2048, num_layers=12, num_heads=12),
    "xlnet/xlnet-base-cased": dict(_XLNET, d_model=768, n_layer=12, n_head=12, d_inner=3072),
    "xlnet/xlnet-large-cased": dict(_XLNET, d_model=1024, n_layer=24, n_head=16, d_inner=4096),
    "answerdotai/ModernBERT-base": dict(_MODERNBERT, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                                        intermediate_size=1152),
    "answerdotai/ModernBERT-large": dict(_MODERNBERT, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                                         intermediate_size=2624),
    "transfo-xl/transfo-xl-wt103": dict(model_type="transfo-xl", vocab_size=267735, d_model=1024, d_embed=1024,
                                        n_head=16, d_head=64, d_inner=4096, n_layer=18, div_val=4,
                                        cutoffs=[20000, 40000, 200000]),
}

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "relu": "relu"}


def _encoder(config, position_offset=0):
    return {"vocab_size": config["vocab_size"], "hidden_size": config["hidden_size"],
            "num_layers": config["num_hidden_layers"], "num_heads": config["num_attention_heads"],
            "intermediate_size": config["intermediate_size"],
            "max_positions": config["max_position_embeddings"] - position_offset,
            "activation": ACTIVATIONS[config["hidden_act"]]}


def _bert(config):
    return {**_encoder(config), "num_segments": config["type_vocab_size"],
            "layer_norm_epsilon": config["layer_norm_eps"]}


def _deberta(config):
    return {**_encoder(config), "position_terms": tuple(config["pos_att_type"].split("|")),
            "layer_norm_epsilon": config["layer_norm_eps"], "position_buckets": config.get("position_buckets", 0),
            "share_attention_key": config.get("share_att_key", False),
            "norm_relative_embeddings": "layer_norm" in config.get("norm_rel_ebd", "none")}


# Our backbone config's view of each model_type's config.json (RoBERTa's table keeps two rows for padding).
TRANSLATIONS = {
    "bert": _bert,
    "ernie": _bert,
    "roberta": lambda c: {**_encoder(c, position_offset=2), "layer_norm_epsilon": c["layer_norm_eps"]},
    "albert": lambda c: {**_bert(c), "embedding_size": c["embedding_size"]},
    "electra": lambda c: {**_bert(c), "embedding_size": c["embedding_size"]},
    "big_bird": lambda c: {**_bert(c), "attention_type": c["attention_type"],
                           "attention_options": {"block_size": c["block_size"],
                                                 "random_blocks": c["num_random_blocks"]}},
    "deberta": _deberta,
    "deberta-v2": _deberta,
    "distilbert": lambda c: {"vocab_size": c["vocab_size"], "hidden_size": c["dim"], "num_layers": c["n_layers"],
                             "num_heads": c["n_heads"], "intermediate_size": c["hidden_dim"],
                             "max_positions": c["max_position_embeddings"], "activation": c["activation"]},
    "gpt2": lambda c: {"vocab_size": c["vocab_size"], "hidden_size": c["n_embd"], "num_layers": c["n_layer"],
                       "num_heads": c["n_head"], "intermediate_size": c["n_inner"] or 4 * c["n_embd"],
                       "max_positions": c["n_positions"], "layer_norm_epsilon": c["layer_norm_epsilon"],
                       "activation": ACTIVATIONS[c["activation_function"]]},
    "t5": lambda c: {"vocab_size": c["vocab_size"], "hidden_size": c["d_model"], "num_layers": c["num_layers"],
                     "num_heads": c["num_heads"], "intermediate_size": c["d_ff"], "head_dim": c["d_kv"],
                     "gated_feed_forward": c["feed_forward_proj"].startswith("gated"),
                     "activation": ACTIVATIONS[c["feed_forward_proj"].removeprefix("gated-").replace("gelu",
                                                                                                    "gelu_new")]},
    "xlnet": lambda c: {"vocab_size": c["vocab_size"], "hidden_size": c["d_model"], "num_layers": c["n_layer"],
                        "num_heads": c["n_head"], "intermediate_size": c["d_inner"], "untie_r": c["untie_r"],
                        "activation": c["ff_activation"], "layer_norm_epsilon": c["layer_norm_eps"]},
    "modernbert": lambda c: {"vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"],
                             "num_layers": c["num_hidden_layers"], "num_heads": c["num_attention_heads"],
                             "intermediate_size": c["intermediate_size"], "max_positions": c["max_position_embeddings"],
                             "activation": c["hidden_activation"], "layer_norm_epsilon": c["norm_eps"],
                             "local_window": c["local_attention"], "global_every": c["global_attn_every_n_layers"],
                             "global_rotary_base": c["global_rope_theta"], "rotary_base": c["local_rope_theta"]},
    "transfo-xl": lambda c: {"vocab_size": c["vocab_size"], "hidden_size": c["d_model"], "num_layers": c["n_layer"],
                             "num_heads": c["n_head"], "intermediate_size": c["d_inner"], "div_val": c["div_val"],
                             "cutoffs": c["cutoffs"]},
}
# Settings our presets leave to the backbone's default.
DEFAULTS = {"activation": "gelu"}
MAPPED = sorted((name, family, preset["hf_repo"]) for family in FAMILIES.values()
                for name, preset in family.presets.items() if "hf_repo" in preset)


@pytest.mark.parametrize("name,family,repo", MAPPED, ids=[name for name, _, _ in MAPPED])
def test_each_published_preset_has_its_repositorys_architecture(name, family, repo):
    config = CONFIGS[repo]
    converters = [other.name for other in FAMILIES.values() if config["model_type"] in other.conversion.hf_model_types]
    # SpanBERT's published checkpoints are BERT checkpoints (no span-boundary head): the bert family reads them.
    assert converters == [family.name] or (family.name, converters) == ("spanbert", ["bert"])
    ours = family.presets[name]["config"]
    for key, expected in TRANSLATIONS[config["model_type"]](config).items():
        assert ours.get(key, DEFAULTS.get(key)) == expected, (name, key)


def test_every_recorded_repository_is_mapped_and_the_big_presets_are_published():
    assert sorted(CONFIGS) == sorted(repo for _, _, repo in MAPPED)
    for family in FAMILIES.values():
        for name in family.presets:
            if name.endswith(("-base", "-large")) and family.name not in ("linformer", "elmo"):
                assert "hf_repo" in family.presets[name] or name == "transformer-xl-wt103-base", name


def test_the_converting_docs_list_each_published_preset_and_its_repository():
    listed = re.findall(r"^\| ([\w.-]+) \| \[([\w./-]+)\]\(https://huggingface.co/([\w./-]+)\) \|$",
                        DOCS.read_text(encoding="utf-8"), flags=re.M)
    assert all(repo == link for _, repo, link in listed)
    assert sorted((name, repo) for name, repo, _ in listed) == sorted((name, repo) for name, _, repo in MAPPED)
