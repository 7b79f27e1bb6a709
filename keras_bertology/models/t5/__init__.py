"""T5: the encoder-decoder family, pretrained by span corruption.

Pretraining reads the corpus as one stream of SentencePiece tokens cut into
rows, replaces 15% of each row's tokens, in spans of 3 on average, by
sentinels (the vocabulary's last 100 ids), and teaches the decoder to write
the spans out after their sentinels. Exports serve `encode` (the encoder's
states) and `generate` (text from text, sentinels filled in).

The family object is imported without TensorFlow; the classes load lazily
(discovering the families, `models.registry`, must not start TensorFlow).
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import Conversion, DataRecipe, FamilyOption, InputLayout, ModelFamily
from keras_bertology.models.t5.presets import T5_PRESETS

T5 = FAMILY = ModelFamily(
    name="t5",
    presets=T5_PRESETS,
    backbone_path="keras_bertology.models.t5.backbone:T5Backbone",
    pretrainer_path="keras_bertology.models.t5.pretrainer:T5Pretrainer",
    tokenizer_path="keras_bertology.models.t5.tokenizer:train_tokenizer",
    shared_tokenizer_path="keras_bertology.models.t5.tokenizer:shared_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.models.t5.instances:stream_chunks",
        masker_path="keras_bertology.models.t5.masking:span_corruption_stage",
        masks_tokens=False,
    ),
    inputs=InputLayout(
        segment_packer_path="keras_bertology.models.t5.packing:pack_segments",
        summary_position="mean",  # no [CLS]: a classifier on the encoder reads the mean of its states
    ),
    conversion=Conversion(
        hf_model_types=("t5",),
        hf_tokenizer_path="keras_bertology.models.t5.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.t5.convert:convert",
        hf_exporter_path="keras_bertology.models.t5.convert:export",
    ),
    options=(
        FamilyOption("noise_density", float, 0.15, "span corruption: share of each row's tokens replaced",
                     minimum=0.01, maximum=0.9, used_by=("masker", "instances")),
        FamilyOption("mean_noise_span_length", float, 3.0, "span corruption: mean tokens per replaced span",
                     minimum=1.0, maximum=64.0, used_by=("masker", "instances")),
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "T5Backbone": "keras_bertology.models.t5.backbone",
    "T5Pretrainer": "keras_bertology.models.t5.pretrainer",
})

__all__ = ["T5", "T5_PRESETS", "T5Backbone", "T5Pretrainer"]
