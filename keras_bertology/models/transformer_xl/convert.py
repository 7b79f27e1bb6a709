"""Transformer-XL checkpoints in the Hugging Face layout (`TransfoXLModel`, `TransfoXLLMHeadModel`, model_type
"transfo-xl", as transformers 4 saved them; transformers 5 no longer has the model).

The fused `qkv_net` is split into query, key and value; `r_net` becomes the
relative terms' position kernel; u and v (`r_w_bias`, `r_r_bias`) are read per
layer and kept as one shared set where every layer's are equal. The adaptive
softmax must reuse the input tables (tie_weight, as every released model);
its projections are tied where they equal the input's. transformers 4 reads
the head's cluster logits in cutoff order, the original PyTorch code (and
this library) from the end: the rows are reversed on import so the numbers
are transformers'.
"""

import numpy as np

from keras_bertology.convert.hf_weights import WeightSource, assign, check_sizes, load_dense, load_layer_norm
from keras_bertology.errors import CheckpointError

# Switches of TransfoXLConfig with the only value this family builds.
_SUPPORTED = {"attn_type": 0, "pre_lnorm": False, "sample_softmax": -1}


def backbone_kwargs(config):
    """`TransformerXLBackbone` kwargs of a transfo-xl config.json, checked."""
    check_sizes(config, ("vocab_size", "d_model", "n_head", "d_head", "d_inner", "n_layer"))
    for key, value in _SUPPORTED.items():
        if config.get(key, value) != value:
            raise CheckpointError(f"config.json: {key}={config[key]!r} is not supported (only {value!r})")
    hidden, heads = config["d_model"], config["n_head"]
    if heads * config["d_head"] != hidden:
        raise CheckpointError(f"config.json: n_head x d_head = {heads * config['d_head']} must equal d_model "
                              f"{hidden}")
    cutoffs = [c for c in config.get("cutoffs", []) if c < config["vocab_size"]] if config.get("adaptive", True) \
        else []
    return dict(vocab_size=config["vocab_size"], num_layers=config["n_layer"], num_heads=heads, hidden_size=hidden,
                intermediate_size=config["d_inner"], cutoffs=cutoffs, div_val=config.get("div_val", 1),
                embedding_size=config.get("d_embed") or hidden, dropout=config.get("dropout", 0.1),
                attention_dropout=config.get("dropatt", 0.0),
                layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
                initializer_range=config.get("init_std", 0.02), untie_r=config.get("untie_r", True),
                clamp_len=config.get("clamp_len", -1))


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from a transfo-xl checkpoint."""
    kwargs = backbone_kwargs(config)
    source = WeightSource(weights, prefix="transformer.")
    biases = np.asarray([[_bias(source, index, name) for name in ("r_w_bias", "r_r_bias")]
                         for index in range(kwargs["num_layers"])])
    for name in ("r_w_bias", "r_r_bias", "pos_emb.inv_freq"):  # shared copies and a buffer
        if source.has(name):
            source.get(name)
    kwargs["untie_r"] = not all(np.array_equal(layer, biases[0]) for layer in biases)
    backbone = family.backbone_cls(**kwargs)
    encoder = backbone.encoder
    assign(encoder.relative_biases, biases if kwargs["untie_r"] else biases[0], "r_w_bias, r_r_bias")
    _load_embedding(encoder.embedding, source)
    for index, block in enumerate(encoder.blocks):
        _load_layer(block, source, f"layers.{index}.", kwargs["hidden_size"])
    notes = []
    if config.get("same_length"):
        notes.append("config.json sets same_length=true, an evaluation setting: the import serves every position "
                     "with all the keys before it")
    heads = WeightSource(weights, prefix="")
    if not heads.has("crit.out_layers.0.bias"):
        return backbone, None, [], source.used, notes
    pretrainer = family.pretrainer_cls(backbone, tie_projections=_tied_projections(encoder.embedding, heads))
    _load_softmax(pretrainer.get_layer("clm_head"), heads)
    return backbone, pretrainer, ["clm"], source.used | heads.used, notes


def _bias(source, index, name):
    """Layer `index`'s u or v: its own tensor, or the shared one (a saved file keeps one of tied copies)."""
    own = f"layers.{index}.dec_attn.{name}"
    return source.get(own if source.has(own) or not source.has(name) else name)


