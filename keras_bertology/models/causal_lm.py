"""The next-token objective of autoregressive families: targets, weights and perplexity.

A causal LM predicts, at every position t, the token at t + 1: the data stage
(`data.next_token`) writes those targets as `next_token_ids` and weighs each
position by whether its next token is real (`next_token_weights`), so the
last position of a row and padding count for nothing.
"""

import keras

from keras_bertology.models.pretrainer import (
    Objective,
    OfLossMean,
    accuracy,
    scored,
    scored_accuracy,
    scored_loss,
    sparse_cross_entropy,
)


@keras.saving.register_keras_serializable(package="keras_bertology")
class Perplexity(OfLossMean):
    """exp of the weighted mean next-token cross-entropy: the number of equally likely tokens the model is
    as unsure as. Logged windows report it beside the loss, which it exponentiates (and, beside the
    objective's own loss metric, reads from it)."""

    def __init__(self, name="perplexity", dtype=None, scored=False):
        super().__init__(scored_loss if scored else _token_cross_entropy, keras.ops.exp, name=name,
                         dtype=dtype)
        self.scored = scored

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, **({"scored": True} if self.scored else {})}


def _token_cross_entropy(targets, logits):
    return keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)


def next_token_metrics(prefix):
    return [*accuracy(prefix), Perplexity(name=f"{prefix}perplexity")]


# Causal LM: the next token at every position; positions without a real next token weigh 0.
CLM = Objective("clm", label_key="next_token_ids", weight_key="next_token_weights", make_loss=sparse_cross_entropy,
                make_metrics=next_token_metrics, predicts_tokens=True)


def scored_next_token_metrics(prefix):
    return [*scored_accuracy(prefix), Perplexity(name=f"{prefix}perplexity", scored=True)]


# The causal LM where the model scores its targets itself, `--loss-chunk-size` (see `scored`).
CLM_IN_CHUNKS = scored(CLM, scored_next_token_metrics)
