"""DeBERTa-v3: DeBERTa's encoder (log-bucketed relative positions shared with the content projections, no
enhanced mask decoder) pretrained as ELECTRA is, by replaced token detection against a masked-LM generator
of half its depth, with gradient-disentangled embedding sharing (He et al. 2021). The vocabulary is a
cased SentencePiece model with DeBERTa's special tokens; inputs are RoBERTa's full sentences without
segments, every selected token becomes [MASK].

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.deberta.presets import DEBERTA_V3_PRESETS
from keras_bertology.models.family import (LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily,
                                           TrainingDefaults)

RTD = ("objective", "rtd")  # the generator's settings

DEBERTA_V3 = FAMILY = ModelFamily(
    name="deberta-v3",
    presets=DEBERTA_V3_PRESETS,
    backbone_path="keras_bertology.models.deberta.backbone:DebertaBackbone",
    pretrainer_path="keras_bertology.models.deberta_v3.pretrainer:deberta_v3_pretrainer",
    tokenizer_path="keras_bertology.models.deberta_v3.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        masker_path="keras_bertology.models.deberta_v3.masking:all_mask_masker",
        packings=("full-sentences", "doc-sentences"),
    ),
    training=TrainingDefaults(
        # As ELECTRA's discriminator, which at 1e-3 settles on "all original".
        learning_rate=3e-4,
    ),
    conversion=Conversion(
        hf_model_types=("deberta-v2",),
        hf_tokenizer_path="keras_bertology.models.deberta_v3.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.deberta.convert:convert",
        hf_exporter_path="keras_bertology.models.deberta.convert:export",
    ),
    options=(
        FamilyOption("objective", str, "rtd", "rtd: replaced token detection against a generator; mlm: the masked "
                     "LM alone on the last layer (the paper's baseline on the same encoder)", choices=("rtd", "mlm"),
                     used_by=("pretrainer",)),
        FamilyOption("generator_layers", int, None, "generator depth (default: half the discriminator's)",
                     minimum=1, maximum=48, used_by=("pretrainer",), applies_when=RTD),
        FamilyOption("rtd_weight", float, 10.0, "weight of the replaced token detection loss", minimum=0.0,
                     maximum=1000.0, used_by=("pretrainer",), applies_when=RTD),
        FamilyOption("embedding_sharing", str, "disentangled", "disentangled: the discriminator's tables are "
                     "stop_gradient(the generator's) + deltas of its own; none: separate tables",
                     choices=("disentangled", "none"), used_by=("pretrainer",), applies_when=RTD),
        LOSS_CHUNK_SIZE,
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "deberta_v3_pretrainer": "keras_bertology.models.deberta_v3.pretrainer",
})

__all__ = ["DEBERTA_V3", "DEBERTA_V3_PRESETS", "deberta_v3_pretrainer"]