def _load_embedding(embedding, source):
    for index, table in enumerate(embedding.embeddings):
        assign(table, source.get(f"word_emb.emb_layers.{index}.weight"), f"word_emb.emb_layers.{index}.weight")
    for index, projection in enumerate(embedding.projections):
        assign(projection, np.asarray(source.get(f"word_emb.emb_projs.{index}")).T, f"word_emb.emb_projs.{index}")


def _load_layer(block, source, prefix, hidden):
    attention = block.block.attention
    fused = np.asarray(source.get(f"{prefix}dec_attn.qkv_net.weight"))
    if fused.shape != (3 * hidden, hidden):
        raise CheckpointError(f"shape mismatch for {prefix}dec_attn.qkv_net.weight: checkpoint {fused.shape}, "
                              f"model {(3 * hidden, hidden)}")
    for part, dense in enumerate((attention.query_dense, attention.key_dense, attention.value_dense)):
        assign(dense.kernel, fused[part * hidden:(part + 1) * hidden].T, f"{prefix}dec_attn.qkv_net.weight")
    name = f"{prefix}dec_attn.o_net.weight"
    assign(attention.output_dense.kernel, np.asarray(source.get(name)).T, name)
    name = f"{prefix}dec_attn.r_net.weight"
    relative = block.relative
    assign(relative.position_kernel, np.asarray(source.get(name)).T.reshape(relative.position_kernel.shape), name)
    load_layer_norm(block.block.attention_norm, source, f"{prefix}dec_attn.layer_norm")
    load_dense(block.block.intermediate_dense, source, f"{prefix}pos_ff.CoreNet.0")
    load_dense(block.block.output_dense, source, f"{prefix}pos_ff.CoreNet.3")
    load_layer_norm(block.block.output_norm, source, f"{prefix}pos_ff.layer_norm")


def _tied_projections(embedding, heads):
    """Per cluster, whether the checkpoint's softmax projection is the input's (transformers' tie_projs):
    a copy equal to it, or none saved (a saved file keeps one of tied copies)."""
    clusters = len(embedding.cutoffs) + 1
    if not embedding.projected:
        return [False] * clusters
    return [not heads.has(f"crit.out_projs.{i}") or heads.take_if_equal(
        f"crit.out_projs.{i}", embedding.projections[0 if embedding.div_val == 1 else i].numpy().T)
        for i in range(clusters)]


def _load_softmax(head, heads):
    embedding = head.embedding
    for index, table in enumerate(embedding.embeddings):
        name = f"crit.out_layers.{index}.weight"
        if heads.has(name) and not heads.take_if_equal(name, table.numpy()):
            raise CheckpointError(f"{name} differs from the input embeddings: an untied adaptive softmax is not "
                                  "supported (Transformer-XL ties them)")
    biases = [heads.get(f"crit.out_layers.{index}.bias") for index in range(len(embedding.embeddings))]
    assign(head.bias, np.concatenate(biases), "crit.out_layers.*.bias")
    if embedding.cutoffs:
        assign(head.cluster_kernel, np.asarray(heads.get("crit.cluster_weight"))[::-1], "crit.cluster_weight")
        assign(head.cluster_bias, np.asarray(heads.get("crit.cluster_bias"))[::-1], "crit.cluster_bias")
    for index, (tied, projection) in enumerate(zip(head.tie_projections, head.projections)):
        if projection is not None and not tied:
            name = f"crit.out_projs.{index}"
            assign(projection, np.asarray(heads.get(name)).T, name)
