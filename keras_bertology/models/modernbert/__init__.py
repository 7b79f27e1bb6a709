"""ModernBERT (Warner et al., 2024): an encoder of today's recipe. Rotary positions instead of a position
table, every third layer global and the others within a sliding window, GeGLU feed-forwards, pre-norm
blocks whose norms and dense layers have no biases; pretrained by masked LM alone at 30%, on byte-level BPE
with [CLS] [SEP] [MASK] [PAD] [UNK] (DeBERTa's special tokens, hence its trainer).

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily, TrainingDefaults
from keras_bertology.models.modernbert.presets import MODERNBERT_PRESETS

MODERNBERT = FAMILY = ModelFamily(
    name="modernbert",
    presets=MODERNBERT_PRESETS,
    backbone_path="keras_bertology.models.modernbert.backbone:ModernBertBackbone",
    pretrainer_path="keras_bertology.models.modernbert.pretrainer:ModernBertPretrainer",
    tokenizer_path="keras_bertology.models.deberta.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        masker_path="keras_bertology.models.modernbert.masking:modernbert_masker",
        packings=("full-sentences", "doc-sentences", "unpadded"),
        # 30% of 128 tokens is 38.4: 40 prediction slots hold every draw.
        prediction_share=0.3125,
    ),
    training=TrainingDefaults(schedule="wsd"),
    conversion=Conversion(
        hf_model_types=("modernbert",),
        hf_tokenizer_path="keras_bertology.models.modernbert.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.modernbert.convert:convert",
        hf_exporter_path="keras_bertology.models.modernbert.convert:export",
    ),
    options=(
        LOSS_CHUNK_SIZE,
        FamilyOption("mask_rate", float, 0.3, "share of the tokens the masked LM predicts (the original's 0.3)",
                     minimum=0.01, maximum=0.5, used_by=("masker",)),
        FamilyOption("global_rotary_base", float, None, "rotary base of the global layers (default: the preset's "
                     "160,000; the original trained at 1,024 tokens with 10,000 and raised it to extend the context, "
                     "see --init-from)", minimum=1.0, maximum=1e9, used_by=("backbone",)),
        FamilyOption("local_window", int, None, "tokens a local layer sees besides its own, half on each side "
                     "(default: the preset's, 128)", minimum=2, maximum=65536, used_by=("backbone",), step=2),
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "ModernBertBackbone": "keras_bertology.models.modernbert.backbone",
    "ModernBertPretrainer": "keras_bertology.models.modernbert.pretrainer",
})

__all__ = ["MODERNBERT", "MODERNBERT_PRESETS", "ModernBertBackbone", "ModernBertPretrainer"]
