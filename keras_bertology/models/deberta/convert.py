"""Hugging Face DeBERTa checkpoints (`DebertaModel`, `DebertaV2Model` and their masked LMs) into
`DebertaBackbone`.

v2/v3 name each attention's projections `query_proj`, `key_proj`, `value_proj`
(and, without share_att_key, `pos_key_proj`, `pos_query_proj`); v1 fuses the
three into `in_proj` [3 x heads x width, hidden], interleaved by head (each
head's query, key and value rows in turn), with `q_bias` and `v_bias` beside it
and no key bias, and names its position projections `pos_proj` (no bias) and
`pos_q_proj`. The relative table is `encoder.rel_embeddings`.
"""

import numpy as np

from keras_bertology.convert.hf_weights import WeightSource, assign, check_sizes, load_dense, load_layer_norm
from keras_bertology.errors import CheckpointError
from keras_bertology.models.bert.convert import export_block_branches, load_block_branches

_REQUIRED_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                   "max_position_embeddings")


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from a DeBERTa checkpoint: the
    masked LM's head too where it has one (`cls.predictions`, BERT's, or v2's `lm_predictions.lm_head`,
    always tied), as a `DebertaPretrainer` without the enhanced mask decoder, which transformers does not
    compute."""
    from keras_bertology.models.bert.convert import has_mlm_head, load_hf_pretrainer
    from keras_bertology.models.deberta.pretrainer import DebertaPretrainer

    backbone = family.backbone_cls(**backbone_kwargs(config))
    source = WeightSource(weights, prefix="deberta.")
    load_backbone(backbone, source, config)
    if has_mlm_head(weights):
        pretrainer, used, notes = load_hf_pretrainer(DebertaPretrainer, backbone, weights, config,
                                                     enhanced_mask_decoder=False)
    elif _V2_HEAD + ".dense.weight" in weights:
        pretrainer = DebertaPretrainer(backbone, enhanced_mask_decoder=False)
        heads = WeightSource(weights, prefix="")
        head = pretrainer.get_layer("mlm_head")
        load_dense(head.transform, heads, f"{_V2_HEAD}.dense")
        load_layer_norm(head.layer_norm, heads, f"{_V2_HEAD}.LayerNorm")
        assign(head.output_bias, heads.get(f"{_V2_HEAD}.bias"), f"{_V2_HEAD}.bias")
        used, notes = heads.used, heads.notes
    else:
        return backbone, None, [], source.used, []
    return backbone, pretrainer, ["mlm"], source.used | used, notes


# DebertaV2ForMaskedLM's head when its config says legacy: false (the original's name; decoder tied).
_V2_HEAD = "lm_predictions.lm_head"


def backbone_kwargs(config):
    """`DebertaBackbone` kwargs of a transformers DebertaConfig / DebertaV2Config dict, checked."""
    from keras_bertology.layers.activations import HF_ACTIVATIONS

    check_sizes(config, _REQUIRED_SIZES)
    version_2 = config.get("model_type") == "deberta-v2"
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    if hidden % heads or config.get("attention_head_size", hidden // heads) != hidden // heads:
        raise CheckpointError(f"config.json: hidden_size {hidden} must be num_attention_heads ({heads}) x the "
                              "head width (attention_head_size)")
    activation = config.get("hidden_act", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"hidden_act {activation!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}")
    conv_activation = config.get("conv_act", "tanh")
    if conv_activation not in HF_ACTIVATIONS and conv_activation != "tanh":
        raise CheckpointError(f"conv_act {conv_activation!r} is not supported; supported: tanh, "
                              f"{', '.join(HF_ACTIVATIONS)}")
    if not config.get("relative_attention", False):
        raise CheckpointError("config.json: relative_attention is false: that is BERT's attention, not DeBERTa's "
                              "(every released DeBERTa sets it)")
    if config.get("talking_head"):
        raise CheckpointError("config.json: talking_head (mixing the heads' scores) is not supported")
    terms = config.get("pos_att_type") or []
    terms = [term.strip() for term in (terms.lower().split("|") if isinstance(terms, str) else terms)]
    unknown = sorted(set(terms) - {"c2p", "p2c"})
    if unknown:
        raise CheckpointError(f"config.json: pos_att_type {unknown} is not supported; supported: c2p, p2c")
    max_relative = config.get("max_relative_positions", -1)
    buckets = config.get("position_buckets", -1) if version_2 else -1
    norms = [part.strip() for part in str(config.get("norm_rel_ebd", "none")).lower().split("|")]
    return dict(
        vocab_size=config["vocab_size"], num_layers=config["num_hidden_layers"], num_heads=heads, hidden_size=hidden,
        intermediate_size=config["intermediate_size"], activation=HF_ACTIVATIONS[activation],
        max_positions=config["max_position_embeddings"],
        position_biased_input=bool(config.get("position_biased_input", True)),
        num_segments=config.get("type_vocab_size", 0), position_terms=[t for t in ("c2p", "p2c") if t in terms],
        max_relative_positions=max_relative if max_relative >= 1 else None,
        position_buckets=max(buckets, 0), share_attention_key=bool(version_2 and config.get("share_att_key", False)),
        norm_relative_embeddings=version_2 and "layer_norm" in norms, position_key_bias=version_2,
        content_key_bias=version_2, conv_kernel_size=config.get("conv_kernel_size", 0) if version_2 else 0,
        conv_groups=config.get("conv_groups", 1), conv_activation=HF_ACTIVATIONS.get(conv_activation, "tanh"),
        embedding_size=config.get("embedding_size") if config.get("embedding_size") != hidden else None,
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-7), initializer_range=config.get("initializer_range", 0.02))


def load_backbone(backbone, source, config):
    """Copy a DeBERTa checkpoint's encoder from `source` (a `WeightSource`) into `backbone`."""
    embeddings = backbone.get_layer("embeddings")
    assign(embeddings.token_embedding.embeddings, source.get("embeddings.word_embeddings.weight"),
           "embeddings.word_embeddings.weight")
    if embeddings.position_embedding is not None:
        assign(embeddings.position_embedding.embeddings, source.get("embeddings.position_embeddings.weight"),
               "embeddings.position_embeddings.weight")
    if embeddings.segment_embedding is not None:
        assign(embeddings.segment_embedding.embeddings, source.get("embeddings.token_type_embeddings.weight"),
               "embeddings.token_type_embeddings.weight")
    if backbone.embedding_size:
        assign(backbone.get_layer("embedding_projection").kernel, source.get("embeddings.embed_proj.weight").T,
               "embeddings.embed_proj.weight")
    load_layer_norm(backbone.get_layer("embedding_norm"), source, "embeddings.LayerNorm")
    table = backbone.get_layer("relative_embeddings")
    assign(table.embeddings, source.get("encoder.rel_embeddings.weight"), "encoder.rel_embeddings.weight")
    if table.norm is not None:
        load_layer_norm(table.norm, source, "encoder.LayerNorm")
    if backbone.conv_kernel_size:
        conv = backbone.get_layer("conv")
        assign(conv.kernel, np.transpose(source.get("encoder.conv.conv.weight"), (2, 1, 0)), "encoder.conv.conv.weight")
        assign(conv.bias, source.get("encoder.conv.conv.bias"), "encoder.conv.conv.bias")
        load_layer_norm(backbone.get_layer("conv_norm"), source, "encoder.conv.LayerNorm")
    for index in range(backbone.num_layers):
        _load_block(backbone.get_layer(f"encoder_block_{index}"), source, f"encoder.layer.{index}")


