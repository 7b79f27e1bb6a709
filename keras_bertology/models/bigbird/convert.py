"""Hugging Face BigBird checkpoints (BigBirdModel, BigBirdForPreTraining, BigBirdForMaskedLM) into a
block-sparse `BertBackbone` and `BertPretrainer`, and back.

transformers lays BigBird out as BERT (`bert.` prefix, the same module names), so BERT's loaders
read it; what differs is the attention's configuration: `attention_type` ("block_sparse" or
"original_full"), `block_size` and `num_random_blocks`.
"""

from keras_bertology.convert.hf_weights import WeightSource, check_sizes, load_dense, rename_legacy_layer_norm
from keras_bertology.errors import CheckpointError
from keras_bertology.models.bert.convert import (
    encoder_kwargs,
    export_with_layout,
    load_embeddings,
    load_encoder_block,
    load_pretraining_heads,
)

_ATTENTION_TYPES = {"block_sparse": "block_sparse", "original_full": "full"}


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from a BigBird checkpoint."""
    weights = rename_legacy_layer_norm(weights)
    source = WeightSource(weights, prefix="bert.")
    kwargs = encoder_kwargs(config, use_pooler=source.has("pooler.weight"))
    backbone = family.backbone_cls(**kwargs, **attention_kwargs(config))
    load_embeddings(backbone, source, "big_bird", config)
    for index in range(backbone.num_layers):
        load_encoder_block(backbone.get_layer(f"encoder_block_{index}"), source, index)
    if backbone.use_pooler:
        load_dense(backbone.get_layer("pooler"), source, "pooler")  # a Linear of its own, not BERT's pooler.dense
    pretrainer, heads, head_names, notes = load_pretraining_heads(family, backbone, weights, config)
    return backbone, pretrainer, ["pooler"] * backbone.use_pooler + heads, source.used | head_names, notes


def attention_kwargs(config):
    """`BertBackbone`'s attention arguments of a BigBirdConfig, its unsupported switches refused."""
    config = {"attention_type": "block_sparse", "block_size": 64, "num_random_blocks": 3, **config}
    kind = config["attention_type"]
    if kind not in _ATTENTION_TYPES:
        raise CheckpointError(f"config.json: attention_type {kind!r} is not BigBird's ('block_sparse' or "
                              "'original_full')")
    if config.get("rescale_embeddings"):
        raise CheckpointError("config.json: rescale_embeddings=true (Pegasus-style scaled embeddings) is not "
                              "supported")
    if not config.get("use_bias", True):
        raise CheckpointError("config.json: use_bias=false (attention without biases) is not supported")
    check_sizes(config, ("block_size",))
    if not isinstance(config["num_random_blocks"], int) or config["num_random_blocks"] < 0:
        raise CheckpointError(f"config.json: num_random_blocks must be a whole number >= 0; got "
                              f"{config['num_random_blocks']!r}")
    if _ATTENTION_TYPES[kind] == "full":
        return {}
    return dict(attention_type="block_sparse",
                attention_options=dict(block_size=config["block_size"], random_blocks=config["num_random_blocks"]))


def export(family, run):
    """`HFExport` of a BigBird run: BigBirdForMaskedLM (BigBirdForPreTraining with an NSP head), or
    BigBirdModel without heads; the tokenizer as BigBirdTokenizer's spiece.model."""
    options = run.backbone.get_config().get("attention_options") or {}
    attention = dict(attention_type="block_sparse", block_size=options.get("block_size", 64),
                     num_random_blocks=options.get("random_blocks", 3))
    if run.backbone.get_config().get("attention_type", "full") == "full":
        attention = dict(attention_type="original_full")
    return export_with_layout(run, "big_bird", "BigBird", {"sentencepiece": "BigBirdTokenizer"}, weight_prefix="bert.",
                              config_extra=attention, pooler="pooler")
