"""Linear probes (keras_bertology/probing.py): each depth's states as the blocks compute them, the regression
and its scalar mix against what they must find on data whose answer is known, and words read at their
first piece."""

import numpy as np
import pytest
from scipy.optimize import check_grad

from keras_bertology import probing
from keras_bertology.finetune.task_data import TaskData
from keras_bertology.layers import merge_attention_masks
from keras_bertology.models.bert.backbone import BertBackbone


def _bert():
    return BertBackbone(vocab_size=60, num_layers=3, num_heads=2, hidden_size=8, intermediate_size=16,
                        max_positions=16)


def test_each_depth_is_the_previous_one_through_its_block():
    backbone = _bert()
    rng = np.random.default_rng(0)
    padding = np.ones((2, 7), "int32")
    padding[1, 5:] = 0
    inputs = {"token_ids": rng.integers(5, 60, (2, 7)).astype("int32"), "segment_ids": np.zeros((2, 7), "int32"),
              "padding_mask": padding}
    states = [np.asarray(state) for state in backbone.hidden_states(inputs)]
    assert len(states) == 4
    embedded = backbone.get_layer("embeddings")(inputs["token_ids"], inputs["segment_ids"])
    np.testing.assert_allclose(states[0], np.asarray(embedded), atol=1e-6)
    mask = merge_attention_masks(padding)
    for depth in range(3):
        block = backbone.get_layer(f"encoder_block_{depth}")
        np.testing.assert_allclose(states[depth + 1], np.asarray(block(states[depth], attention_mask=mask)),
                                   atol=1e-5)
    np.testing.assert_allclose(states[-1], np.asarray(backbone(inputs)["sequence_output"]), atol=1e-6)


@pytest.mark.parametrize("mix", [False, True])
def test_the_gradient_is_the_losss(mix):
    rng = np.random.default_rng(1)
    stacked = rng.normal(size=(3 if mix else 1, 30, 4))
    targets = np.eye(3)[rng.integers(0, 3, 30)]
    objective = probing._Objective(stacked, targets, mix)
    point = rng.normal(size=objective.start().shape)
    assert check_grad(lambda p: objective(p)[0], lambda p: objective(p)[1], point) < 1e-5


def _blobs(rng, count, width, centres, spread):
    labels = rng.integers(0, len(centres), count)
    return centres[labels] + spread * rng.normal(size=(count, width)), labels


def test_a_probe_finds_separable_classes_and_not_noise():
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(4, 16)) * 3
    states, labels = _blobs(rng, 2000, 16, centres, 1.0)
    classes = np.arange(4)
    fitted = probing.fit_probe(states[:1000], labels[:1000], classes)
    assert fitted.mix_weights is None and probing.macro_f1(labels[1000:], fitted.predict(states[1000:]), classes) > 0.95
    noise = rng.normal(size=(2000, 16))
    fitted = probing.fit_probe(noise[:1000], labels[:1000], classes)
    assert probing.macro_f1(labels[1000:], fitted.predict(noise[1000:]), classes) < 0.35  # chance is 0.25


def test_the_mix_weighs_the_depth_that_holds_the_labels():
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, 8)) * 2
    informative, labels = _blobs(rng, 1500, 8, centres, 1.0)
    # The informative depth off the middle: a mix that read the depths in another order would miss it.
    depths = [rng.normal(size=(1500, 8)), rng.normal(size=(1500, 8)), informative]
    data = probing.ProbeData(depths, labels, np.arange(1500) < 1000, 0)
    result = probing.probe(data)
    assert np.argmax(result["layers"]) == 2 and result["layers"][2] > 0.9 > max(result["layers"][:2]) + 0.4
    assert result["mix"] > 0.9 and np.argmax(result["mix_weights"]) == 2 and result["mix_weights"][2] > 0.5
    assert (result["train"], result["test"]) == (1000, 500)


def _fits(depths, labels, train, classes):
    depths = probing.standardise(depths, train)
    fits = [probing.fit_probe(states[train], labels[train], classes) for states in depths]
    return fits, probing.fit_probe([states[train] for states in depths], labels[train], classes, depth_probes=fits)


@pytest.mark.parametrize("seed", range(4))
def test_the_mix_of_many_wide_depths_scores_as_its_best_depth_on_few_examples(seed):
    """150 examples of 128 features a depth, 5 classes, the deepest depth the most informative (BBC News'
    shape): every depth separates its training examples, so the L2 penalty alone decides how a probe
    generalises, and the mix must be held by it as the depths are. (With a scale of its own the mix grew
    its features instead of its weights: training loss 3e-6 against the best depth's 0.03, and 0.56-0.73
    macro-F1 on the test examples where the best depth scores 0.70-0.77.)"""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, 450)
    depths = [rng.normal(size=(5, 128))[labels] * (0.3 + 0.2 * depth) + 3 * rng.normal(size=(450, 128))
              for depth in range(3)]
    result = probing.probe(probing.ProbeData(depths, labels, np.arange(450) < 150, 0))
    assert result["layers"][2] > max(result["layers"][:2]) + 0.1
    assert result["mix"] >= result["layers"][2] - 0.01


def test_the_mix_fits_as_well_as_its_best_depth_where_an_even_mix_cancels_the_depths():
    """Two depths of opposite sign: the even mix the optimiser would start from sums them to zero, a
    saddle where no gradient moves it (its loss stays log 3). Started on the best depth, the mix ends at
    least as low as that depth's own probe."""
    rng = np.random.default_rng(4)
    informative, labels = _blobs(rng, 1500, 8, rng.normal(size=(3, 8)) * 2, 1.0)
    train = np.arange(1500) < 1000
    fits, mix = _fits([informative, -informative], labels, train, np.arange(3))
    assert mix.loss <= min(fit.loss for fit in fits) + 1e-6 and mix.loss < 0.5 * np.log(3)
    assert probing.macro_f1(labels[~train], mix.predict([informative[~train] * s for s in (1, -1)]),
                            np.arange(3)) > 0.9


