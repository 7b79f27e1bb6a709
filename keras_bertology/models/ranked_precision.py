"""R-precision of a binary detector: flag as many tokens as there are positives, most suspicious first.

A detector that has learned something but is unsure (early replaced token
detection) answers "original" everywhere at a 0.5 threshold, so its
precision and recall there read 0 although its ranking is good. Flagging
exactly as many tokens as were replaced removes the threshold: precision
and recall are then the same number, and a guess that flags the same count
at random scores the positive rate. It is AUC read as a precision.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_bertology")
class RankedPrecision(keras.metrics.Metric):
    """Precision (= recall) of the top-k logits of each batch, k the batch's number of positives.

    Inputs: labels and logits of the same shape; `sample_weight` (the padding
    mask) > 0 marks the tokens that count. Ties at the k-th logit are broken at
    random in expectation, so a constant detector scores the positive rate.
    """

    def __init__(self, name="ranked_precision", **kwargs):
        super().__init__(name=name, **kwargs)
        self.hits = self.add_variable(shape=(), initializer="zeros", name="hits")
        self.positives = self.add_variable(shape=(), initializer="zeros", name="positives")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.reshape(ops.cast(y_true, "float32"), [-1])
        logits = ops.reshape(ops.cast(y_pred, "float32"), [-1])
        counted = ops.ones_like(labels) if sample_weight is None else ops.reshape(
            ops.cast(ops.cast(sample_weight, "float32") > 0, "float32"), [-1])
        labels = labels * counted
        # Tokens that do not count rank below every token that does.
        floor = ops.min(logits) - 1.0
        scores = ops.where(counted > 0, logits, floor)
        positives = ops.sum(labels)
        k = ops.cast(positives, "int32")
        kth = _kth_largest(scores, positives)
        above = ops.cast(scores > kth, "float32") * counted
        tied = ops.cast(scores == kth, "float32") * counted
        # Of the tied tokens, k - (number above) are flagged: in expectation that share of their positives.
        share = (positives - ops.sum(above)) / ops.maximum(ops.sum(tied), 1.0)
        hits = ops.sum(labels * above) + share * ops.sum(labels * tied)
        self.hits.assign_add(ops.where(positives > 0, hits, 0.0))
        self.positives.assign_add(positives)

    def result(self):
        return ops.divide_no_nan(self.hits, self.positives)

    def reset_state(self):
        self.hits.assign(0.0)
        self.positives.assign(0.0)


def _kth_largest(scores, k, halvings=48):
    """The k-th largest of `scores` (k >= 1), by halving an interval [low, high) with at least k scores
    at or above low and fewer at or above high, then taking the smallest score at or above low.

    Not a sort: inside an XLA-compiled train step on a CPU, sorting the scores made ELECTRA's whole step
    4x slower (benchmarks/peer_suite.py, 2k tokens), while the 48 counting passes cost next to nothing;
    48 halvings of any finite range of logits end narrower than the gap between two distinct scores.
    """
    k = ops.maximum(k, 1.0)

    def halve(_, bounds):
        low, high = bounds
        middle = low + (high - low) / 2
        enough = ops.sum(ops.cast(scores >= middle, "float32")) >= k
        return ops.where(enough, middle, low), ops.where(enough, high, middle)

    low, _ = ops.fori_loop(0, halvings, halve, (ops.min(scores), ops.max(scores) + 1.0))
    return ops.min(ops.where(scores >= low, scores, ops.max(scores)))

