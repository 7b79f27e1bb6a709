"""ELECTRA: replaced token detection by a discriminator trained against a small MLM generator.

The generator and the discriminator share one embedding layer; the exported
model is the discriminator alone.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.electra.presets import ELECTRA_PRESETS
from keras_bertology.models.family import (LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily,
                                           TrainingDefaults)

ELECTRA = FAMILY = ModelFamily(
    name="electra",
    presets=ELECTRA_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.electra.pretrainer:electra_pretrainer",
    tokenizer_path="keras_bertology.tokenizers.wordpiece:train_wordpiece",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        masker_path="keras_bertology.models.electra.masking:electra_masker",
        packings=("full-sentences", "doc-sentences"),
        prediction_share=0.155,
    ),
    training=TrainingDefaults(
        # At 1e-3 electra-tiny's discriminator settles on "all original" within 100 steps; 3e-4 learns.
        learning_rate=3e-4,
    ),
    conversion=Conversion(
        hf_model_types=("electra",),
        hf_tokenizer_path="keras_bertology.models.electra.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.electra.convert:convert",
        hf_exporter_path="keras_bertology.models.electra.convert:export",
    ),
    options=(
        FamilyOption("generator_fraction", float, None, "generator width / discriminator width (default: the "
                     "preset's)", minimum=0.05, maximum=1.0, used_by=("pretrainer",)),
        FamilyOption("generator_layers", int, None, "generator depth (default: the discriminator's)", minimum=1,
                     maximum=48, used_by=("pretrainer",)),
        FamilyOption("rtd_weight", float, 50.0, "weight of the replaced token detection loss", minimum=0.0,
                     maximum=1000.0, used_by=("pretrainer",)),
        FamilyOption("two_stage_steps", int, 0, "two-stage variant: the generator (as large as the discriminator) "
                     "trains alone this many steps, then the discriminator starts from it with the generator "
                     "frozen (0: joint training)", minimum=0, maximum=10**9, used_by=("pretrainer",)),
        LOSS_CHUNK_SIZE,
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "electra_pretrainer": "keras_bertology.models.electra.pretrainer",
})

__all__ = ["ELECTRA", "ELECTRA_PRESETS", "electra_pretrainer"]
