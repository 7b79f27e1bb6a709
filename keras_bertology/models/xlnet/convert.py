"""Hugging Face XLNet checkpoints: XLNetModel (encoder) and XLNetLMHeadModel (encoder + LM head).

transformers' XLNet never reads `untie_r`: every layer owns its relative
biases. So does the import where the tensors differ between layers, whatever
config.json says; where they are equal one shared set computes the same.
"""

import numpy as np

from keras_bertology.convert.hf_weights import (
    WeightSource,
    assign,
    check_sizes,
    load_decoder,
    load_dense,
    load_layer_norm,
    untied_decoder,
)
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


def relative_biases(source, num_layers):
    """[layers, 3, heads, head size]: each layer's content, position and segment biases."""
    biases = [[np.asarray(source.get(f"layer.{i}.rel_attn.{name}")) for name in BIAS_NAMES] for i in range(num_layers)]
    shapes = sorted({bias.shape for layer in biases for bias in layer})
    if len(shapes) > 1:
        raise CheckpointError(f"the layers' rel_attn biases differ in shape: {', '.join(map(str, shapes))}")
    return np.asarray(biases)


def layers_share_biases(biases):
    return all(np.array_equal(layer, biases[0]) for layer in biases)


def load_encoder(encoder, source, biases):
    """All encoder tensors from `source` (names without the `transformer.` prefix); `biases` are the layers'
    relative biases (`relative_biases`), equal across layers where the encoder shares one set."""
    hidden = encoder.hidden_size
    assign(encoder.word_embedding.embeddings, source.get("word_embedding.weight"), "word_embedding.weight")
    assign(encoder.mask_embedding, np.asarray(source.get("mask_emb")).reshape(-1), "mask_emb")
    assign(encoder.relative_biases, biases if encoder.untie_r else biases[0], "rel_attn biases")
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
    """(backbone, pretrainer or None, heads imported, names used, notes) from an XLNet checkpoint."""
    from keras_bertology.models.xlnet.pretrainer import XLNetPretrainer

    kwargs = backbone_kwargs(config)
    source = WeightSource(weights, prefix="transformer.")
    biases = relative_biases(source, kwargs["num_layers"])
    if not kwargs["untie_r"] and not layers_share_biases(biases):
        kwargs["untie_r"] = True
        source.notes.append("config.json says untie_r=false but the layers' relative attention biases differ: "
                            "imported per layer (untie_r=true), as transformers uses them")
    if config.get("bi_data"):
        source.notes.append("config.json sets bi_data=true, with which transformers reads the second half of every "
                            "batch backwards, at inference too: this import reads every row forwards")
    backbone = family.backbone_cls(**kwargs)
    load_encoder(backbone.encoder, source, biases)
    heads = WeightSource(weights, prefix="")
    if not heads.has("lm_loss.bias"):
        return backbone, None, [], source.used, source.notes
    decoder = untied_decoder(heads, "lm_loss.weight", backbone.token_embedding.embeddings.numpy(), config)
    pretrainer = XLNetPretrainer(backbone, tie_decoder=decoder is None)
    head = pretrainer.get_layer("plm_head")
    assign(head.bias, heads.get("lm_loss.bias"), "lm_loss.bias")
    load_decoder(head, decoder, "lm_loss.weight")
    return backbone, pretrainer, ["plm"], source.used | heads.used, source.notes + heads.notes
