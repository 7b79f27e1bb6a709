"""Hugging Face BERT and RoBERTa checkpoints into `BertBackbone` / `BertPretrainer` (and RoBERTa's).

Every layout transformers writes is accepted: the bare encoder (with or
without pooler), the pretraining and masked-LM heads, and task models whose
task head is skipped; names with or without the `bert.` / `roberta.` prefix;
legacy gamma/beta LayerNorm names. ERNIE's (`ernie.`) follow BERT's rules once its
converter (`models/ernie/convert.py`) has folded the task-type table away.
"""

import numpy as np

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

SUPPORTED_MODEL_TYPES = ("bert", "roberta", "ernie")
_REQUIRED_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size", "max_position_embeddings")


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from a checkpoint of `family`."""
    _, kwargs = backbone_kwargs_from_hf(config, weights)
    backbone = family.backbone_cls(**kwargs)
    used = set(load_hf_weights_into_backbone(backbone, weights, config))
    pretrainer, heads, head_names, notes = load_pretraining_heads(family, backbone, weights, config)
    return backbone, pretrainer, ["pooler"] * backbone.use_pooler + heads, used | head_names, notes


def load_pretraining_heads(family, backbone, weights, config):
    """(pretrainer or None, heads imported, names used, notes): the family's pretrainer holding the
    checkpoint's MLM head, and its NSP head where it has one and the backbone a pooler."""
    if not has_mlm_head(weights):
        return None, [], set(), []
    nsp = has_nsp_head(weights) and backbone.use_pooler
    pretrainer, used, notes = load_hf_pretrainer(family.pretrainer_cls, backbone, weights, config,
                                                 next_sentence_prediction=nsp)
    return pretrainer, ["mlm", "nsp"] if nsp else ["mlm"], used, notes


def backbone_kwargs_from_hf(config, weights=None):
    """Map a Hugging Face config dict to `(model_type, BertBackbone kwargs)`.

    With `weights`, the pooler is built only when the checkpoint has one.
    """
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    use_pooler = model_type != "roberta" if weights is None else _has(weights, model_type, "pooler.dense.weight")
    kwargs = encoder_kwargs(config, use_pooler)
    if model_type == "roberta":
        offset = _roberta_position_offset(config)
        if kwargs["max_positions"] <= offset:
            raise CheckpointError(f"config.json: max_position_embeddings must exceed {offset} for RoBERTa")
        kwargs.update(max_positions=kwargs["max_positions"] - offset, num_segments=0)
    return model_type, kwargs