def _load_block(block, source, prefix):
    attention, own = block.attention, f"{prefix}.attention.self"
    if source.has(f"{own}.in_proj.weight"):  # v1
        _load_fused_projections(attention, source, own)
        if attention.position_key is not None:
            assign(attention.position_key.kernel, source.get(f"{own}.pos_proj.weight").T, f"{own}.pos_proj.weight")
        if attention.position_query is not None:
            load_dense(attention.position_query, source, f"{own}.pos_q_proj")
    else:
        for dense, name in ((attention.query_dense, "query_proj"), (attention.key_dense, "key_proj"),
                            (attention.value_dense, "value_proj"), (attention.position_key, "pos_key_proj"),
                            (attention.position_query, "pos_query_proj")):
            if dense is not None:
                load_dense(dense, source, f"{own}.{name}")
    load_block_branches(block, source, prefix)


def _load_fused_projections(attention, source, own):
    """v1's in_proj: per head, its query, key and value rows in turn."""
    fused = np.asarray(source.get(f"{own}.in_proj.weight"))
    heads = attention.num_heads
    query, key, value = np.split(fused.reshape(heads, 3, -1, fused.shape[-1]), 3, axis=1)
    for dense, rows, name in ((attention.query_dense, query, "query"), (attention.key_dense, key, "key"),
                              (attention.value_dense, value, "value")):
        assign(dense.kernel, rows.reshape(-1, fused.shape[-1]).T, f"{own}.in_proj.weight ({name} rows)")
    assign(attention.query_dense.bias, source.get(f"{own}.q_bias"), f"{own}.q_bias")
    assign(attention.value_dense.bias, source.get(f"{own}.v_bias"), f"{own}.v_bias")


