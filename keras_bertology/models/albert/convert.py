"""Hugging Face ALBERT checkpoints (AlbertModel, AlbertForPreTraining, AlbertForMaskedLM, task models)."""

from keras_bertology.convert.hf_weights import (
    WeightSource,
    assign,
    check_sizes,
    decoder_bias,
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
