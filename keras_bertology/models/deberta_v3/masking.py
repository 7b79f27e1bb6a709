"""DeBERTa-v3's masking stage: 15% of tokens, every one of them [MASK] (no random or unchanged ids)."""

from keras_bertology.data.masking import token_masker


def all_mask_masker(context):
    return token_masker(context, mask_token_rate=1.0, random_token_rate=0.0)
