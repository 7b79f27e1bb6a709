"""Hugging Face ALBERT checkpoints (AlbertModel, AlbertForPreTraining, AlbertForMaskedLM, task models)."""

from keras_bertology.convert.hf_weights import (
    WeightSink,
    WeightSource,
    assign,
    check_sizes,
    decoder_bias,
    hf_activation,
    load_decoder,
    load_dense,
    load_layer_norm,
    rename_legacy_layer_norm,
    untied_decoder,
)
from keras_bertology.errors import CheckpointError

_REQUIRED_SIZES = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size", "max_position_embeddings", "num_hidden_groups", "inner_group_num")


def backbone_kwargs_from_hf(config, use_pooler=True):
    """AlbertBackbone kwargs of a Hugging Face ALBERT config."""
    from keras_bertology.layers.activations import HF_ACTIVATIONS

    check_sizes(config, _REQUIRED_SIZES)
    if config["num_hidden_groups"] > config["num_hidden_layers"]:
        raise CheckpointError("config.json: num_hidden_groups must not exceed num_hidden_layers")
    hidden_act = config.get("hidden_act", "gelu_new")
    if hidden_act not in HF_ACTIVATIONS:
        raise CheckpointError(f"hidden_act {hidden_act!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError("only absolute position embeddings are supported")
    return dict(
        vocab_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"], embedding_size=config["embedding_size"],
        num_groups=config["num_hidden_groups"], inner_group_num=config["inner_group_num"],
        activation=HF_ACTIVATIONS[hidden_act], max_positions=config["max_position_embeddings"],
        num_segments=config.get("type_vocab_size", 2), use_pooler=use_pooler, dropout=config.get("hidden_dropout_prob", 0.0),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.0),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12), initializer_range=config.get("initializer_range", 0.02),
    )


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from an ALBERT checkpoint."""
    weights = rename_legacy_layer_norm(weights)
    use_pooler = "albert.pooler.weight" in weights or "pooler.weight" in weights
    backbone = family.backbone_cls(**backbone_kwargs_from_hf(config, use_pooler))
    source = WeightSource(weights, prefix="albert.")
    _load_backbone(backbone, source)
    heads, pretrainer = ["pooler"] if use_pooler else [], None
    notes = []
    if "predictions.dense.weight" in weights:
        sop = "sop_classifier.classifier.weight" in weights
        head_source = WeightSource(weights, prefix="")
        decoder = untied_decoder(head_source, "predictions.decoder.weight",
                                 backbone.token_embedding.embeddings.numpy(), config)
        pretrainer = family.pretrainer_cls(backbone, sentence_task="sop" if sop else None,
                                           tie_decoder=decoder is None)
        _load_heads(pretrainer, head_source, sop, decoder, config)
        source.used |= head_source.used
        notes = head_source.notes
        heads += ["mlm", "sop"] if sop else ["mlm"]
    return backbone, pretrainer, heads, source.used, notes


def _load_backbone(backbone, source):
    embeddings = backbone.get_layer("embeddings")
    assign(embeddings.token_embedding.embeddings, source.get("embeddings.word_embeddings.weight"), "word_embeddings")
    assign(embeddings.position_embedding.embeddings, source.get("embeddings.position_embeddings.weight"),
           "position_embeddings")
    if embeddings.segment_embedding is not None:
        assign(embeddings.segment_embedding.embeddings, source.get("embeddings.token_type_embeddings.weight"),
               "token_type_embeddings")
    load_layer_norm(embeddings.layer_norm, source, "embeddings.LayerNorm")
    load_dense(backbone.get_layer("embedding_projection"), source, "encoder.embedding_hidden_mapping_in")
    stack = backbone.get_layer("encoder")
    for group in range(stack.num_groups):
        for inner, block in enumerate(stack.group_blocks(group)):
            _load_block(block, source, f"encoder.albert_layer_groups.{group}.albert_layers.{inner}")
    if backbone.use_pooler:
        load_dense(backbone.get_layer("pooler"), source, "pooler")


def _load_block(block, source, prefix):
    attention = block.attention
    for dense, name in ((attention.query_dense, "query"), (attention.key_dense, "key"),
                        (attention.value_dense, "value"), (attention.output_dense, "dense")):
        load_dense(dense, source, f"{prefix}.attention.{name}")
    load_layer_norm(block.attention_norm, source, f"{prefix}.attention.LayerNorm")
    load_dense(block.intermediate_dense, source, f"{prefix}.ffn")
    load_dense(block.output_dense, source, f"{prefix}.ffn_output")
    load_layer_norm(block.output_norm, source, f"{prefix}.full_layer_layer_norm")


def _load_heads(pretrainer, source, sop, decoder, config):
    head = pretrainer.get_layer("mlm_head")
    load_dense(head.transform, source, "predictions.dense")
    load_layer_norm(head.layer_norm, source, "predictions.LayerNorm")
    assign(head.output_bias, decoder_bias(source, "predictions", config), "predictions.bias")
    load_decoder(head, decoder, "predictions.decoder.weight")
    if sop:
        load_dense(pretrainer.get_layer("sop_head").classifier, source, "sop_classifier.classifier")


def export(family, run):
    """`HFExport` of an ALBERT run: AlbertForPreTraining (MLM + SOP), AlbertForMaskedLM (MLM only; an
    NSP head of the ablation is dropped with a note), or AlbertModel."""
    from keras_bertology.convert.hf_export import HFExport, dropped_heads_note, find_layer

    backbone, pretrainer, tokenizer = run.backbone, run.pretrainer, run.tokenizer
    mlm_head, sop_head = find_layer(pretrainer, "mlm_head"), find_layer(pretrainer, "sop_head")
    if mlm_head is None:
        architecture, sink = "AlbertModel", WeightSink()
    else:
        architecture = "AlbertForPreTraining" if sop_head is not None else "AlbertForMaskedLM"
        sink = WeightSink(prefix="albert.")
    config = _export_config(backbone.get_config())
    if tokenizer is not None:
        config.update(pad_token_id=tokenizer.pad_id, bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    notes = dropped_heads_note(pretrainer, ("mlm_head", "sop_head"), architecture)
    _export_backbone(sink, backbone, pooler=architecture != "AlbertForMaskedLM", notes=notes,
                     architecture=architecture)
    if mlm_head is not None:
        from keras_bertology.models.bert.convert import export_mlm_head

        export_mlm_head(sink, mlm_head, "predictions", "predictions.dense", "predictions.LayerNorm",
                        config["hidden_act"], config)
    if sop_head is not None:
        sink.dense(sop_head.classifier, "sop_classifier.classifier", prefixed=False)
    return HFExport(architecture, config, sink.tensors, {"sentencepiece": "AlbertTokenizer"}, notes)


def _export_config(config):
    return dict(
        model_type="albert", vocab_size=config["vocab_size"], embedding_size=config["embedding_size"],
        hidden_size=config["hidden_size"], num_hidden_layers=config["num_layers"],
        num_hidden_groups=config["num_groups"], inner_group_num=config["inner_group_num"],
        num_attention_heads=config["num_heads"], intermediate_size=config["intermediate_size"],
        hidden_act=hf_activation(config["activation"]), hidden_dropout_prob=config["dropout"],
        attention_probs_dropout_prob=config["attention_dropout"], max_position_embeddings=config["max_positions"],
        type_vocab_size=max(config["num_segments"], 1), initializer_range=config["initializer_range"],
        layer_norm_eps=config["layer_norm_epsilon"],
    )


def _export_backbone(sink, backbone, pooler, notes, architecture):
    """The inverse of `_load_backbone`; the pooler where the class has one."""
    from keras_bertology.models.bert.convert import export_embeddings, export_pooler

    export_embeddings(sink, backbone)
    sink.dense(backbone.get_layer("embedding_projection"), "encoder.embedding_hidden_mapping_in")
    stack = backbone.get_layer("encoder")
    for group in range(stack.num_groups):
        for inner, block in enumerate(stack.group_blocks(group)):
            _export_block(sink, block, f"encoder.albert_layer_groups.{group}.albert_layers.{inner}")
    export_pooler(sink, backbone, "pooler", pooler, architecture, notes)


def _export_block(sink, block, prefix):
    attention = block.attention
    for dense, name in ((attention.query_dense, "query"), (attention.key_dense, "key"),
                        (attention.value_dense, "value"), (attention.output_dense, "dense")):
        sink.dense(dense, f"{prefix}.attention.{name}")
    sink.layer_norm(block.attention_norm, f"{prefix}.attention.LayerNorm")
    sink.dense(block.intermediate_dense, f"{prefix}.ffn")
    sink.dense(block.output_dense, f"{prefix}.ffn_output")
    sink.layer_norm(block.output_norm, f"{prefix}.full_layer_layer_norm")
