"""ELECTRA's masking stage: 15% of tokens, 85% of them [MASK] and 15% unchanged, no random ids."""

from keras_bertology.data.masking import token_masker


def electra_masker(context):
    return token_masker(context, mask_token_rate=0.85, random_token_rate=0.0)
