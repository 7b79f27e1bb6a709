"""Hugging Face XLNet checkpoints: XLNetModel (encoder) and XLNetLMHeadModel (encoder + tied LM head)."""

import numpy as np

from keras_bertology.convert.hf_weights import WeightSource, assign, check_sizes, load_dense, load_layer_norm
from keras_bertology.errors import CheckpointError

BIAS_NAMES = ("r_w_bias", "r_r_bias", "r_s_bias")  # content, position, segment: our order


def backbone_kwargs(config):
    """XLNetBackbone arguments from an XLNet config.json; refuses what the backbone does not build."""
    check_sizes(config, ("vocab_size", "d_model", "n_layer", "n_head", "d_inner"))
    hidden, heads = config["d_model"], config["n_head"]
    if hidden % heads or config.get("d_head", hidden // heads) != hidden // heads:
        raise CheckpointError(f"config.json: d_head must be d_model / n_head = {hidden // heads}")
    if config.get("attn_type", "bi") != "bi":
        raise CheckpointError(f"config.json: attn_type {config['attn_type']!r} is not supported (only 'bi')")
    if config.get("same_length"):
        raise CheckpointError("config.json: same_length=true is not supported")
    activation = {"gelu": "gelu", "gelu_new": "gelu_approximate", "relu": "relu"}.get(config.get("ff_activation",
                                                                                               "gelu"))
    if activation is None:
        raise CheckpointError(f"config.json: ff_activation {config['ff_activation']!r} is not supported")
    return dict(vocab_size=config["vocab_size"], num_layers=config["n_layer"], num_heads=heads, hidden_size=hidden,
                intermediate_size=config["d_inner"], activation=activation, dropout=config.get("dropout", 0.1),
                layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
                initializer_range=config.get("initializer_range", 0.02), untie_r=config.get("untie_r", True),
                clamp_len=config.get("clamp_len", -1))


def _heads_kernel(tensor, hidden):
    """[H, N, D] (XLNet's projection layout) -> a Dense kernel [H, N * D]."""
    return np.asarray(tensor).reshape(hidden, -1)


def load_encoder(encoder, source):
    """All encoder tensors from `source` (names without the `transformer.` prefix)."""
    hidden = encoder.hidden_size
    assign(encoder.word_embedding.embeddings, source.get("word_embedding.weight"), "word_embedding.weight")
    assign(encoder.mask_embedding, np.asarray(source.get("mask_emb")).reshape(-1), "mask_emb")
    biases = [[source.get(f"layer.{i}.rel_attn.{name}") for name in BIAS_NAMES] for i in range(encoder.num_layers)]
    if encoder.untie_r:
        assign(encoder.relative_biases, np.stack([np.stack(layer) for layer in biases]), "rel_attn biases")
    else:
        if any(not np.array_equal(np.stack(layer), np.stack(biases[0])) for layer in biases):
            raise CheckpointError("config.json says untie_r=false but the layers' relative biases differ")
        assign(encoder.relative_biases, np.stack(biases[0]), "rel_attn biases")
    for index, block in enumerate(encoder.blocks):
        prefix = f"layer.{index}."
        attention = block.block.attention
        for ours, theirs in (("query_dense", "q"), ("key_dense", "k"), ("value_dense", "v")):
            name = f"{prefix}rel_attn.{theirs}"
            assign(getattr(attention, ours).kernel, _heads_kernel(source.get(name), hidden), name)
        name = f"{prefix}rel_attn.o"
        assign(attention.output_dense.kernel, _heads_kernel(source.get(name), hidden).T, name)
        assign(block.relative.position_kernel, source.get(f"{prefix}rel_attn.r"), f"{prefix}rel_attn.r")
        assign(block.relative.segment_embedding, source.get(f"{prefix}rel_attn.seg_embed"),
               f"{prefix}rel_attn.seg_embed")
        load_layer_norm(block.block.attention_norm, source, f"{prefix}rel_attn.layer_norm")
        load_dense(block.block.intermediate_dense, source, f"{prefix}ff.layer_1")
        load_dense(block.block.output_dense, source, f"{prefix}ff.layer_2")
        load_layer_norm(block.block.output_norm, source, f"{prefix}ff.layer_norm")


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used) from an XLNet checkpoint."""
    from keras_bertology.models.xlnet.pretrainer import XLNetPretrainer

    backbone = family.backbone_cls(**backbone_kwargs(config))
    source = WeightSource(weights, prefix="transformer.")
    load_encoder(backbone.encoder, source)
    heads = WeightSource(weights, prefix="")
    if not heads.has("lm_loss.bias"):
        return backbone, None, [], source.used
    pretrainer = XLNetPretrainer(backbone)
    assign(pretrainer.get_layer("plm_head").bias, heads.get("lm_loss.bias"), "lm_loss.bias")
    heads.take_tied_copy("lm_loss.weight", backbone.token_embedding.embeddings.numpy())
    return backbone, pretrainer, ["plm"], source.used | heads.used