# Export: the inverse of the import above (`bertology export --format hf`).


def export(family, run):
    """`HFExport` of a DeBERTa run: `DebertaForMaskedLM` with the MLM head (read by transformers on the
    last layer: the enhanced mask decoder is dropped, with a note), else `DebertaModel` (a DeBERTa-v3
    discriminator: its detection head and generator are dropped, with a note); a v2 layout (log
    buckets, shared keys, the normed table, the convolution, biased keys) as `DebertaV2*`."""
    from keras_bertology.convert.hf_export import HFExport, dropped_heads_note, find_layer
    from keras_bertology.convert.hf_weights import WeightSink, hf_activation
    from keras_bertology.models.bert.convert import export_mlm_head

    backbone, pretrainer, tokenizer = run.backbone, run.pretrainer, run.tokenizer
    c = backbone.get_config()
    version_2 = c["content_key_bias"]
    if version_2 != c["position_key_bias"] or (not version_2 and (
            c["position_buckets"] or c["share_attention_key"] or c["norm_relative_embeddings"]
            or c["conv_kernel_size"])):
        raise CheckpointError("--format hf: this DeBERTa mixes v1's unbiased keys with v2's layout; transformers' "
                              "DebertaModel and DebertaV2Model each have one")
    config = dict(
        model_type="deberta-v2" if version_2 else "deberta", vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"], num_hidden_layers=c["num_layers"], num_attention_heads=c["num_heads"],
        intermediate_size=c["intermediate_size"], hidden_act=hf_activation(c["activation"]),
        max_position_embeddings=c["max_positions"], relative_attention=True, pos_att_type=list(c["position_terms"]),
        max_relative_positions=c["max_relative_positions"] or -1, position_biased_input=c["position_biased_input"],
        type_vocab_size=c["num_segments"], layer_norm_eps=c["layer_norm_epsilon"], hidden_dropout_prob=c["dropout"],
        attention_probs_dropout_prob=c["attention_dropout"], initializer_range=c["initializer_range"])
    if c["embedding_size"]:
        config["embedding_size"] = c["embedding_size"]
    if version_2:
        config.update(position_buckets=c["position_buckets"] or -1, share_att_key=c["share_attention_key"],
                      norm_rel_ebd="layer_norm" if c["norm_relative_embeddings"] else "none", legacy=True,
                      conv_kernel_size=c["conv_kernel_size"], conv_groups=c["conv_groups"],
                      conv_act="tanh" if c["conv_activation"] == "tanh" else hf_activation(c["conv_activation"]))
    if tokenizer is not None:
        config["pad_token_id"] = tokenizer.pad_id
    prefix = "DebertaV2" if version_2 else "Deberta"
    # A masked LM over this encoder; a DeBERTa-v3 generator's head reads another encoder.
    serves_mlm = pretrainer is not None and pretrainer.masked_lm_model() is not None
    mlm_head = find_layer(pretrainer, "mlm_head") if serves_mlm else None
    architecture = f"{prefix}ForMaskedLM" if mlm_head is not None else f"{prefix}Model"
    sink = WeightSink(prefix="deberta." if mlm_head is not None else "")
    _export_backbone(sink, backbone)
    notes = dropped_heads_note(pretrainer, ("mlm_head",) if serves_mlm else (), architecture)
    if getattr(pretrainer, "generator", None) is not None:
        notes.append("dropped the generator: the discriminator is the model DeBERTa-v3 serves")
    if mlm_head is not None:
        export_mlm_head(sink, mlm_head, "cls.predictions", "cls.predictions.transform.dense",
                        "cls.predictions.transform.LayerNorm", config["hidden_act"], config)
        if getattr(pretrainer, "enhanced_mask_decoder", False):
            notes.append(f"the enhanced mask decoder and its position table are dropped: transformers' "
                         f"{architecture} reads the last layer's states")
    return HFExport(architecture, config, sink.tensors,
                    {"byte_bpe": "DebertaTokenizer", "sentencepiece": "DebertaV2Tokenizer"}, notes)


