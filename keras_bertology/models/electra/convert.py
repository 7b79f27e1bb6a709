"""Hugging Face ELECTRA checkpoints: discriminators (ElectraForPreTraining), generators
(ElectraForMaskedLM) and bare encoders (ElectraModel)."""

from keras_bertology.convert.hf_weights import (
    WeightSource,
    assign,
    check_sizes,
    load_decoder,
    load_dense,
    load_layer_norm,
    rename_legacy_layer_norm,
    untied_decoder,
)
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
