"""ELECTRA's masking stage: 15% of tokens, 85% of them [MASK] and 15% unchanged, no random ids."""

from keras_bertology.data.masking import token_masker


def electra_masker(tokenizer, max_predictions, whole_word=False):
    return token_masker(tokenizer, max_predictions, whole_word, mask_token_rate=0.85, random_token_rate=0.0)
