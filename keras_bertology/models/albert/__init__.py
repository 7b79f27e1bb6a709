"""ALBERT: factorized embeddings, cross-layer shared blocks, MLM + sentence-order prediction."""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.albert.presets import ALBERT_PRESETS
from keras_bertology.models.family import (LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily,
                                           TrainingDefaults)

ALBERT = FAMILY = ModelFamily(
    name="albert",
    presets=ALBERT_PRESETS,
    backbone_path="keras_bertology.models.albert.backbone:AlbertBackbone",
    pretrainer_path="keras_bertology.models.albert.pretrainer:AlbertPretrainer",
    tokenizer_path="keras_bertology.models.albert.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.models.albert.instances:sentence_pairs",
        masking="static",
        masker_path="keras_bertology.models.albert.masking:ngram_masker",
    ),
    training=TrainingDefaults(
        # ALBERT trained with LAMB; at the quick runs' scale it needs 10x AdamW's 1e-3 (its steps are relative
        # to each weight's norm), measured on albert-tiny: 150 steps reach the MLM loss of AdamW's at 1e-3.
        optimizer="lamb",
        learning_rate=1e-2,
    ),
    conversion=Conversion(
        hf_model_types=("albert",),
        hf_tokenizer_path="keras_bertology.models.albert.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.albert.convert:convert",
        hf_exporter_path="keras_bertology.models.albert.convert:export",
    ),
    options=(FamilyOption("max_ngram", int, 3, "longest masked n-gram in words; p(n) ~ 1/n", minimum=1, maximum=10),
             FamilyOption("sentence_task", str, "sop", "sentence-order prediction, or next-sentence prediction "
                          "for an ablation", choices=("sop", "nsp"), used_by=("instances", "pretrainer")),
             LOSS_CHUNK_SIZE),
)

__getattr__ = lazy_attributes(__name__, {
    "AlbertBackbone": "keras_bertology.models.albert.backbone",
    "AlbertPretrainer": "keras_bertology.models.albert.pretrainer",
})

__all__ = ["ALBERT", "ALBERT_PRESETS", "AlbertBackbone", "AlbertPretrainer"]
