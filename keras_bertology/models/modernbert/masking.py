"""ModernBERT's masking: BERT's 80/10/10 replacement of the chosen tokens, at 30% of them."""

from keras_bertology.data.masking import token_masker


def modernbert_masker(context, mask_rate=0.3, **rates):
    """`data.masking.token_masker` choosing `mask_rate` of the tokens (the original's 30%)."""
    return token_masker(context, mask_rate=mask_rate, **rates)
