"""ELECTRA's masking stage: 15% of tokens, 85% of them [MASK] and 15% unchanged, no random ids."""

from keras_bertology.data.masking import DynamicMasker, MaskingConfig


def electra_masker(tokenizer, max_predictions, whole_word=False):
    config = MaskingConfig(max_predictions=max_predictions, mask_token_rate=0.85, random_token_rate=0.0,
                           whole_word=whole_word)
    return DynamicMasker(config, tokenizer.vocab_size, tokenizer.mask_id, tokenizer.pad_id, tokenizer.special_ids,
                         tokenizer.word_start_table)
