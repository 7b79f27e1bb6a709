"""Transformer-XL: a causal language model with segment-level recurrence and relative positions.

Pretraining reads the corpus as `batch_size` contiguous streams (batch row r
continues row r's text, as in `xlnet`), predicts every next token through an
adaptive softmax, and carries each layer's states to the next batch as
memory. The vocabulary is GPT-2's kind, byte-level BPE learned from the
corpus (the original's word-level WikiText-103 vocabulary belongs to that
corpus). Exports serve `score` and `generate` without memory, like `gpt`.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import Conversion, DataRecipe, FamilyOption, InputLayout, ModelFamily
from keras_bertology.models.transformer_xl.presets import TRANSFORMER_XL_PRESETS

TRANSFORMER_XL = FAMILY = ModelFamily(
    name="transformer-xl",
    presets=TRANSFORMER_XL_PRESETS,
    backbone_path="keras_bertology.models.transformer_xl.backbone:TransformerXLBackbone",
    pretrainer_path="keras_bertology.models.transformer_xl.pretrainer:TransformerXLPretrainer",
    tokenizer_path="keras_bertology.models.gpt.tokenizer:train_tokenizer",
    shared_tokenizer_path="keras_bertology.models.gpt.tokenizer:shared_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.models.transformer_xl.instances:stream_segments",
        masker_path="keras_bertology.data.next_token:next_token_stage",
        stream_batches=True,
        masks_tokens=False,
        stage_draws=False,
    ),
    inputs=InputLayout(summary_position="last_text"),
    conversion=Conversion(
        hf_model_types=("transfo-xl",),
        converter_path="keras_bertology.models.transformer_xl.convert:convert",
    ),
    options=(
        FamilyOption("mem_len", int, None, "Transformer-XL memory: states of the previous batch kept per layer "
                     "(0: none; default: the preset's)", minimum=0, maximum=4096, used_by=("pretrainer",)),
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "TransformerXLBackbone": "keras_bertology.models.transformer_xl.backbone",
    "TransformerXLPretrainer": "keras_bertology.models.transformer_xl.pretrainer",
})

__all__ = ["TRANSFORMER_XL", "TRANSFORMER_XL_PRESETS", "TransformerXLBackbone", "TransformerXLPretrainer"]
