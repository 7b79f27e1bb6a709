"""The next-token objective of autoregressive families: targets, weights and perplexity.

A causal LM predicts, at every position t, the token at t + 1: the data stage
(`data.next_token`) writes those targets as `next_token_ids` and weighs each
position by whether its next token is real (`next_token_weights`), so the
last position of a row and padding count for nothing.
"""

import keras

from keras_bertology.models.pretrainer import WEIGHTED_AVERAGE, Objective, accuracy, sparse_cross_entropy


@keras.saving.register_keras_serializable(package="keras_bertology")
class Perplexity(keras.metrics.MeanMetricWrapper):
    """exp of the weighted mean next-token cross-entropy: the number of equally likely tokens the model is
    as unsure as. Logged windows report it beside the loss, which it exponentiates."""

    def __init__(self, name="perplexity", dtype=None, scored=False):
        super().__init__(_scored_loss if scored else _token_cross_entropy, name=name, dtype=dtype)
        self.scored = scored

    def result(self):
        return keras.ops.exp(super().result())

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, **({"scored": True} if self.scored else {})}


def _token_cross_entropy(targets, logits):
    return keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)


def next_token_metrics(prefix):
    return [*accuracy(prefix), Perplexity(name=f"{prefix}perplexity")]


# Causal LM: the next token at every position; positions without a real next token weigh 0.
CLM = Objective("clm", label_key="next_token_ids", weight_key="next_token_weights", make_loss=sparse_cross_entropy,
                make_metrics=next_token_metrics, predicts_tokens=True)


# The same objective where the model scores its targets itself (`layers.TokenScoresInChunks`, the targets an
# input): its output holds each position's (cross-entropy, target is the arg-max), not logits.
def _scored_loss(targets, scores):
    return scores[..., 0]


def _scored_correct(targets, scores):
    return scores[..., 1]


@keras.saving.register_keras_serializable(package="keras_bertology")
class ScoredCrossEntropy(keras.losses.Loss):
    """The cross-entropy the model computed per target, averaged over the targets that carry weight."""

    def __init__(self, name="cross_entropy", reduction=WEIGHTED_AVERAGE, dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return _scored_loss(y_true, y_pred)


def scored_cross_entropy():
    return ScoredCrossEntropy()


def scored_next_token_metrics(prefix):
    return [keras.metrics.MeanMetricWrapper(_scored_correct, name=f"{prefix}accuracy"),
            Perplexity(name=f"{prefix}perplexity", scored=True)]


CLM_IN_CHUNKS = Objective("clm", label_key="next_token_ids", weight_key="next_token_weights",
                          make_loss=scored_cross_entropy, make_metrics=scored_next_token_metrics, predicts_tokens=True)
