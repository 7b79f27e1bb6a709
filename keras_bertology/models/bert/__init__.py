"""BERT: encoder backbone, presets, and the MLM + NSP pretrainer."""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.bert.presets import BERT_PRESETS
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, ModelFamily

BERT = FAMILY = ModelFamily(
    name="bert",
    presets=BERT_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.bert.pretrainer:BertPretrainer",
    tokenizer_path="keras_bertology.tokenizers.wordpiece:train_wordpiece",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:sentence_pair_instances",
        masking="static",
    ),
    options=(LOSS_CHUNK_SIZE,),
    conversion=Conversion(
        hf_model_types=("bert",),
        hf_tokenizer_path="keras_bertology.models.bert.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.bert.convert:convert",
        hf_exporter_path="keras_bertology.models.bert.convert:export_bert",
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "BertBackbone": "keras_bertology.models.bert.backbone",
    "BertPretrainer": "keras_bertology.models.bert.pretrainer",
})

__all__ = ["BERT", "BERT_PRESETS", "BertBackbone", "BertPretrainer"]