def encoder_kwargs(config, use_pooler):
    """`BertBackbone` kwargs of a BERT-shaped Hugging Face config (BERT, RoBERTa, ELECTRA), checked."""
    from keras_bertology.layers.activations import HF_ACTIVATIONS

    check_sizes(config, _REQUIRED_SIZES)
    if config["hidden_size"] % config["num_attention_heads"]:
        raise CheckpointError(
            f"config.json: hidden_size {config['hidden_size']} is not divisible by "
            f"num_attention_heads {config['num_attention_heads']}"
        )
    hidden_act = config.get("hidden_act", "gelu")
    if hidden_act not in HF_ACTIVATIONS:
        raise CheckpointError(
            f"hidden_act {hidden_act!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError("only absolute position embeddings are supported")
    if config.get("is_decoder"):  # transformers then masks attention causally
        raise CheckpointError("config.json: is_decoder=true (causal self-attention) is not supported")
    return dict(
        vocab_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        activation=HF_ACTIVATIONS[hidden_act],
        max_positions=config["max_position_embeddings"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        initializer_range=config.get("initializer_range", 0.02),
        use_pooler=use_pooler,
        num_segments=config.get("type_vocab_size", 2),
    )


def _roberta_position_offset(config):
    """RoBERTa numbers positions from padding_idx + 1; those first rows are never used."""
    return config.get("pad_token_id", 1) + 1


def _has(weights, model_type, name):
    return name in weights or f"{model_type}.{name}" in weights


def load_embeddings(backbone, source, model_type, config):
    embeddings = backbone.get_layer("embeddings")
    assign(embeddings.token_embedding.embeddings,
            source.get("embeddings.word_embeddings.weight"), "word_embeddings")
    positions = source.get("embeddings.position_embeddings.weight")
    if model_type == "roberta":
        # Drop the offset rows, and fold RoBERTa's constant token-type vector
        # into every position row: (p + t) is added the same way either way.
        positions = positions[_roberta_position_offset(config):]
        if source.has("embeddings.token_type_embeddings.weight"):
            positions = positions + source.get("embeddings.token_type_embeddings.weight")[0]
    assign(embeddings.position_embedding.embeddings, positions, "position_embeddings")
    if embeddings.segment_embedding is not None:
        assign(embeddings.segment_embedding.embeddings,
                source.get("embeddings.token_type_embeddings.weight"), "token_type_embeddings")
    load_layer_norm(embeddings.layer_norm, source, "embeddings.LayerNorm")


def load_encoder_block(block, source, index):
    prefix = f"encoder.layer.{index}"
    attention = block.attention
    load_dense(attention.query_dense, source, f"{prefix}.attention.self.query")
    load_dense(attention.key_dense, source, f"{prefix}.attention.self.key")
    load_dense(attention.value_dense, source, f"{prefix}.attention.self.value")
    load_block_branches(block, source, prefix)


def load_block_branches(block, source, prefix):
    """A post-LN block's attention output and feed-forward, as BERT-shaped layers name them (BERT,
    RoBERTa, ELECTRA, DeBERTa): `{prefix}.attention.output`, `.intermediate`, `.output`."""
    load_dense(block.attention.output_dense, source, f"{prefix}.attention.output.dense")
    load_layer_norm(block.attention_norm, source, f"{prefix}.attention.output.LayerNorm")
    load_dense(block.intermediate_dense, source, f"{prefix}.intermediate.dense")
    load_dense(block.output_dense, source, f"{prefix}.output.dense")
    load_layer_norm(block.output_norm, source, f"{prefix}.output.LayerNorm")


def load_hf_weights_into_backbone(backbone, weights, config):
    """Copy a Hugging Face encoder's tensors into `backbone`; returns the names used."""
    model_type, _ = backbone_kwargs_from_hf(config)
    source = WeightSource(rename_legacy_layer_norm(weights), prefix=f"{model_type}.")
    load_embeddings(backbone, source, model_type, config)
    for index in range(backbone.num_layers):
        load_encoder_block(backbone.get_layer(f"encoder_block_{index}"), source, index)
    if backbone.use_pooler:
        load_dense(backbone.get_layer("pooler"), source, "pooler.dense")
    return source.used


def has_mlm_head(weights):
    """Whether the checkpoint carries a masked-LM head (BertForPreTraining/MaskedLM, RobertaForMaskedLM)."""
    return "cls.predictions.transform.dense.weight" in weights or "lm_head.dense.weight" in weights


def has_nsp_head(weights):
    """Whether the checkpoint carries BERT's next-sentence head (BertForPreTraining)."""
    return "cls.seq_relationship.weight" in weights


def load_hf_pretrainer(pretrainer_cls, backbone, weights, config, **kwargs):
    """`(pretrainer, names used, notes)`: `pretrainer_cls(backbone, **kwargs)` holding the checkpoint's
    MLM head (and NSP head, when `kwargs` asks for it), its decoder tied to the word embeddings unless
    the checkpoint's differs (which transformers computes with)."""
    source = WeightSource(rename_legacy_layer_norm(weights), prefix="")
    name = "lm_head" if source.has("lm_head.dense.weight") else "cls.predictions"
    decoder = untied_decoder(source, f"{name}.decoder.weight", backbone.token_embedding.embeddings.numpy(), config)
    pretrainer = pretrainer_cls(backbone, tie_decoder=decoder is None, **kwargs)
    head = pretrainer.get_layer("mlm_head")
    if name == "lm_head":
        load_dense(head.transform, source, "lm_head.dense")
        load_layer_norm(head.layer_norm, source, "lm_head.layer_norm")
    else:
        load_dense(head.transform, source, "cls.predictions.transform.dense")
        load_layer_norm(head.layer_norm, source, "cls.predictions.transform.LayerNorm")
    assign(head.output_bias, decoder_bias(source, name, config), f"{name}.bias")
    load_decoder(head, decoder, f"{name}.decoder.weight")
    if getattr(pretrainer, "next_sentence_prediction", False):  # BERT's NSP head (other MLM pretrainers have none)
        load_dense(pretrainer.get_layer("nsp_head").classifier, source, "cls.seq_relationship")
    return pretrainer, source.used, source.notes


# Export: the inverse of the import above (`bertology export --format hf`).


def export_bert(family, run):
    """`HFExport` of a BERT-backbone run as transformers' BERT: BertForPreTraining (MLM + NSP),
    BertForMaskedLM (MLM only; other heads, such as SpanBERT's span boundary head, are dropped
    with a note), or BertModel (no heads)."""
    return export_with_layout(run, "bert", "Bert", {"wordpiece": "BertTokenizer"})


def export_roberta(family, run):
    """`HFExport` of a RoBERTa run: RobertaForMaskedLM, or RobertaModel without heads."""
    return export_with_layout(run, "roberta", "Roberta", {"byte_bpe": "RobertaTokenizer"})


def export_with_layout(run, model_type, prefix, tokenizer_classes, weight_prefix=None, config_extra=None,
                       pooler="pooler.dense"):
    """`HFExport` of a `BertBackbone` run in transformers' BERT layout under `model_type` (class names
    `{prefix}Model`, ...): the encoder's names start with `weight_prefix` (default `{model_type}.`) in the
    models with heads; `config_extra` joins the config (an attention other than full needs it: BERT's
    and RoBERTa's have none); the pooler's Linear is `pooler`."""
    from keras_bertology.convert.hf_export import HFExport, dropped_heads_note, find_layer

    backbone, pretrainer = run.backbone, run.pretrainer
    mlm_head = find_layer(pretrainer, "mlm_head")
    nsp_head = find_layer(pretrainer, "nsp_head")
    if find_layer(backbone, "embedding_projection") is not None:
        raise CheckpointError(f"embeddings narrower than the encoder have no place in transformers' {prefix} "
                              "(ELECTRA's have)")
    attention = backbone.get_config().get("attention_type", "full")
    if attention != "full" and config_extra is None:
        raise CheckpointError(f"transformers' {prefix} has full attention only; this encoder's is {attention!r}")
    config = dict(model_type=model_type, **export_encoder_config(backbone), **(config_extra or {}))
    tokenizer = run.tokenizer
    if model_type == "roberta":  # positions are numbered from pad + 1: the rows before are never read
        pad = tokenizer.pad_id if tokenizer is not None else 1
        config.update(pad_token_id=pad, max_position_embeddings=backbone.max_positions + pad + 1)
        if tokenizer is not None:
            config.update(bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    elif tokenizer is not None:
        config.update(pad_token_id=tokenizer.pad_id)
    if mlm_head is None:
        architecture, sink = f"{prefix}Model", WeightSink()
    else:
        architecture = f"{prefix}ForPreTraining" if nsp_head is not None else f"{prefix}ForMaskedLM"
        sink = WeightSink(prefix=weight_prefix or f"{model_type}.")
    notes = dropped_heads_note(pretrainer, ("mlm_head", "nsp_head"), architecture)
    offset = config["max_position_embeddings"] - backbone.max_positions
    export_embeddings(sink, backbone, position_offset=offset)
    for index in range(backbone.num_layers):
        export_encoder_block(sink, backbone.get_layer(f"encoder_block_{index}"), index)
    export_pooler(sink, backbone, pooler, architecture.endswith(("Model", "ForPreTraining")),
                  architecture, notes)
    if mlm_head is not None:
        if model_type == "roberta":
            export_mlm_head(sink, mlm_head, "lm_head", "lm_head.dense", "lm_head.layer_norm", "gelu", config)
        else:
            export_mlm_head(sink, mlm_head, "cls.predictions", "cls.predictions.transform.dense",
                            "cls.predictions.transform.LayerNorm", config["hidden_act"], config)
    if nsp_head is not None:
        sink.dense(nsp_head.classifier, "cls.seq_relationship", prefixed=False)
    return HFExport(architecture, config, sink.tensors, tokenizer_classes, notes)


def export_encoder_config(backbone):
    """The BertConfig / RobertaConfig / ElectraConfig keys of a `BertBackbone` (post-LN, bidirectional)."""
    config = backbone.get_config()
    if config.get("norm_first") or config.get("causal"):
        raise CheckpointError("a pre-LayerNorm or causal encoder has no Hugging Face BERT-family counterpart")
    return dict(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"], num_hidden_layers=config["num_layers"],
        num_attention_heads=config["num_heads"], intermediate_size=config["intermediate_size"],
        hidden_act=hf_activation(config["activation"]), max_position_embeddings=config["max_positions"],
        type_vocab_size=max(config["num_segments"], 1), hidden_dropout_prob=config["dropout"],
        attention_probs_dropout_prob=config["attention_dropout"], layer_norm_eps=config["layer_norm_epsilon"],
        initializer_range=config["initializer_range"],
    )


def export_embeddings(sink, backbone, position_offset=0):
    """Word, position and token-type embeddings and their LayerNorm. RoBERTa's first `position_offset`
    position rows are never read (written as zeros); a backbone without segments gets one zero row,
    which adds nothing."""
    embeddings = backbone.get_layer("embeddings")
    sink.put("embeddings.word_embeddings.weight", embeddings.token_embedding.embeddings)
    positions = embeddings.position_embedding.embeddings.numpy()
    sink.put("embeddings.position_embeddings.weight",
             np.concatenate([np.zeros((position_offset, positions.shape[1]), positions.dtype), positions]))
    if embeddings.segment_embedding is not None:
        sink.put("embeddings.token_type_embeddings.weight", embeddings.segment_embedding.embeddings)
    else:
        sink.put("embeddings.token_type_embeddings.weight", np.zeros((1, positions.shape[1])))
    sink.layer_norm(embeddings.layer_norm, "embeddings.LayerNorm")


def export_pooler(sink, backbone, name, wanted, architecture, notes):
    """The backbone's pooler as `name` where transformers' `architecture` has one (`wanted`); a note
    where only one side has it."""
    if backbone.use_pooler and wanted:
        sink.dense(backbone.get_layer("pooler"), name)
    elif backbone.use_pooler:
        notes.append(f"the pooler is dropped: transformers' {architecture} has none")
    elif wanted:
        notes.append(f"this run has no pooler: transformers' {architecture} builds one, randomly initialised")


def export_encoder_block(sink, block, index):
    prefix = f"encoder.layer.{index}"
    attention = block.attention
    sink.dense(attention.query_dense, f"{prefix}.attention.self.query")
    sink.dense(attention.key_dense, f"{prefix}.attention.self.key")
    sink.dense(attention.value_dense, f"{prefix}.attention.self.value")
    export_block_branches(sink, block, prefix)


def export_block_branches(sink, block, prefix):
    """The inverse of `load_block_branches`."""
    sink.dense(block.attention.output_dense, f"{prefix}.attention.output.dense")
    sink.layer_norm(block.attention_norm, f"{prefix}.attention.output.LayerNorm")
    sink.dense(block.intermediate_dense, f"{prefix}.intermediate.dense")
    sink.dense(block.output_dense, f"{prefix}.output.dense")
    sink.layer_norm(block.output_norm, f"{prefix}.output.LayerNorm")


def export_mlm_head(sink, head, name, dense, norm, activation, config, decoder=None):
    """A masked-LM head whose transform transformers runs with `activation`: `{name}.bias`, and an untied
    decoder as `decoder` (default `{name}.decoder.weight` and `.bias`; tie_word_embeddings then false); a
    tied one is the word embeddings."""
    if hf_activation(head.activation, "MLM head activation") != activation:
        raise CheckpointError(f"the MLM head computes {head.activation!r}, but transformers' head computes "
                              f"{activation!r}: it cannot be exported as is")
    sink.dense(head.transform, dense, prefixed=False)
    sink.layer_norm(head.layer_norm, norm, prefixed=False)
    sink.put(f"{name}.bias", head.output_bias, prefixed=False)
    if not head.tie_decoder:
        config["tie_word_embeddings"] = False
        sink.put(decoder or f"{name}.decoder.weight", head.decoder_kernel.numpy().T, prefixed=False)
        if decoder is None:  # untied, transformers saves the decoder's bias too: the one it adds to the logits
            sink.put(f"{name}.decoder.bias", head.output_bias, prefixed=False)
