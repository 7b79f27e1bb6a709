"""Hugging Face T5 checkpoints (`T5Model`, `T5ForConditionalGeneration`, `T5EncoderModel`) into `T5Backbone`.

transformers names each block's parts by position: `layer.0` is the
self-attention (`SelfAttention`), `layer.1` the decoder's cross-attention
(`EncDecAttention`), the last `layer` the feed-forward (`DenseReluDense`: `wi`
and `wo`, or v1.1's gated `wi_0`, `wi_1`, `wo`), each with its `layer_norm`.
Only block 0 of each stack holds `relative_attention_bias`. The encoder's and
decoder's `embed_tokens` are the shared table (`shared.weight`): where a
checkpoint keeps copies, they must equal it.
"""

from keras_bertology.convert.hf_weights import WeightSource, assign, check_sizes, hf_activation
from keras_bertology.errors import CheckpointError
from keras_bertology.layers.activations import HF_ACTIVATIONS

_REQUIRED_SIZES = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads")


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used) from a T5 checkpoint: the encoder alone
    from `T5EncoderModel` (no decoder tensors), both stacks from `T5Model`, and the pretrainer too from
    `T5ForConditionalGeneration` (its architecture, or an `lm_head.weight` of its own)."""
    source = WeightSource(weights, prefix="")
    encoder_only = not any(name.startswith("decoder.") for name in weights)
    backbone = family.backbone_cls(**backbone_kwargs(config, encoder_only=encoder_only))
    load_backbone(backbone, source)
    generates = "T5ForConditionalGeneration" in (config.get("architectures") or []) or source.has("lm_head.weight")
    if encoder_only or not generates:
        return backbone, None, [], source.used
    pretrainer = family.pretrainer_cls(backbone, **pretrainer_kwargs(config, source))
    load_lm_head(pretrainer, source)
    return backbone, pretrainer, ["spans"], source.used


def backbone_kwargs(config, encoder_only=False):
    """`T5Backbone` kwargs of a transformers T5Config dict, checked; `encoder_only` for a `T5EncoderModel`."""
    check_sizes(config, _REQUIRED_SIZES)
    projection = config.get("feed_forward_proj", "relu")
    parts = projection.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise CheckpointError(f"config.json: feed_forward_proj {projection!r} is not T5's form "
                              "(an activation, or gated-<activation>)")
    # transformers reads "gated-gelu" as the tanh GELU (T5 v1.1's), any other name as the function it names.
    activation = "gelu_new" if projection == "gated-gelu" else parts[-1]
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"config.json: feed_forward_proj {projection!r}: activation {activation!r} is not "
                              f"supported; supported: {', '.join(HF_ACTIVATIONS)}")
    decoder_layers = config.get("num_decoder_layers") or config["num_layers"]
    return dict(vocab_size=config["vocab_size"], num_layers=config["num_layers"], num_heads=config["num_heads"],
                hidden_size=config["d_model"], intermediate_size=config["d_ff"], head_dim=config["d_kv"],
                num_decoder_layers=0 if encoder_only else decoder_layers, activation=HF_ACTIVATIONS[activation],
                gated_feed_forward=len(parts) == 2,
                num_buckets=config.get("relative_attention_num_buckets", 32),
                max_distance=config.get("relative_attention_max_distance", 128),
                dropout=config.get("dropout_rate", 0.1), layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
                initializer_factor=config.get("initializer_factor", 1.0))


def load_backbone(backbone, source):
    """Copy a T5 checkpoint's stacks from `source` (a `WeightSource`) into `backbone`."""
    shared = source.get("shared.weight")
    for stack in ("encoder", "decoder")[:2 if backbone.num_decoder_layers else 1]:
        copy = f"{stack}.embed_tokens.weight"
        if source.has(copy) and not source.take_if_equal(copy, shared):
            raise CheckpointError(f"{copy} differs from shared.weight: T5's stacks share one token table")
    for variable, name, transposed in _hf_names(backbone):
        value = source.get(name)
        assign(variable, value.T if transposed else value, name)


