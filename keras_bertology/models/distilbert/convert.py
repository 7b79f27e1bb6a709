"""Hugging Face DistilBERT checkpoints (DistilBertModel, DistilBertForMaskedLM) into a `BertBackbone`
without token types or pooler and the family's pretrainer holding the masked-LM head.

transformers names DistilBERT's modules its own way (`transformer.layer.N.attention.q_lin`,
`sa_layer_norm`, `ffn.lin1`, `vocab_transform`, `vocab_projector`) and its config too (`dim`,
`n_layers`, `hidden_dim`, `activation`); the layers are BERT's.
"""

from keras_bertology.convert.hf_weights import (
    WeightSink,
    WeightSource,
    assign,
    check_sizes,
    hf_activation,
    load_decoder,
    load_dense,
    load_layer_norm,
    untied_decoder,
)
from keras_bertology.errors import CheckpointError

_SIZES = ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim", "max_position_embeddings")
LAYER_NORM_EPSILON = 1e-12  # transformers' DistilBERT fixes it


def backbone_kwargs(config):
    """`BertBackbone` kwargs of a DistilBertConfig, checked."""
    from keras_bertology.layers.activations import HF_ACTIVATIONS

    check_sizes(config, _SIZES)
    if config["dim"] % config["n_heads"]:
        raise CheckpointError(f"config.json: dim {config['dim']} is not divisible by n_heads {config['n_heads']}")
    activation = config.get("activation", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"activation {activation!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}")
    return dict(vocab_size=config["vocab_size"], num_layers=config["n_layers"], num_heads=config["n_heads"],
                hidden_size=config["dim"], intermediate_size=config["hidden_dim"],
                activation=HF_ACTIVATIONS[activation], max_positions=config["max_position_embeddings"],
                dropout=config.get("dropout", 0.1), attention_dropout=config.get("attention_dropout", 0.1),
                layer_norm_epsilon=LAYER_NORM_EPSILON, initializer_range=config.get("initializer_range", 0.02),
                use_pooler=False, num_segments=0)


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from a DistilBERT checkpoint."""
    backbone = family.backbone_cls(**backbone_kwargs(config))
    source = WeightSource(weights, prefix="distilbert.")
    notes = []
    embeddings = backbone.get_layer("embeddings")
    assign(embeddings.token_embedding.embeddings, source.get("embeddings.word_embeddings.weight"), "word_embeddings")
    assign(embeddings.position_embedding.embeddings, source.get("embeddings.position_embeddings.weight"),
           "position_embeddings")
    if config.get("sinusoidal_pos_embds"):
        notes.append("sinusoidal_pos_embds: the sinusoids were imported as position embeddings, which training "
                     "here updates (transformers keeps them fixed)")
    load_layer_norm(embeddings.layer_norm, source, "embeddings.LayerNorm")
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"transformer.layer.{index}"
        for dense, name in _attention_denses(block):
            load_dense(dense, source, f"{prefix}.attention.{name}")
        load_layer_norm(block.attention_norm, source, f"{prefix}.sa_layer_norm")
        load_dense(block.intermediate_dense, source, f"{prefix}.ffn.lin1")
        load_dense(block.output_dense, source, f"{prefix}.ffn.lin2")
        load_layer_norm(block.output_norm, source, f"{prefix}.output_layer_norm")
    used = set(source.used)
    if "vocab_transform.weight" not in weights:
        return backbone, None, [], used, notes
    heads = WeightSource(weights, prefix="")
    decoder = untied_decoder(heads, "vocab_projector.weight", backbone.token_embedding.embeddings.numpy(), config)
    pretrainer = family.pretrainer_cls(backbone, tie_decoder=decoder is None)
    head = pretrainer.get_layer("mlm_head")
    load_dense(head.transform, heads, "vocab_transform")
    load_layer_norm(head.layer_norm, heads, "vocab_layer_norm")
    assign(head.output_bias, heads.get("vocab_projector.bias"), "vocab_projector.bias")
    load_decoder(head, decoder, "vocab_projector.weight")
    return backbone, pretrainer, ["mlm"], used | heads.used, notes + heads.notes


def export(family, run):
    """`HFExport` of a DistilBERT run: DistilBertForMaskedLM (DistilBertModel without a head) with
    DistilBertTokenizer; a student of RoBERTa (a byte-level BPE vocabulary) as RobertaForMaskedLM, the
    layout distilroberta-base is published in. The teacher inside the pretrainer is never exported."""
    from keras_bertology.convert.hf_export import HFExport, find_layer
    from keras_bertology.models.bert.convert import export_roberta

    if run.tokenizer is not None and run.tokenizer.type_name == "byte_bpe":
        return export_roberta(family, run)
    backbone = run.backbone
    config = backbone.get_config()
    _check_exportable(backbone, config)
    hf_config = dict(model_type="distilbert", vocab_size=config["vocab_size"], dim=config["hidden_size"],
                     n_layers=config["num_layers"], n_heads=config["num_heads"], hidden_dim=config["intermediate_size"],
                     activation=hf_activation(config["activation"]), max_position_embeddings=config["max_positions"],
                     dropout=config["dropout"], attention_dropout=config["attention_dropout"],
                     initializer_range=config["initializer_range"], sinusoidal_pos_embds=False)
    if run.tokenizer is not None:
        hf_config["pad_token_id"] = run.tokenizer.pad_id
    head = find_layer(run.pretrainer, "mlm_head")
    architecture = "DistilBertForMaskedLM" if head is not None else "DistilBertModel"
    sink = WeightSink(prefix="distilbert." if head is not None else "")
    embeddings = backbone.get_layer("embeddings")
    sink.put("embeddings.word_embeddings.weight", embeddings.token_embedding.embeddings)
    sink.put("embeddings.position_embeddings.weight", embeddings.position_embedding.embeddings)
    sink.layer_norm(embeddings.layer_norm, "embeddings.LayerNorm")
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"transformer.layer.{index}"
        for dense, name in _attention_denses(block):
            sink.dense(dense, f"{prefix}.attention.{name}")
        sink.layer_norm(block.attention_norm, f"{prefix}.sa_layer_norm")
        sink.dense(block.intermediate_dense, f"{prefix}.ffn.lin1")
        sink.dense(block.output_dense, f"{prefix}.ffn.lin2")
        sink.layer_norm(block.output_norm, f"{prefix}.output_layer_norm")
    if head is not None:
        if hf_activation(head.activation, "MLM head activation") != hf_config["activation"]:
            raise CheckpointError(f"the MLM head computes {head.activation!r} and the encoder {config['activation']!r}: "
                                  "transformers' DistilBERT computes both with one activation")
        sink.dense(head.transform, "vocab_transform", prefixed=False)
        sink.layer_norm(head.layer_norm, "vocab_layer_norm", prefixed=False)
        sink.put("vocab_projector.bias", head.output_bias, prefixed=False)
        if not head.tie_decoder:
            hf_config["tie_word_embeddings"] = False
            sink.put("vocab_projector.weight", head.decoder_kernel.numpy().T, prefixed=False)
    return HFExport(architecture, hf_config, sink.tensors, {"wordpiece": "DistilBertTokenizer"})


def _attention_denses(block):
    attention = block.attention
    return ((attention.query_dense, "q_lin"), (attention.key_dense, "k_lin"), (attention.value_dense, "v_lin"),
            (attention.output_dense, "out_lin"))


def _check_exportable(backbone, config):
    """What transformers' DistilBERT cannot hold is refused: token types, a pooler, another attention or
    LayerNorm epsilon, a pre-LN or causal encoder."""
    problems = [text for wrong, text in (
        (config["num_segments"], "token types"), (backbone.use_pooler, "a pooler"),
        (config.get("attention_type", "full") != "full", f"{config.get('attention_type')} attention"),
        (config["layer_norm_epsilon"] != LAYER_NORM_EPSILON, f"LayerNorm epsilon {config['layer_norm_epsilon']}"),
        (config.get("norm_first") or config.get("causal"), "a pre-LN or causal encoder")) if wrong]
    if problems:
        raise CheckpointError(f"transformers' DistilBERT has no place for {', '.join(problems)} (epsilon fixed at "
                              f"{LAYER_NORM_EPSILON})")
