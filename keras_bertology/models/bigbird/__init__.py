"""BigBird: BERT's encoder with block-sparse attention (window, global and random blocks), so that
sequences of thousands of tokens fit (Zaheer et al. 2020), pretrained with the RoBERTa recipe as
BigBird-RoBERTa: masked LM alone, dynamic masking, full sentences. The vocabulary is a cased
SentencePiece model with [CLS] [SEP] [MASK] <pad> <unk>.

The family object is imported without TensorFlow; the classes load lazily.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.bigbird.presets import BIGBIRD_PRESETS
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, ModelFamily

BIGBIRD = FAMILY = ModelFamily(
    name="bigbird",
    presets=BIGBIRD_PRESETS,
    backbone_path="keras_bertology.models.bert.backbone:BertBackbone",
    pretrainer_path="keras_bertology.models.bigbird.pretrainer:bigbird_pretrainer",
    tokenizer_path="keras_bertology.models.bigbird.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.data.instances:packed_instances",
        packings=("full-sentences", "doc-sentences"),
    ),
    conversion=Conversion(
        hf_model_types=("big_bird",),
        hf_tokenizer_path="keras_bertology.models.bigbird.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.bigbird.convert:convert",
        hf_exporter_path="keras_bertology.models.bigbird.convert:export",
    ),
    options=(
        FamilyOption("block_size", int, None, "tokens per attention block (default: the preset's; full attention "
                     "up to (5 + 2 x random blocks) x block tokens)", minimum=1, maximum=4096, used_by=("backbone",),
                     config_key="attention_options"),
        FamilyOption("random_blocks", int, None, "random key blocks per query block (default: the preset's)",
                     minimum=0, maximum=64, used_by=("backbone",), config_key="attention_options"),
        LOSS_CHUNK_SIZE,
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "bigbird_pretrainer": "keras_bertology.models.bigbird.pretrainer",
})

__all__ = ["BIGBIRD", "BIGBIRD_PRESETS", "bigbird_pretrainer"]
