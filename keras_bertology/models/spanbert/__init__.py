"""SpanBERT: BERT's encoder pretrained on single segments by span masking, MLM + span boundary objective.

Published SpanBERT checkpoints are BERT checkpoints (`model_type` "bert"),
so `bertology convert` imports them through the BERT family.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily
from keras_bertology.models.spanbert.presets import SPANBERT_PRESETS

SPANBERT = FAMILY = ModelFamily(
    name="spanbert",
    presets=SPANBERT_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.spanbert.pretrainer:SpanBertPretrainer",
    tokenizer_path="keras_bertology.models.spanbert.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        masker_path="keras_bertology.models.spanbert.masking:span_masker",
        packings=("doc-sentences", "full-sentences"),
    ),
    conversion=Conversion(
        # Exported as transformers' BertForMaskedLM: the span boundary head has no transformers counterpart.
        hf_exporter_path="keras_bertology.models.bert.convert:export_bert",
    ),
    options=(FamilyOption("span_p", float, 0.2, "p of the Geometric span length in words", minimum=0.01, maximum=1.0),
             FamilyOption("max_span", int, 10, "longest span in words (the law is renormalised)", minimum=1,
                          maximum=30),
             LOSS_CHUNK_SIZE),
)

__getattr__ = lazy_attributes(__name__, {
    "SpanBertPretrainer": "keras_bertology.models.spanbert.pretrainer",
})

__all__ = ["SPANBERT", "SPANBERT_PRESETS", "SpanBertPretrainer"]