def _export_backbone(sink, backbone):
    """The inverse of `load_backbone`: v1's query, key and value rows fused by head into in_proj."""
    embeddings = backbone.get_layer("embeddings")
    sink.put("embeddings.word_embeddings.weight", embeddings.token_embedding.embeddings)
    if embeddings.position_embedding is not None:
        sink.put("embeddings.position_embeddings.weight", embeddings.position_embedding.embeddings)
    if embeddings.segment_embedding is not None:
        sink.put("embeddings.token_type_embeddings.weight", embeddings.segment_embedding.embeddings)
    if backbone.embedding_size:
        sink.put("embeddings.embed_proj.weight", backbone.get_layer("embedding_projection").kernel.numpy().T)
    sink.layer_norm(backbone.get_layer("embedding_norm"), "embeddings.LayerNorm")
    table = backbone.get_layer("relative_embeddings")
    sink.put("encoder.rel_embeddings.weight", table.embeddings)
    if table.norm is not None:
        sink.layer_norm(table.norm, "encoder.LayerNorm")
    if backbone.conv_kernel_size:
        conv = backbone.get_layer("conv")
        sink.put("encoder.conv.conv.weight", np.transpose(conv.kernel.numpy(), (2, 1, 0)))
        sink.put("encoder.conv.conv.bias", conv.bias)
        sink.layer_norm(backbone.get_layer("conv_norm"), "encoder.conv.LayerNorm")
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"encoder.layer.{index}"
        attention, own = block.attention, f"{prefix}.attention.self"
        if attention.content_key_bias:
            for dense, name in ((attention.query_dense, "query_proj"), (attention.key_dense, "key_proj"),
                                (attention.value_dense, "value_proj"), (attention.position_key, "pos_key_proj"),
                                (attention.position_query, "pos_query_proj")):
                if dense is not None:
                    sink.dense(dense, f"{own}.{name}")
        else:
            heads = attention.num_heads
            rows = [dense.kernel.numpy().T.reshape(heads, 1, -1, dense.kernel.shape[0])
                    for dense in (attention.query_dense, attention.key_dense, attention.value_dense)]
            sink.put(f"{own}.in_proj.weight", np.concatenate(rows, axis=1).reshape(-1, rows[0].shape[-1]))
            sink.put(f"{own}.q_bias", attention.query_dense.bias)
            sink.put(f"{own}.v_bias", attention.value_dense.bias)
            if attention.position_key is not None:
                sink.put(f"{own}.pos_proj.weight", attention.position_key.kernel.numpy().T)
            if attention.position_query is not None:
                sink.dense(attention.position_query, f"{own}.pos_q_proj")
        export_block_branches(sink, block, prefix)