def _hf_names(backbone):
    """(variable, transformers tensor name, whether the tensor is the variable transposed) of each of the
    backbone's weights: a Dense kernel [in, out] is a torch Linear weight [out, in]."""
    yield backbone.token_embedding.embeddings, "shared.weight", False
    stacks = [("encoder", backbone.num_layers, ("SelfAttention",))]
    if backbone.num_decoder_layers:
        stacks.append(("decoder", backbone.num_decoder_layers, ("SelfAttention", "EncDecAttention")))
    for stack, depth, attentions in stacks:
        yield (backbone.get_layer(f"{stack}_position_bias").embeddings,
               f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", False)
        for index in range(depth):
            block, prefix = backbone.get_layer(f"{stack}_block_{index}"), f"{stack}.block.{index}.layer"
            parts = [(block.attention, block.attention_norm)]
            if len(attentions) == 2:
                parts.append((block.cross_attention, block.cross_attention_norm))
            for position, (kind, (attention, norm)) in enumerate(zip(attentions, parts)):
                for letter, dense in zip("qkvo", (attention.query_dense, attention.key_dense,
                                                  attention.value_dense, attention.output_dense)):
                    yield dense.kernel, f"{prefix}.{position}.{kind}.{letter}.weight", True
                yield norm.scale, f"{prefix}.{position}.layer_norm.weight", False
            feed_forward = f"{prefix}.{len(attentions)}.DenseReluDense"
            if block.gate_dense is not None:
                yield block.intermediate_dense.kernel, f"{feed_forward}.wi_0.weight", True
                yield block.gate_dense.kernel, f"{feed_forward}.wi_1.weight", True
            else:
                yield block.intermediate_dense.kernel, f"{feed_forward}.wi.weight", True
            yield block.output_dense.kernel, f"{feed_forward}.wo.weight", True
            yield block.output_norm.scale, f"{prefix}.{len(attentions)}.layer_norm.weight", False
        yield backbone.get_layer(f"{stack}_final_norm").scale, f"{stack}.final_layer_norm.weight", False


def pretrainer_kwargs(config, source):
    """`T5Pretrainer` kwargs of a `T5ForConditionalGeneration` checkpoint: tied unless `lm_head.weight` is
    saved and differs from the token table (T5 v1.1's own head); states scaled before the head where the
    config says so (`scale_decoder_outputs`, transformers 5) or, in configs older than that key, where it
    does not set tie_word_embeddings to false (transformers 4's reading: v1.0 scales, v1.1 does not)."""
    scale = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True) is not False)
    tied = not source.has("lm_head.weight") or source.take_if_equal("lm_head.weight", source.get("shared.weight"))
    return dict(tie_embeddings=tied, scale_logits=bool(scale))


def load_lm_head(pretrainer, source):
    """Copy an untied `lm_head.weight` into the pretrainer's head (nothing for a tied one)."""
    if not pretrainer.tie_embeddings:
        assign(pretrainer.get_layer("lm_head").kernel, source.get("lm_head.weight").T, "lm_head.weight")


def export(family, run):
    """`HFExport` of a T5 run: `T5ForConditionalGeneration` with the pretrainer's head, else `T5Model`, or
    `T5EncoderModel` for an encoder alone. The head's scale is `scale_decoder_outputs`; an own head is saved
    as `lm_head.weight`, which transformers then keeps apart from the token table."""
    from keras_bertology.convert.hf_export import HFExport
    from keras_bertology.convert.hf_weights import WeightSink

    backbone, pretrainer, tokenizer = run.backbone, run.pretrainer, run.tokenizer
    config = backbone.get_config()
    hf_config = dict(
        model_type="t5", vocab_size=config["vocab_size"], d_model=config["hidden_size"],
        d_kv=config["head_dim"], d_ff=config["intermediate_size"], num_layers=config["num_layers"],
        num_decoder_layers=config["num_decoder_layers"] or config["num_layers"], num_heads=config["num_heads"],
        relative_attention_num_buckets=config["num_buckets"], relative_attention_max_distance=config["max_distance"],
        dropout_rate=config["dropout"], layer_norm_epsilon=config["layer_norm_epsilon"],
        initializer_factor=config["initializer_factor"],
        feed_forward_proj=_feed_forward_proj(config["activation"], config["gated_feed_forward"]),
        is_encoder_decoder=bool(config["num_decoder_layers"]))
    if tokenizer is not None:
        hf_config.update(pad_token_id=tokenizer.pad_id, eos_token_id=tokenizer.sep_id,
                         decoder_start_token_id=tokenizer.pad_id)
    sink = WeightSink()
    for variable, name, transposed in _hf_names(backbone):
        sink.put(name, variable.numpy().T if transposed else variable)
    if not config["num_decoder_layers"]:
        architecture = "T5EncoderModel"
    elif pretrainer is None:
        architecture = "T5Model"
    else:
        architecture = "T5ForConditionalGeneration"
        hf_config["scale_decoder_outputs"] = bool(pretrainer.scale_logits)
        if not pretrainer.tie_embeddings:
            hf_config["tie_word_embeddings"] = pretrainer.scale_logits  # older transformers' reading of v1.1
            sink.put("lm_head.weight", pretrainer.get_layer("lm_head").kernel.numpy().T)
    return HFExport(architecture, hf_config, sink.tensors, {"sentencepiece": "T5Tokenizer"})


def _feed_forward_proj(activation, gated):
    """transformers' `feed_forward_proj` of our feed-forward: an activation, or gated-<activation>, where
    "gated-gelu" is the tanh GELU (T5 v1.1's) and an exact gated GELU has no name."""
    name = hf_activation(activation, "feed-forward activation")
    if not gated:
        return name
    if activation == "gelu":
        raise CheckpointError("--format hf: transformers' T5 reads gated-gelu as the tanh GELU; this run's "
                              "gated feed-forward uses the exact GELU")
    return "gated-gelu" if name == "gelu_new" else f"gated-{name}"
