"""Hugging Face ModernBERT checkpoints (`ModernBertModel`, `ModernBertForMaskedLM`) into `ModernBertBackbone` /
`ModernBertPretrainer`.

The fused projections are split: `attn.Wqkv` [3H, H] into query, key and
value (in that order), `mlp.Wi` [2I, H] into the GeGLU's activated half (the
first) and its gate (the second). Which layers attend globally comes from
`layer_types` (or the older `global_attn_every_n_layers`); the rotary bases
from `rope_parameters` (or `global_rope_theta` / `local_rope_theta`).
"""

import numpy as np

from keras_bertology.convert.hf_weights import WeightSource, assign, check_sizes, load_decoder, untied_decoder
from keras_bertology.errors import CheckpointError
from keras_bertology.layers.activations import HF_ACTIVATIONS

_REQUIRED_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
# Switches of transformers' ModernBertConfig that add biases our blocks do not have, with ModernBERT's value.
_NO_BIASES = {"attention_bias": False, "mlp_bias": False, "norm_bias": False, "classifier_bias": False}
_DEFAULT_BASES = {"full_attention": 160000.0, "sliding_attention": 10000.0}
_OLD_BASE_KEYS = {"full_attention": "global_rope_theta", "sliding_attention": "local_rope_theta"}


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used) from a ModernBERT checkpoint."""
    backbone = family.backbone_cls(**backbone_kwargs(config))
    source = WeightSource(weights, prefix="model.")
    load_backbone(backbone, source)
    if not source.has("head.dense.weight"):
        return backbone, None, [], source.used
    head_source = WeightSource(weights, prefix="")
    decoder = untied_decoder(head_source, "decoder.weight", backbone.token_embedding.embeddings.numpy(), config)
    pretrainer = family.pretrainer_cls(backbone, tie_decoder=decoder is None)
    head = pretrainer.get_layer("mlm_head")
    load_decoder(head, decoder, "decoder.weight")
    _load_linear(head.transform, head_source, "head.dense")
    assign(head.layer_norm.gamma, head_source.get("head.norm.weight"), "head.norm.weight")
    bias = head_source.get("decoder.bias") if head_source.has("decoder.bias") else np.zeros(backbone.vocab_size)
    assign(head.output_bias, bias, "decoder.bias")
    return backbone, pretrainer, ["mlm"], source.used | head_source.used, head_source.notes


def backbone_kwargs(config):
    """`ModernBertBackbone` kwargs of a transformers ModernBertConfig dict, checked."""
    check_sizes(config, _REQUIRED_SIZES)
    if config["hidden_size"] % config["num_attention_heads"]:
        raise CheckpointError(f"config.json: hidden_size {config['hidden_size']} is not divisible by "
                              f"num_attention_heads {config['num_attention_heads']}")
    for key, value in _NO_BIASES.items():
        if config.get(key, value) != value:
            raise CheckpointError(f"config.json: {key}={config[key]!r} is not supported (ModernBERT has {value!r})")
    activation = config.get("hidden_activation", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"hidden_activation {activation!r} is not supported; supported: "
                              f"{', '.join(HF_ACTIVATIONS)}")
    if config.get("classifier_activation", "gelu") != "gelu":
        raise CheckpointError(f"classifier_activation {config['classifier_activation']!r} is not supported "
                              "(ModernBERT's head uses the exact GELU)")
    bases = _rotary_bases(config)
    return dict(vocab_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
                num_heads=config["num_attention_heads"], hidden_size=config["hidden_size"],
                intermediate_size=config["intermediate_size"], activation=HF_ACTIVATIONS[activation],
                max_positions=config.get("max_position_embeddings", 8192),
                local_window=config.get("local_attention", 128), global_every=_global_every(config),
                rotary_base=bases["sliding_attention"], global_rotary_base=bases["full_attention"],
                dropout=config.get("embedding_dropout", 0.0), attention_dropout=config.get("attention_dropout", 0.0),
                layer_norm_epsilon=config.get("norm_eps", 1e-5),
                initializer_range=config.get("initializer_range", 0.02))


def _global_every(config):
    """n such that layer i is global exactly when i % n == 0, from `layer_types` or its older form."""
    layers = config["num_hidden_layers"]
    types = config.get("layer_types")
    if types is None:
        every = config.get("global_attn_every_n_layers", 3)
        if not isinstance(every, int) or every < 1:
            raise CheckpointError(f"config.json: global_attn_every_n_layers must be a positive integer, not {every!r}")
        return every
    if not isinstance(types, list) or len(types) != layers or types[:1] != ["full_attention"]:
        raise CheckpointError("config.json: layer_types must list one type per layer, the first 'full_attention'")
    globals_ = [index for index, kind in enumerate(types) if kind == "full_attention"]
    every = globals_[1] if len(globals_) > 1 else layers
    if [kind for kind in types if kind not in _DEFAULT_BASES] or \
            globals_ != list(range(0, layers, every)):
        raise CheckpointError(f"config.json: layer_types {types} is not one global layer every n from the first, "
                              "the only pattern supported")
    return every


def _rotary_bases(config):
    """{layer type: rotary base}, from `rope_parameters` or the older per-type keys."""
    bases = {}
    parameters = config.get("rope_parameters") or {}
    for kind, default in _DEFAULT_BASES.items():
        rope = parameters.get(kind) or {}
        if rope.get("rope_type", "default") != "default":
            raise CheckpointError(f"config.json: rope_type {rope['rope_type']!r} ({kind}) is not supported, only "
                                  "the default rotary embedding")
        bases[kind] = float(rope.get("rope_theta", config.get(_OLD_BASE_KEYS[kind], default)))
    return bases


def load_backbone(backbone, source):
    embeddings = backbone.get_layer("embeddings")
    assign(embeddings.token_embedding.embeddings, source.get("embeddings.tok_embeddings.weight"),
           "embeddings.tok_embeddings.weight")
    assign(embeddings.layer_norm.gamma, source.get("embeddings.norm.weight"), "embeddings.norm.weight")
    hidden, inner = backbone.hidden_size, backbone.intermediate_size
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"layers.{index}"
        attention = block.attention
        fused = _checked(source, f"{prefix}.attn.Wqkv.weight", (3 * hidden, hidden))
        for part, dense in enumerate((attention.query_dense, attention.key_dense, attention.value_dense)):
            assign(dense.kernel, fused[part * hidden:(part + 1) * hidden].T, f"{prefix}.attn.Wqkv.weight")
        _load_linear(attention.output_dense, source, f"{prefix}.attn.Wo")
        if block.attention_norm is not None:
            assign(block.attention_norm.gamma, source.get(f"{prefix}.attn_norm.weight"), f"{prefix}.attn_norm.weight")
        assign(block.output_norm.gamma, source.get(f"{prefix}.mlp_norm.weight"), f"{prefix}.mlp_norm.weight")
        both = _checked(source, f"{prefix}.mlp.Wi.weight", (2 * inner, hidden))
        assign(block.intermediate_dense.kernel, both[:inner].T, f"{prefix}.mlp.Wi.weight")
        assign(block.gate_dense.kernel, both[inner:].T, f"{prefix}.mlp.Wi.weight")
        _load_linear(block.output_dense, source, f"{prefix}.mlp.Wo")
    assign(backbone.get_layer("final_norm").gamma, source.get("final_norm.weight"), "final_norm.weight")


def _checked(source, name, shape):
    value = np.asarray(source.get(name))
    if value.shape != shape:
        raise CheckpointError(f"shape mismatch for {name}: checkpoint {value.shape}, model {shape}")
    return value


def _load_linear(dense, source, name):
    """A bias-free torch Linear [out, in] into a Dense kernel [in, out]."""
    assign(dense.kernel, source.get(f"{name}.weight").T, f"{name}.weight")


def export(family, run):
    """`HFExport` of a ModernBERT run: `ModernBertForMaskedLM` with the masked-LM head, else
    `ModernBertModel`; the inverse of `convert` (Wqkv and Wi fused again). The byte-level vocabulary goes
    out as tokenizer.json (with vocab.json + merges.txt), which transformers runs as written for ModernBERT
    (it has no tokenizer class of its own), placing [CLS] and [SEP] as ModernBERT does."""
    from keras_bertology.convert.hf_export import HFExport, dropped_heads_note, find_layer
    from keras_bertology.convert.hf_weights import WeightSink, hf_activation
    from keras_bertology.models.modernbert.hf_tokenizer import HF_TOKENIZER

    backbone, pretrainer, tokenizer = run.backbone, run.pretrainer, run.tokenizer
    c = backbone.get_config()
    layer_types = ["full_attention" if index % c["global_every"] == 0 else "sliding_attention"
                   for index in range(c["num_layers"])]
    config = dict(
        model_type="modernbert", vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        num_hidden_layers=c["num_layers"], num_attention_heads=c["num_heads"],
        intermediate_size=c["intermediate_size"], hidden_activation=hf_activation(c["activation"]),
        max_position_embeddings=c["max_positions"], local_attention=c["local_window"], layer_types=layer_types,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": c["global_rotary_base"]},
                         "sliding_attention": {"rope_type": "default", "rope_theta": c["rotary_base"]}},
        norm_eps=c["layer_norm_epsilon"], embedding_dropout=c["dropout"], attention_dropout=c["attention_dropout"],
        mlp_dropout=0.0, initializer_range=c["initializer_range"], attention_bias=False, mlp_bias=False,
        norm_bias=False, classifier_bias=False, decoder_bias=True, tie_word_embeddings=True)
    if tokenizer is not None:
        config.update({f"{role}_token_id": tokenizer.optional_id(role) for role in ("pad", "cls", "sep")})
        config.update(bos_token_id=config.get("cls_token_id"), eos_token_id=config.get("sep_token_id"))
    mlm_head = find_layer(pretrainer, "mlm_head") if pretrainer is not None else None
    architecture = "ModernBertForMaskedLM" if mlm_head is not None else "ModernBertModel"
    sink = WeightSink(prefix="model." if mlm_head is not None else "")
    _export_backbone(sink, backbone)
    if mlm_head is not None:
        if not mlm_head.tie_decoder:
            raise CheckpointError("--format hf: an untied ModernBERT head has no transformers layout (it ties "
                                  "the decoder to the token table)")
        sink.put("head.dense.weight", mlm_head.transform.kernel.numpy().T, prefixed=False)
        sink.put("head.norm.weight", mlm_head.layer_norm.gamma, prefixed=False)
        sink.put("decoder.weight", backbone.token_embedding.embeddings, prefixed=False)
        sink.put("decoder.bias", mlm_head.output_bias, prefixed=False)
    notes = dropped_heads_note(pretrainer, ("mlm_head",), architecture)
    return HFExport(architecture, config, sink.tensors, {"byte_bpe": HF_TOKENIZER.default_class}, notes)


def _export_backbone(sink, backbone):
    """The inverse of `load_backbone`."""
    embeddings = backbone.get_layer("embeddings")
    sink.put("embeddings.tok_embeddings.weight", embeddings.token_embedding.embeddings)
    sink.put("embeddings.norm.weight", embeddings.layer_norm.gamma)
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"layers.{index}"
        attention = block.attention
        projections = (attention.query_dense, attention.key_dense, attention.value_dense)
        sink.put(f"{prefix}.attn.Wqkv.weight", np.concatenate([dense.kernel.numpy().T for dense in projections]))
        sink.put(f"{prefix}.attn.Wo.weight", attention.output_dense.kernel.numpy().T)
        if block.attention_norm is not None:
            sink.put(f"{prefix}.attn_norm.weight", block.attention_norm.gamma)
        sink.put(f"{prefix}.mlp_norm.weight", block.output_norm.gamma)
        sink.put(f"{prefix}.mlp.Wi.weight", np.concatenate([block.intermediate_dense.kernel.numpy().T,
                                                            block.gate_dense.kernel.numpy().T]))
        sink.put(f"{prefix}.mlp.Wo.weight", block.output_dense.kernel.numpy().T)
    sink.put("final_norm.weight", backbone.get_layer("final_norm").gamma)
