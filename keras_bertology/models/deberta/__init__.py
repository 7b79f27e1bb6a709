"""DeBERTa: BERT's encoder with disentangled attention over relative positions, pretrained by masked LM
through the enhanced mask decoder (He et al. 2020). The vocabulary is GPT-2's byte-level BPE, learned
from the corpus; inputs are RoBERTa's full sentences without segments, masked dynamically.

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.deberta.presets import DEBERTA_PRESETS
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily

DEBERTA = FAMILY = ModelFamily(
    name="deberta",
    presets=DEBERTA_PRESETS,
    backbone_path="keras_bertology.models.deberta.backbone:DebertaBackbone",
    pretrainer_path="keras_bertology.models.deberta.pretrainer:DebertaPretrainer",
    tokenizer_path="keras_bertology.models.deberta.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        packings=("full-sentences", "doc-sentences"),
    ),
    conversion=Conversion(
        hf_model_types=("deberta",),  # DebertaV2 checkpoints (v3's layout) are the deberta-v3 family's
        hf_tokenizer_path="keras_bertology.models.deberta.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.deberta.convert:convert",
        hf_exporter_path="keras_bertology.models.deberta.convert:export",
    ),
    options=(
        FamilyOption("enhanced_mask_decoder", int, 1, "1: the MLM head reads the enhanced mask decoder (absolute "
                     "positions, the last layer twice); 0: the last layer's states (transformers' head)", minimum=0,
                     maximum=1, used_by=("pretrainer",)),
        LOSS_CHUNK_SIZE,
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "DebertaBackbone": "keras_bertology.models.deberta.backbone",
    "DebertaPretrainer": "keras_bertology.models.deberta.pretrainer",
})

__all__ = ["DEBERTA", "DEBERTA_PRESETS", "DebertaBackbone", "DebertaPretrainer"]
