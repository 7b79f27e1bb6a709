"""RoBERTa: the BERT backbone without segments or pooler, pretrained by MLM only, with a byte-level BPE
vocabulary learned from the corpus (as the original's; it runs inside the SavedModel graph and exports
as RobertaTokenizer's vocab.json + merges.txt)."""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, ModelFamily
from keras_bertology.models.roberta.presets import ROBERTA_PRESETS

ROBERTA = FAMILY = ModelFamily(
    name="roberta",
    presets=ROBERTA_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.roberta.pretrainer:RobertaPretrainer",
    tokenizer_path="keras_bertology.models.roberta.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        packings=("full-sentences", "doc-sentences", "unpadded"),
    ),
    options=(LOSS_CHUNK_SIZE,),
    conversion=Conversion(
        hf_model_types=("roberta",),
        hf_tokenizer_path="keras_bertology.models.roberta.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.bert.convert:convert",
        hf_exporter_path="keras_bertology.models.bert.convert:export_roberta",
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "RobertaPretrainer": "keras_bertology.models.roberta.pretrainer",
})

__all__ = ["ROBERTA", "ROBERTA_PRESETS", "RobertaPretrainer"]
