"""Hugging Face GPT-2 checkpoints (`GPT2Model`, `GPT2LMHeadModel`) into `GPTBackbone` / `GPTPretrainer`.

GPT-2 stores its projections as Conv1D weights [in, out], the layout of a Keras
Dense kernel (no transpose), and fuses the query, key and value projections
into one `c_attn` [H, 3H], split here in that order. The LM head is the token
table (tied), so every GPT-2 checkpoint gives the pretrainer as well.
"""

import numpy as np

from keras_bertology.convert.hf_weights import (
    WeightSink,
    WeightSource,
    assign,
    check_sizes,
    hf_activation,
    load_layer_norm,
)
from keras_bertology.errors import CheckpointError
from keras_bertology.layers.activations import HF_ACTIVATIONS

_REQUIRED_SIZES = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")
# Switches of transformers' GPT2Config that change the computation from GPT-2's, with GPT-2's value.
_GPT2_ONLY = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}


def convert(family, config, weights):
    """(backbone, pretrainer, heads imported, names used) from a GPT-2 checkpoint."""
    backbone = family.backbone_cls(**backbone_kwargs(config))
    source = WeightSource(weights, prefix="transformer.")
    load_backbone(backbone, source)
    pretrainer = family.pretrainer_cls(backbone)
    if source.has("lm_head.weight") and not source.take_if_equal(
            "lm_head.weight", backbone.token_embedding.embeddings.numpy()):
        raise CheckpointError("lm_head.weight differs from the token embeddings: an untied GPT-2 head is not "
                              "supported (GPT-2 ties them)")
    return backbone, pretrainer, ["clm"], source.used


def backbone_kwargs(config):
    """`GPTBackbone` kwargs of a transformers GPT2Config dict, checked."""
    check_sizes(config, _REQUIRED_SIZES)
    if config["n_embd"] % config["n_head"]:
        raise CheckpointError(f"config.json: n_embd {config['n_embd']} is not divisible by n_head {config['n_head']}")
    for key, value in _GPT2_ONLY.items():
        if config.get(key, value) != value:
            raise CheckpointError(f"config.json: {key}={config[key]!r} is not supported (GPT-2 has {value!r})")
    if config.get("tie_word_embeddings", True) is False:
        raise CheckpointError("config.json: tie_word_embeddings=false is not supported (GPT-2 ties its head)")
    activation = config.get("activation_function", "gelu_new")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"activation_function {activation!r} is not supported; supported: "
                              f"{', '.join(HF_ACTIVATIONS)}")
    return dict(vocab_size=config["vocab_size"], num_layers=config["n_layer"], num_heads=config["n_head"],
                hidden_size=config["n_embd"], intermediate_size=config.get("n_inner") or 4 * config["n_embd"],
                activation=HF_ACTIVATIONS[activation], max_positions=config["n_positions"],
                dropout=config.get("resid_pdrop", 0.1), attention_dropout=config.get("attn_pdrop", 0.1),
                layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-5),
                initializer_range=config.get("initializer_range", 0.02))


def load_backbone(backbone, source):
    embeddings = backbone.get_layer("embeddings")
    assign(embeddings.token_embedding.embeddings, source.get("wte.weight"), "wte.weight")
    assign(embeddings.position_embedding.embeddings, source.get("wpe.weight"), "wpe.weight")
    hidden = backbone.hidden_size
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"h.{index}"
        attention = block.attention
        kernel, bias = source.get(f"{prefix}.attn.c_attn.weight"), source.get(f"{prefix}.attn.c_attn.bias")
        if np.shape(kernel) != (hidden, 3 * hidden):
            raise CheckpointError(f"shape mismatch for {prefix}.attn.c_attn.weight: checkpoint {np.shape(kernel)}, "
                                  f"model {(hidden, 3 * hidden)}")
        for part, dense in enumerate((attention.query_dense, attention.key_dense, attention.value_dense)):
            columns = slice(part * hidden, (part + 1) * hidden)
            assign(dense.kernel, kernel[:, columns], f"{prefix}.attn.c_attn.weight")
            assign(dense.bias, bias[columns], f"{prefix}.attn.c_attn.bias")
        _load_conv1d(attention.output_dense, source, f"{prefix}.attn.c_proj")
        load_layer_norm(block.attention_norm, source, f"{prefix}.ln_1")
        load_layer_norm(block.output_norm, source, f"{prefix}.ln_2")
        _load_conv1d(block.intermediate_dense, source, f"{prefix}.mlp.c_fc")
        _load_conv1d(block.output_dense, source, f"{prefix}.mlp.c_proj")
        for buffer in ("attn.bias", "attn.masked_bias"):  # the causal mask, saved by older transformers
            if source.has(f"{prefix}.{buffer}"):
                source.get(f"{prefix}.{buffer}")
    load_layer_norm(backbone.get_layer("final_norm"), source, "ln_f")


