"""GPT: a causal language model, the autoregressive baseline of the zoo (GPT-2's architecture).

Pretraining reads the corpus as one stream of byte-level BPE tokens, each
document closed by <|endoftext|>, cut into full blocks, and predicts every
next token. Exports serve `score` (log-likelihood of raw strings) and
`generate` (continuations of a prompt) besides the encoder outputs.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import LOSS_CHUNK_SIZE, Conversion, DataRecipe, InputLayout, ModelFamily
from keras_bertology.models.gpt.presets import GPT_PRESETS

GPT = FAMILY = ModelFamily(
    name="gpt",
    presets=GPT_PRESETS,
    backbone_path="keras_bertology.models.gpt.backbone:GPTBackbone",
    pretrainer_path="keras_bertology.models.gpt.pretrainer:GPTPretrainer",
    tokenizer_path="keras_bertology.models.gpt.tokenizer:train_tokenizer",
    shared_tokenizer_path="keras_bertology.models.gpt.tokenizer:shared_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.models.gpt.instances:block_instances",
        masker_path="keras_bertology.data.next_token:next_token_stage",
        masks_tokens=False,
        stage_draws=False,
    ),
    inputs=InputLayout(summary_position="last_text"),
    options=(LOSS_CHUNK_SIZE,),
    conversion=Conversion(
        hf_model_types=("gpt2",),
        hf_tokenizer_path="keras_bertology.models.gpt.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.gpt.convert:convert",
        hf_exporter_path="keras_bertology.models.gpt.convert:export",
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "GPTBackbone": "keras_bertology.models.gpt.backbone",
    "GPTPretrainer": "keras_bertology.models.gpt.pretrainer",
})

__all__ = ["GPT", "GPT_PRESETS", "GPTBackbone", "GPTPretrainer"]
