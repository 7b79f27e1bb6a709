"""Hugging Face XLNet checkpoints: XLNetModel (encoder) and XLNetLMHeadModel (encoder + LM head).

transformers' XLNet never reads `untie_r`: every layer owns its relative
biases. So does the import where the tensors differ between layers, whatever
config.json says; where they are equal one shared set computes the same.
"""

import numpy as np

from keras_bertology.convert.hf_weights import (
    WeightSink,
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


def export(family, run):
    """`HFExport` of an XLNet run: XLNetLMHeadModel (its LM head on the content stream) or XLNetModel."""
    from keras_bertology.convert.hf_export import HFExport, dropped_heads_note, find_layer

    backbone, tokenizer = run.backbone, run.tokenizer
    encoder, config = backbone.encoder, backbone.get_config()
    activations = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu"}
    if config["activation"] not in activations:
        raise CheckpointError(f"XLNet's ff_activation has no form of {config['activation']!r}")
    hf_config = dict(
        model_type="xlnet", vocab_size=config["vocab_size"], d_model=config["hidden_size"],
        n_layer=config["num_layers"], n_head=config["num_heads"], d_head=config["hidden_size"] // config["num_heads"],
        d_inner=config["intermediate_size"], ff_activation=activations[config["activation"]],
        untie_r=config["untie_r"], attn_type="bi", clamp_len=config["clamp_len"], dropout=config["dropout"],
        layer_norm_eps=config["layer_norm_epsilon"], initializer_range=config["initializer_range"], bi_data=False,
        mem_len=None, same_length=False,
    )
    if tokenizer is not None:
        if not getattr(tokenizer, "preprocessing", {}).get("strip_accents", True):
            raise CheckpointError("the run's tokenizer keeps accents; transformers' XLNetTokenizer always strips them")
        hf_config.update(pad_token_id=tokenizer.pad_id, bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    head = find_layer(run.pretrainer, "plm_head")
    architecture = "XLNetLMHeadModel" if head is not None else "XLNetModel"
    sink = WeightSink(prefix="transformer." if head is not None else "")
    export_encoder(sink, encoder)
    if head is not None:
        sink.put("lm_loss.bias", head.bias, prefixed=False)
        if not head.tie_decoder:
            sink.put("lm_loss.weight", head.decoder_kernel.numpy().T, prefixed=False)
            hf_config["tie_word_embeddings"] = False
    notes = dropped_heads_note(run.pretrainer, ("plm_head",), architecture)
    return HFExport(architecture, hf_config, sink.tensors, {"sentencepiece": "XLNetTokenizer"}, notes)


def export_encoder(sink, encoder):
    """The inverse of `load_encoder`: Dense kernels [H, N * D] back to XLNet's [H, N, D] projections."""
    hidden, heads = encoder.hidden_size, encoder.num_heads
    sink.put("word_embedding.weight", encoder.word_embedding.embeddings)
    sink.put("mask_emb", encoder.mask_embedding.numpy().reshape(1, 1, hidden))
    biases = encoder.relative_biases.numpy()
    for index, block in enumerate(encoder.blocks):
        prefix = f"layer.{index}."
        attention = block.block.attention
        for ours, theirs in (("query_dense", "q"), ("key_dense", "k"), ("value_dense", "v")):
            sink.put(f"{prefix}rel_attn.{theirs}", getattr(attention, ours).kernel.numpy().reshape(hidden, heads, -1))
        sink.put(f"{prefix}rel_attn.o", attention.output_dense.kernel.numpy().T.reshape(hidden, heads, -1))
        sink.put(f"{prefix}rel_attn.r", block.relative.position_kernel)
        sink.put(f"{prefix}rel_attn.seg_embed", block.relative.segment_embedding)
        for name, bias in zip(BIAS_NAMES, biases[index] if encoder.untie_r else biases):
            sink.put(f"{prefix}rel_attn.{name}", bias)
        sink.layer_norm(block.block.attention_norm, f"{prefix}rel_attn.layer_norm")
        sink.dense(block.block.intermediate_dense, f"{prefix}ff.layer_1")
        sink.dense(block.block.output_dense, f"{prefix}ff.layer_2")
        sink.layer_norm(block.block.output_norm, f"{prefix}ff.layer_norm")
