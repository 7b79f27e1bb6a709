"""Hugging Face ELECTRA checkpoints: discriminators (ElectraForPreTraining), generators
(ElectraForMaskedLM) and bare encoders (ElectraModel)."""

from keras_bertology.convert.hf_weights import (
    WeightSink,
    WeightSource,
    assign,
    check_sizes,
    hf_activation,
    load_decoder,
    load_dense,
    load_layer_norm,
    rename_legacy_layer_norm,
    untied_decoder,
)
from keras_bertology.errors import CheckpointError
from keras_bertology.models.bert.convert import encoder_kwargs, load_embeddings, load_encoder_block


def convert(family, config, weights):
    """(backbone, pretrainer or None, heads imported, names used, notes) from an ELECTRA checkpoint."""
    from keras_bertology.models.bert.pretrainer import BertPretrainer
    from keras_bertology.models.generator_discriminator import ReplacedTokenDetector

    kwargs = encoder_kwargs(config, use_pooler=False)
    config = {"embedding_size": 128, **config}  # transformers' ElectraConfig default
    check_sizes(config, ("embedding_size",))
    embedding_size = config["embedding_size"]
    backbone = family.backbone_cls(**kwargs, embedding_size=embedding_size)
    weights = rename_legacy_layer_norm(weights)
    source = WeightSource(weights, prefix="electra.")
    load_embeddings(backbone, source, "electra", config)
    if embedding_size != kwargs["hidden_size"]:
        load_dense(backbone.get_layer("embedding_projection"), source, "embeddings_project")
    for index in range(backbone.num_layers):
        load_encoder_block(backbone.get_layer(f"encoder_block_{index}"), source, index)
    heads = WeightSource(weights, prefix="")
    if heads.has("discriminator_predictions.dense.weight"):
        pretrainer = ReplacedTokenDetector(backbone)
        head = pretrainer.get_layer("rtd_head")
        load_dense(head.dense, heads, "discriminator_predictions.dense")
        load_dense(head.prediction, heads, "discriminator_predictions.dense_prediction")
        names = ["rtd"]
    elif heads.has("generator_predictions.dense.weight"):
        decoder = untied_decoder(heads, "generator_lm_head.weight", backbone.token_embedding.embeddings.numpy(),
                                 config)
        # The generator head's activation is always exact GELU, whatever hidden_act says.
        pretrainer = BertPretrainer(backbone, next_sentence_prediction=False, mlm_activation="gelu",
                                    tie_decoder=decoder is None)
        head = pretrainer.get_layer("mlm_head")
        load_dense(head.transform, heads, "generator_predictions.dense")
        load_layer_norm(head.layer_norm, heads, "generator_predictions.LayerNorm")
        assign(head.output_bias, heads.get("generator_lm_head.bias"), "generator_lm_head.bias")
        load_decoder(head, decoder, "generator_lm_head.weight")
        names = ["mlm"]
    else:
        pretrainer, names = None, []
    return backbone, pretrainer, names, source.used | heads.used, heads.notes


def export(family, run):
    """`HFExport` of an ELECTRA run: the discriminator as ElectraForPreTraining, with the generator of a
    pretraining run as ElectraForMaskedLM in `generator/`; a converted generator as ElectraForMaskedLM;
    a run without heads as ElectraModel."""
    from keras_bertology.convert.hf_export import dropped_heads_note, find_layer

    pretrainer = run.pretrainer
    detector, mlm_head = find_layer(pretrainer, "rtd_head"), find_layer(pretrainer, "mlm_head")
    if detector is not None:
        exported = _export_model(run, run.backbone, "ElectraForPreTraining", detector=detector)
        generator = getattr(pretrainer, "generator", None)
        if mlm_head is not None and generator is not None:
            exported.parts["generator"] = _export_model(run, generator, "ElectraForMaskedLM", mlm_head=mlm_head)
    elif mlm_head is not None:
        exported = _export_model(run, run.backbone, "ElectraForMaskedLM", mlm_head=mlm_head)
    else:
        exported = _export_model(run, run.backbone, "ElectraModel")
    exported.notes += dropped_heads_note(pretrainer, ("rtd_head", "mlm_head"), exported.architecture)
    return exported


def _export_model(run, backbone, architecture, detector=None, mlm_head=None):
    """One ELECTRA model (discriminator or generator) with the head given, if any."""
    from keras_bertology.convert.hf_export import HFExport, find_layer
    from keras_bertology.models.bert.convert import (
        export_embeddings,
        export_encoder_block,
        export_encoder_config,
        export_mlm_head,
    )

    config = dict(model_type="electra", **export_encoder_config(backbone),
                  embedding_size=backbone.embedding_size or backbone.hidden_size)
    if run.tokenizer is not None:
        config["pad_token_id"] = run.tokenizer.pad_id
    sink = WeightSink(prefix="electra." if detector is not None or mlm_head is not None else "")
    export_embeddings(sink, backbone)
    projection = find_layer(backbone, "embedding_projection")
    if projection is not None:
        sink.dense(projection, "embeddings_project")
    for index in range(backbone.num_layers):
        export_encoder_block(sink, backbone.get_layer(f"encoder_block_{index}"), index)
    notes = [f"the pooler is dropped: transformers' {architecture} has none"] if backbone.use_pooler else []
    if detector is not None:
        if hf_activation(detector.activation, "detector activation") != config["hidden_act"]:
            raise CheckpointError(f"the detection head computes {detector.activation!r}, but transformers' runs "
                                  "the encoder's hidden_act: it cannot be exported as is")
        sink.dense(detector.dense, "discriminator_predictions.dense", prefixed=False)
        sink.dense(detector.prediction, "discriminator_predictions.dense_prediction", prefixed=False)
    if mlm_head is not None:  # transformers' generator head always computes the exact GELU
        export_mlm_head(sink, mlm_head, "generator_lm_head", "generator_predictions.dense",
                        "generator_predictions.LayerNorm", "gelu", config, decoder="generator_lm_head.weight")
    return HFExport(architecture, config, sink.tensors, {"wordpiece": "ElectraTokenizer"}, notes)
