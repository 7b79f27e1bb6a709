"""DistilBERT's masking stage: 15% of tokens, 80/10/10, chosen with probability proportional to
count^-smoothing (the original's `mlm_smoothing` 0.7), so rare tokens are masked more often than their
share of the text and frequent ones (punctuation, "the") less."""

import numpy as np

from keras_bertology.data.masking import token_masker


def smoothing_weights(token_counts, smoothing):
    """max(count, 1)^-smoothing per vocabulary id: a token never seen weighs as one seen once."""
    return np.maximum(np.asarray(token_counts, np.float64), 1.0) ** -float(smoothing)


def smoothed_masker(context, mlm_smoothing=0.7):
    """`token_masker` weighing its choice by the corpus' `context.token_counts`; without counts (or
    smoothing 0) the choice is uniform, as BERT's."""
    weights = None
    if context.token_counts is not None and mlm_smoothing > 0:
        weights = smoothing_weights(context.token_counts, mlm_smoothing)
    return token_masker(context, selection_weights=weights)
