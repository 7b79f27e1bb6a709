"""DeBERTa-v3's masking stage: 15% of tokens, every one of them [MASK] (no random or unchanged ids)."""

from keras_bertology.data.masking import token_masker


def all_mask_masker(tokenizer, max_predictions, whole_word=False):
    return token_masker(tokenizer, max_predictions, whole_word, mask_token_rate=1.0, random_token_rate=0.0)
