"""Linformer: RoBERTa's encoder with low-rank attention, keys and values projected along the sequence to
k rows, so memory and time grow linearly with the length (Wang et al. 2020); pretrained with the RoBERTa
recipe, as the paper does: masked LM alone, dynamic masking, full sentences, byte-level BPE. transformers
has no Linformer: no import or export.

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.models.family import LOSS_CHUNK_SIZE, DataRecipe, FamilyOption, ModelFamily
from keras_bertology.models.linformer.presets import LINFORMER_PRESETS

# LowRankSelfAttention's sharing modes, named here so that the family loads without Keras.
SHARING = ("none", "headwise", "key_value", "layerwise")

LINFORMER = FAMILY = ModelFamily(
    name="linformer",
    presets=LINFORMER_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.roberta.pretrainer:RobertaPretrainer",
    tokenizer_path="keras_bertology.models.roberta.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        packings=("full-sentences", "doc-sentences"),
    ),
    options=(
        LOSS_CHUNK_SIZE,
        FamilyOption("projected_length", int, None, "k, the rows keys and values are projected to (default: the "
                     "preset's)", minimum=1, maximum=65536, used_by=("backbone",), config_key="attention_options"),
        FamilyOption("sharing", str, None, "which projections are shared: none (per head), headwise, key_value, "
                     "layerwise (one for the whole encoder; default: the preset's)", choices=SHARING,
                     used_by=("backbone",), config_key="attention_options"),
    ),
)

__all__ = ["LINFORMER", "LINFORMER_PRESETS"]
