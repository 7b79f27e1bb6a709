"""ERNIE 1.0: BERT's encoder and objectives (masked LM and next-sentence prediction) trained with
knowledge masking (Sun et al. 2019): whole words first, then whole phrases, then whole entities, each
stage a third of the run's steps (`--masking-units`, which any masked-LM family also takes).

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.models.ernie.presets import ERNIE_PRESETS
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, ModelFamily

ERNIE = FAMILY = ModelFamily(
    name="ernie",
    presets=ERNIE_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.bert.pretrainer:BertPretrainer",
    tokenizer_path="keras_bertology.tokenizers.wordpiece:train_wordpiece",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:sentence_pair_instances",
        masking_units="words,phrases,entities",
    ),
    options=(LOSS_CHUNK_SIZE,),
    conversion=Conversion(
        hf_model_types=("ernie",),
        hf_tokenizer_path="keras_bertology.models.bert.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.ernie.convert:convert",
        hf_exporter_path="keras_bertology.models.ernie.convert:export",
    ),
)

__all__ = ["ERNIE", "ERNIE_PRESETS"]
