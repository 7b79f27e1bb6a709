"""DistilBERT: a student half as deep as a trained BERT or RoBERTa (its teacher), started from the
teacher's embeddings and a spread of its layers, trained to match the teacher's masked-LM distribution and
hidden states as well as the masked tokens (Sanh et al. 2019). The student reads the teacher's vocabulary;
its encoder is BERT's without token types or pooler.

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.distilbert.presets import DISTILBERT_PRESETS
from keras_bertology.models.family import Conversion, DataRecipe, FamilyOption, ModelFamily, TrainingDefaults

DISTILBERT = FAMILY = ModelFamily(
    name="distilbert",
    presets=DISTILBERT_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.distilbert.pretrainer:distilbert_pretrainer",
    tokenizer_path="keras_bertology.tokenizers.wordpiece:train_wordpiece",
    context_path="keras_bertology.models.distilbert.teacher:teacher_context",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        masker_path="keras_bertology.models.distilbert.masking:smoothed_masker",
        packings=("full-sentences", "doc-sentences"),
    ),
    training=TrainingDefaults(learning_rate=5e-4),
    conversion=Conversion(
        hf_model_types=("distilbert",),
        hf_tokenizer_path="keras_bertology.models.distilbert.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.distilbert.convert:convert",
        hf_exporter_path="keras_bertology.models.distilbert.convert:export",
    ),
    options=(
        FamilyOption("teacher", str, None, "the trained masked LM to distil: a run folder or a Hugging Face "
                     "folder (required)", used_by=("context",)),
        FamilyOption("temperature", float, 2.0, "softening of both distributions in the KL", minimum=0.05,
                     maximum=100.0, used_by=("pretrainer",)),
        FamilyOption("alpha_kl", float, 5.0, "weight of the KL to the teacher's distribution", minimum=0.0,
                     maximum=1000.0, used_by=("pretrainer",)),
        FamilyOption("alpha_mlm", float, 2.0, "weight of the masked-LM cross-entropy", minimum=0.0, maximum=1000.0,
                     used_by=("pretrainer",)),
        FamilyOption("alpha_cos", float, 1.0, "weight of the cosine loss between last hidden states", minimum=0.0,
                     maximum=1000.0, used_by=("pretrainer",)),
        FamilyOption("kl_positions", str, "tokens", "where the KL applies: every real token, or the masked ones "
                     "(the original's restrict_ce_to_mask)", choices=("tokens", "masked"), used_by=("pretrainer",)),
        FamilyOption("mlm_smoothing", float, 0.7, "tokens are masked in proportion to count^-smoothing (0: "
                     "uniformly)", minimum=0.0, maximum=1.0),
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "DistilBertPretrainer": "keras_bertology.models.distilbert.pretrainer",
    "distilbert_pretrainer": "keras_bertology.models.distilbert.pretrainer",
    "spread_layers": "keras_bertology.models.distilbert.pretrainer",
})

__all__ = ["DISTILBERT", "DISTILBERT_PRESETS", "DistilBertPretrainer", "distilbert_pretrainer", "spread_layers"]
