"""XLNet: permutation language modeling with two-stream relative attention and segment recurrence.

Pretraining reads the corpus as `batch_size` contiguous streams (batch row r
continues row r's text), predicts the last 1/K of a random factorization
order from the query stream, and carries each layer's states to the next
batch as Transformer-XL memory. Fine-tuning and exports run the content
stream only.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.family import (LOSS_CHUNK_SIZE, Conversion, DataRecipe, FamilyOption, InputLayout,
                                           ModelFamily)
from keras_bertology.models.xlnet.presets import XLNET_PRESETS

XLNET = FAMILY = ModelFamily(
    name="xlnet",
    presets=XLNET_PRESETS,
    backbone_path="keras_bertology.models.xlnet.backbone:XLNetBackbone",
    pretrainer_path="keras_bertology.models.xlnet.pretrainer:XLNetPretrainer",
    tokenizer_path="keras_bertology.models.xlnet.tokenizer:train_tokenizer",
    data=DataRecipe(
        instances_path="keras_bertology.models.xlnet.instances:stream_instances",
        masks_units=False,
        masker_path="keras_bertology.models.xlnet.permutation:permutation_masker",
        prediction_share=1 / 6,
        stream_batches=True,
    ),
    inputs=InputLayout(
        segment_packer_path="keras_bertology.models.xlnet.packing:pack_segments",
        summary_position="last",
    ),
    conversion=Conversion(
        hf_model_types=("xlnet",),
        hf_tokenizer_path="keras_bertology.models.xlnet.hf_tokenizer:HF_TOKENIZER",
        converter_path="keras_bertology.models.xlnet.convert:convert",
        hf_exporter_path="keras_bertology.models.xlnet.convert:export",
    ),
    options=(
        FamilyOption("mem_len", int, 64, "Transformer-XL memory: states of the previous batch kept per layer "
                     "(0: none)", minimum=0, maximum=4096, used_by=("pretrainer",)),
        FamilyOption("reuse_len", int, None, "positions of each sequence carried over as memory and permuted "
                     "apart from the rest (default: half the sequence)", minimum=1, maximum=4096,
                     used_by=("instances", "masker", "pretrainer")),
        FamilyOption("perm_size", int, None, "length of the blocks sharing one local permutation (default: "
                     "--reuse-len)", minimum=1, maximum=4096, used_by=("masker",)),
        FamilyOption("partial_k", float, 6.0, "partial prediction: predict the last 1/K of each factorization "
                     "order", minimum=1.0, maximum=100.0, used_by=("masker",)),
        FamilyOption("bi_data", int, 1, "1: half of each batch reads its streams backwards (XLNet's bi_data); 0: "
                     "forward only", minimum=0, maximum=1, used_by=("instances", "masker", "pretrainer")),
        LOSS_CHUNK_SIZE,
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "XLNetBackbone": "keras_bertology.models.xlnet.backbone",
    "XLNetPretrainer": "keras_bertology.models.xlnet.pretrainer",
})

__all__ = ["XLNET", "XLNET_PRESETS", "XLNetBackbone", "XLNetPretrainer"]
