"""RankedPrecision (ELECTRA's threshold-free detection score) against a brute-force count."""

import numpy as np
import pytest

from keras_bertology.models.ranked_precision import RankedPrecision


def _brute_force(batches):
    """Sum over batches of the positives among the top-k counted logits (no ties), over all positives."""
    hits = positives = 0
    for labels, logits, weights in batches:
        labels, logits, counted = labels.ravel(), logits.ravel(), weights.ravel() > 0
        k = int(labels[counted].sum())
        order = np.argsort(-logits[counted], kind="stable")[:k]
        hits += labels[counted][order].sum()
        positives += k
    return hits / positives


def _batch(rng, skill, rate=0.15, shape=(8, 32, 1)):
    labels = (rng.random(shape) < rate).astype("float32")
    logits = (rng.normal(size=shape) + skill * labels).astype("float32")
    weights = np.ones(shape[:2], "float32")
    weights[:, rng.integers(16, 32):] = 0  # padding: its labels are 0, its logits must not rank
    labels[weights == 0] = 0
    logits[weights == 0] = 50.0
    return labels, logits, weights


@pytest.mark.parametrize("skill", [0.0, 1.0, 3.0])
def test_ranked_precision_counts_the_positives_among_the_top_k_of_each_batch(skill):
    rng = np.random.default_rng(int(skill))
    batches = [_batch(rng, skill) for _ in range(5)]
    metric = RankedPrecision()
    for labels, logits, weights in batches:
        metric.update_state(labels, logits, sample_weight=weights)
    assert float(metric.result()) == pytest.approx(_brute_force(batches), abs=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_guessing_scores_the_positive_rate_and_a_perfect_ranking_one():
    rng = np.random.default_rng(7)
    labels = (rng.random((64, 128, 1)) < 0.15).astype("float32")
    rate = labels.mean()
    constant = RankedPrecision()
    constant.update_state(labels, np.zeros_like(labels))  # every token tied: expected share of a random pick
    assert float(constant.result()) == pytest.approx(rate, rel=1e-5)
    coin = RankedPrecision()
    coin.update_state(labels, rng.normal(size=labels.shape).astype("float32"))
    # 1,228 positives: a random ranking's hits are hypergeometric, sd = sqrt(rate (1 - rate) / k) = 0.010
    assert abs(float(coin.result()) - rate) < 0.04
    perfect = RankedPrecision()
    perfect.update_state(labels, labels - 0.5)
    assert float(perfect.result()) == 1.0
