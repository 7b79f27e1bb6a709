"""Downstream metrics against hand-computed cases and independent counting."""

import itertools

import numpy as np
import pytest

from keras_bertology.finetune.metrics import (
    accuracy,
    bio_entities,
    entity_scores,
    exact_match,
    macro_f1,
    normalize_answer,
    span_f1,
)


def test_accuracy_and_macro_f1_by_hand():
    gold = ["sport", "sport", "sport", "tech", "politics", "politics"]
    predicted = ["sport", "sport", "tech", "tech", "tech", "politics"]
    assert accuracy(gold, predicted) == pytest.approx(4 / 6)
    # sport P 2/2 R 2/3 F 0.8; tech P 1/3 R 1 F 0.5; politics P 1 R 1/2 F 2/3.
    assert macro_f1(gold, predicted) == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    # A class only predicted counts with F1 0; integers work as labels.
    assert macro_f1([0, 0], [0, 1]) == pytest.approx((2 / 3 + 0) / 2)
    assert macro_f1(["a"], ["a"]) == accuracy(["a"], ["a"]) == 1.0


def test_macro_f1_equals_the_confusion_matrix_formula():
    rng = np.random.default_rng(0)
    gold, predicted = rng.integers(0, 5, 300), rng.integers(0, 4, 300)
    matrix = np.zeros((5, 5))
    np.add.at(matrix, (gold, predicted), 1)
    true_positive = np.diag(matrix)
    f1 = 2 * true_positive / (matrix.sum(0) + matrix.sum(1))
    assert macro_f1(list(gold), list(predicted)) == pytest.approx(f1.mean())


def test_unbalanced_labels_show_in_macro_f1_not_in_accuracy():
    gold = ["majority"] * 95 + ["rare"] * 5
    always_majority = ["majority"] * 100
    assert accuracy(gold, always_majority) == 0.95
    assert macro_f1(gold, always_majority) == pytest.approx((2 * 0.95 / 1.95) / 2)


def test_bio_chunks_follow_conlleval():
    tags = ["B-PER", "I-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "B-ORG", "I-PER", "O", "B-MISC"]
    assert bio_entities(tags) == {("PER", 0, 3), ("LOC", 4, 6), ("LOC", 6, 7), ("ORG", 7, 8), ("PER", 8, 9),
                                  ("MISC", 10, 11)}
    assert bio_entities(["O", "O"]) == set() and bio_entities([]) == set()
    with pytest.raises(ValueError, match="BIO"):
        bio_entities(["B-PER", "X-PER"])


def test_entity_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O", "O"]]
    # gold 4 entities, predicted 3, exact matches 2 (PER 0-2, ORG 0-1).
    scores = entity_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(2 / 3) and scores["recall"] == pytest.approx(2 / 4)
    assert scores["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    # A boundary error is a miss, not half a hit.
    assert entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])["f1"] == 0.0
    with pytest.raises(ValueError, match="gold labels"):
        entity_scores([["O"]], [["O", "O"]])


def test_entity_scores_count_every_exact_match_once():
    rng = np.random.default_rng(1)
    tags = ["O", "B-A", "I-A", "B-B", "I-B"]
    for _ in range(200):
        gold = list(rng.choice(tags, 12))
        predicted = list(rng.choice(tags, 12))
        scores = entity_scores([gold], [predicted])
        both = bio_entities(gold) & bio_entities(predicted)
        expected_p = len(both) / len(bio_entities(predicted)) if bio_entities(predicted) else 0.0
        assert scores["precision"] == pytest.approx(expected_p)
    assert entity_scores([gold], [gold])["f1"] == (1.0 if bio_entities(gold) else 0.0)


@pytest.mark.parametrize("text,normal", [("The Cat sat.", "cat sat"), ("an  apple, a pear", "apple pear"),
                                         ("theatre", "theatre"), ("", "")])
def test_squad_normalisation(text, normal):
    assert normalize_answer(text) == normal


def test_squad_exact_match_and_f1_by_hand():
    answers = ["Denver Broncos", "The Denver Broncos"]
    assert exact_match("denver broncos!", answers) == 1.0
    assert exact_match("Broncos", answers) == 0.0
    # "the Broncos of Denver" -> [broncos, of, denver]: 2 common with [denver, broncos], P 2/3 R 1.
    assert span_f1("the Broncos of Denver", answers) == pytest.approx(0.8)
    assert span_f1("Carolina", answers) == 0.0
    assert span_f1("x y y", ["y y z"]) == pytest.approx(2 / 3)  # token counts (2 common), not sets (1)
    assert span_f1("a b b", ["b b c"]) == pytest.approx(0.8)  # the article goes: [b, b] against [b, b, c]
    for prediction, answer in itertools.product(["x y", "y"], ["x y z"]):
        assert 0.0 < span_f1(prediction, [answer]) <= 1.0
