"""GPT trained with its loss in chunks of positions (`--loss-chunk-size`) trains as with all the logits at once.

Two pretrainers from the same initial weights take the same steps: one scores its logits with Keras'
cross-entropy, the other scores its targets itself a few positions at a time. Their logged loss, accuracy
and perplexity agree to 1e-6 at every step and their weights after the steps to 1e-6; the chunked one
keeps its setting through a `.keras` archive and serves the plain one's logits. Both backends (JAX_TESTS).
"""

import keras
import numpy as np
import pytest

from keras_bertology.models.gpt import GPT, GPTBackbone, GPTPretrainer

VOCAB = 311
RNG = np.random.default_rng(0)
FEATURES = {"token_ids": RNG.integers(0, VOCAB, (4, 12)).astype("int32"),
            "padding_mask": np.ones((4, 12), "int32"),
            "next_token_ids": RNG.integers(0, VOCAB, (4, 12)).astype("int32"),
            "next_token_weights": (RNG.random((4, 12)) > 0.2).astype("float32")}
# The copy task: the target of every position its own token, which a few large steps learn in part.
FEATURES["next_token_ids"] = FEATURES["token_ids"]


def _pretrainer(loss_chunk_size, jit_compile=False):
    keras.utils.set_random_seed(0)
    backbone = GPTBackbone(vocab_size=VOCAB, num_layers=2, num_heads=2, hidden_size=16, intermediate_size=32,
                           max_positions=16, dropout=0.0)
    model = GPTPretrainer(backbone, loss_chunk_size=loss_chunk_size)
    model.compile(optimizer=keras.optimizers.SGD(2.0), jit_compile=jit_compile)
    return model


def _train(model, steps=4):
    x, y, weights = model.split_features(FEATURES)
    return [model.train_on_batch(x, y, weights, return_dict=True) for _ in range(steps)]


# With XLA, TensorFlow differentiates the loop over chunks only when it is bounded.
@pytest.mark.parametrize("jit_compile", [False, True])
def test_training_with_the_loss_in_chunks_equals_training_on_all_the_logits(tmp_path, jit_compile):
    plain, chunked = _pretrainer(0, jit_compile), _pretrainer(5, jit_compile)
    assert "next_token_ids" in chunked.input and "next_token_ids" not in plain.input
    plain_logs, chunked_logs = _train(plain), _train(chunked)
    assert plain_logs[-1]["clm_accuracy"] > 0.1  # the check of the arg-max compares something
    for theirs, ours in zip(plain_logs, chunked_logs, strict=True):
        assert sorted(ours) == sorted(theirs) == ["clm_accuracy", "clm_loss", "clm_perplexity", "loss"]
        for name in theirs:
            assert ours[name] == pytest.approx(theirs[name], rel=1e-6, abs=1e-6), name
    for theirs, ours in zip(plain.weights, chunked.weights, strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs),
                                   rtol=1e-6, atol=1e-6, err_msg=ours.path)

    path = tmp_path / "pretrainer.keras"
    chunked.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.loss_chunk_size == 5
    inputs = {name: FEATURES[name] for name in plain.backbone.input}
    expected = plain.causal_lm_model().predict(inputs, verbose=0)
    for model in (chunked, reloaded):
        np.testing.assert_allclose(model.causal_lm_model().predict(inputs, verbose=0), expected, rtol=1e-5,
                                   atol=1e-5)


def test_the_chunk_size_is_a_gpt_option_with_a_range():
    (option,) = [option for option in GPT.options if option.name == "loss_chunk_size"]
    assert option.flag == "--loss-chunk-size" and option.default == 0 and option.minimum == 0
    assert GPT.build_pretrainer(_pretrainer(0).backbone, {"loss_chunk_size": 64}).loss_chunk_size == 64