def _load_conv1d(dense, source, name):
    """A Conv1D [in, out] weight is a Keras Dense kernel as it is."""
    assign(dense.kernel, source.get(f"{name}.weight"), f"{name}.weight")
    assign(dense.bias, source.get(f"{name}.bias"), f"{name}.bias")


def export(family, run):
    """`HFExport` of a GPT run: GPT2LMHeadModel (its head is the token table), or GPT2Model without one."""
    from keras_bertology.convert.hf_export import HFExport

    backbone, tokenizer = run.backbone, run.tokenizer
    config = backbone.get_config()
    hf_config = dict(
        model_type="gpt2", vocab_size=config["vocab_size"], n_positions=config["max_positions"],
        n_embd=config["hidden_size"], n_layer=config["num_layers"], n_head=config["num_heads"],
        n_inner=config["intermediate_size"], activation_function=hf_activation(config["activation"]),
        resid_pdrop=config["dropout"], embd_pdrop=config["dropout"], attn_pdrop=config["attention_dropout"],
        layer_norm_epsilon=config["layer_norm_epsilon"], initializer_range=config["initializer_range"],
    )
    if tokenizer is not None and tokenizer.has_role("eot"):
        hf_config.update(bos_token_id=tokenizer.eot_id, eos_token_id=tokenizer.eot_id)
    heads = run.pretrainer is not None
    sink = WeightSink(prefix="transformer." if heads else "")
    export_backbone(sink, backbone)
    architecture = "GPT2LMHeadModel" if heads else "GPT2Model"
    return HFExport(architecture, hf_config, sink.tensors, {"byte_bpe": "GPT2Tokenizer"})


def export_backbone(sink, backbone):
    """The inverse of `load_backbone`: q, k and v fused into c_attn [H, 3H]; Conv1D weights are Keras kernels."""
    embeddings = backbone.get_layer("embeddings")
    sink.put("wte.weight", embeddings.token_embedding.embeddings)
    sink.put("wpe.weight", embeddings.position_embedding.embeddings)
    for index in range(backbone.num_layers):
        block, prefix = backbone.get_layer(f"encoder_block_{index}"), f"h.{index}"
        attention = block.attention
        projections = (attention.query_dense, attention.key_dense, attention.value_dense)
        sink.put(f"{prefix}.attn.c_attn.weight", np.concatenate([dense.kernel.numpy() for dense in projections], 1))
        sink.put(f"{prefix}.attn.c_attn.bias", np.concatenate([dense.bias.numpy() for dense in projections]))
        _export_conv1d(sink, attention.output_dense, f"{prefix}.attn.c_proj")
        sink.layer_norm(block.attention_norm, f"{prefix}.ln_1")
        sink.layer_norm(block.output_norm, f"{prefix}.ln_2")
        _export_conv1d(sink, block.intermediate_dense, f"{prefix}.mlp.c_fc")
        _export_conv1d(sink, block.output_dense, f"{prefix}.mlp.c_proj")
    sink.layer_norm(backbone.get_layer("final_norm"), "ln_f")


def _export_conv1d(sink, dense, name):
    sink.put(f"{name}.weight", dense.kernel)
    sink.put(f"{name}.bias", dense.bias)
