"""The fill-in examples' word-frequency baseline: each answer's rank by its count alone, and the summary's
account of how many answers the model ranks above it, with a sign test."""

import numpy as np

from keras_bertology.outputs.fill_in import FILL_IN, frequency_ranks


def test_ids_rank_by_count_alone_with_ties_sharing_their_best_rank_and_specials_last():
    counts = np.array([900, 5, 40, 40, 7, 0, 40, 2])  # id 0 a special (the padding), counted most
    ranks = frequency_ranks(counts, special_ids=[0])
    # 40 x3 share rank 1; then 7, 5, 2, 0; the special after every word, even one never seen.
    assert ranks.tolist() == [8, 5, 1, 1, 4, 7, 1, 6]
    # Against a sort written out: for every id, 1 + the number of non-special ids counted more often.
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 30, 500)
    specials = [0, 3, 7]
    kept = np.delete(counts, specials)
    expected = [1 + int((kept > count).sum()) for count in counts]
    got = frequency_ranks(counts, specials)
    assert [got[i] for i in range(500) if i not in specials] == [e for i, e in enumerate(expected) if i not in specials]
    assert all(got[i] == 1 + len(kept) for i in specials)


def _example(rank, unigram_rank):
    example = {"text": "a [MASK] line", "answer": "word", "answer_rank": rank,
               "top": [{"token": "the", "probability": 0.1}]}
    return example if unigram_rank is None else {**example, "unigram_rank": unigram_rank}


def test_the_summary_puts_each_answers_frequency_rank_beside_its_rank_and_tests_those_ranked_above():
    lines = FILL_IN.summary_lines({"fill_mask": [_example(4, 10), _example(30, 12), _example(7, 7)]})
    assert "answer 'word' ranked 4 (by frequency alone 10); model: the 0.10" in lines[2]
    # 1 of 2 untied above: P(X >= 1 | Binomial(2, 1/2)) = 3/4.
    assert lines[-1] == ("  the model ranks 1 of 3 answers above their rank by word frequency alone (1 tied; sign "
                         "test p = 0.75): not yet told apart from word frequency")
    # 5 of 5: p = 1/32 = 0.03; 7 of 8 with one tie: 1/128; 5 of 7 untied: (21 + 7 + 1) / 128 = 0.23.
    for pairs, expected in (([(1, 2)] * 5, "5 of 5 answers above their rank by word frequency alone (0 tied; sign "
                                           "test p = 0.03): the model reads the context beyond word frequency"),
                            ([(1, 2)] * 7 + [(3, 3)], "(1 tied; sign test p = 0.01): the model reads"),
                            ([(1, 2)] * 5 + [(9, 2)] * 2 + [(3, 3)], "(1 tied; sign test p = 0.23): not yet")):
        line = FILL_IN.summary_lines({"fill_mask": [_example(*pair) for pair in pairs]})[-1]
        assert expected in line, line
    # Metrics of a run without counts (older runs) keep the old lines.
    lines = FILL_IN.summary_lines({"fill_mask": [_example(4, None)]})
    assert lines[-1] == "      answer 'word' ranked 4; model: the 0.10"