def test_the_mix_combines_depths_that_each_tell_apart_some_of_the_classes():
    """Depth 0 tells classes 0, 1 and {2, 3} apart; depth 1 tells {0, 1}, 2 and 3: each alone scores about
    0.75 macro-F1, their mix all four classes. Started on one depth only, the mix would stay there."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 4, 1200)
    first, second = rng.normal(size=(4, 16)) * 2, rng.normal(size=(4, 16)) * 2
    first[2:], second[:2] = first[2], second[0]
    depths = [centres[labels] + rng.normal(size=(1200, 16)) for centres in (first, second)]
    result = probing.probe(probing.ProbeData(depths + [rng.normal(size=(1200, 16))], labels,
                                             np.arange(1200) < 600, 0))
    assert max(result["layers"]) < 0.8 and result["mix"] > 0.95 and result["mix_weights"][2] < 0.05


def test_macro_f1_averages_each_classs_f1():
    truth, predicted = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 0])
    # class 0: precision 1/2, recall 1/2; class 1: 2/3, 1; class 2: never predicted
    assert probing.macro_f1(truth, predicted, np.arange(3)) == pytest.approx((0.5 + 0.8 + 0) / 3)


def test_words_are_read_at_their_first_piece_and_words_cut_off_are_counted():
    from keras_bertology.models.registry import get_family
    from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "king", "##dom", "falls"]
    tokenizer = WordPieceTokenizer(vocabulary, lower_case=True)
    backbone = _bert()
    sentences = [["the", "kingdom", "falls"], ["kingdom", "the", "king", "falls", "the", "king"]]
    depths, where, dropped = probing.word_states(backbone, get_family("bert"), tokenizer, 8, sentences)
    # 8 positions hold [CLS], 6 pieces and [SEP]: the second sentence's 7 pieces lose the last, its last "king".
    assert where == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (1, 4)] and dropped == 1
    states = [np.asarray(state) for state in backbone.hidden_states(
        {"token_ids": np.array([[2, 5, 6, 7, 8, 3, 0, 0]], "int32"), "segment_ids": np.zeros((1, 8), "int32"),
         "padding_mask": np.array([[1, 1, 1, 1, 1, 1, 0, 0]], "int32")})]
    for depth, state in enumerate(states):  # "the" at 1, "kingdom" at its first piece 2, "falls" at 4
        np.testing.assert_allclose(depths[depth][:3], state[0, [1, 2, 4]], atol=1e-5)


def test_each_seed_draws_its_training_examples_from_the_pool_and_every_seed_is_tested_alike():
    from keras_bertology.models.registry import get_family
    from keras_bertology.tokenizers.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "king", "sea"],
                                   lower_case=True)
    words = [["the", "king"], ["the", "sea"], ["king"], ["sea", "sea", "sea"]] * 5

    def tagged(sentences):
        return [{"words": w, "tags": ["X" if x == "king" else "O" for x in w]} for w in sentences]

    task = TaskData("toy", "tagging", ("O", "X"), False, {"train": tagged(words), "dev": [],
                                                           "test": tagged(words[:4])}, "toy")
    data, rows = probing.task_probe_data(_bert(), get_family("bert"), tokenizer, 8, task, 16, 4)
    assert data.train.sum() == 32 and (~data.train).sum() == 8 and list(rows[-8:]) == [16, 16, 17, 17, 18, 19, 19, 19]
    for seed in range(4):
        drawn = probing.draw(data, rows, 5, seed)
        assert list(drawn.labels[~drawn.train]) == ["O", "X", "O", "O", "X", "O", "O", "O"]
        np.testing.assert_array_equal(drawn.depths[1][~drawn.train], data.depths[1][~data.train])
        sentences = np.random.default_rng(seed).choice(16, 5, replace=False)  # the pool's sentences, by seed
        assert drawn.train.sum() == sum(len(words[index]) for index in sentences)


def test_a_probe_reads_tagged_words_and_single_labelled_texts_not_pairs():
    def task(examples, pairs=False):
        return TaskData("toy", "kind", ("a", "b"), pairs, {"train": examples, "dev": [], "test": examples}, "toy")

    assert probing.readable(task([{"words": ["the", "king"], "tags": ["O", "X"]}]))
    assert probing.readable(task([{"text": "the king", "label": "a"}]))
    assert not probing.readable(task([{"text": "the king", "text_pair": "a sea", "label": "a"}], pairs=True))
    assert not probing.readable(task([{"text": "the king", "target": "a sea"}]))  # text to text
    assert not probing.readable(task([]))
    with pytest.raises(ValueError, match="a probe reads tagged words"):
        probing.task_probe_data(None, None, None, 8, task([{"text": "x", "target": "y"}]), 4, 4)


def test_a_control_is_the_architecture_with_weights_drawn_by_its_seed():
    backbone = _bert()
    first, again, other = (probing.random_control(backbone, seed) for seed in (1, 1, 2))
    assert first.get_config() == backbone.get_config()
    for mine, same, different, trained in zip(first.weights, again.weights, other.weights, backbone.weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(same))
        if np.asarray(mine).std() > 0:  # drawn, not a constant initialiser (biases, layer norms)
            assert not np.allclose(mine, different) and not np.allclose(mine, trained)
