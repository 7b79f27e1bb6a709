"""Every family with `--loss-chunk-size` trains with its loss in chunks as with all the logits at once.

For each family that declares the option (GPT's causal LM; the masked LM of BERT, RoBERTa, ERNIE, Linformer,
ModernBERT, BigBird, ALBERT and DeBERTa; SpanBERT's masked LM and span boundary objective; the generators
of ELECTRA and DeBERTa-v3; XLNet's permutation LM), two pretrainers from the same initial weights take the same steps on the peer suite's
batch: one scores its logits with Keras' cross-entropy, the other scores its targets itself a few positions
at a time (`layers.vocabulary_scores`). Their logged losses and metrics agree to 1e-6 at every step and
their weights after the steps to 1e-6, with and without XLA; the chunked one keeps its setting through a
`.keras` archive and serves the plain one's logits. Both backends: CI runs BERT's and GPT's on JAX (JAX_TESTS in
the Makefile), `make test-all` every family's (JAX_EXTENDED_TESTS).
"""

import keras
import numpy as np
import pytest

from keras_bertology.models.registry import FAMILIES
from tiny_steps import tiny_pretrainer

CHUNKED = sorted(name for name, family in FAMILIES.items()
                 if any(option.name == "loss_chunk_size" for option in family.options))
STEPS, RATE = 3, 0.5
# ERNIE's, Linformer's and BigBird's pretrainers are BERT's and RoBERTa's, DeBERTa's wires its head as ALBERT's does
# (masked_lm_output), DeBERTa-v3's generator is ELECTRA's
# (`GeneratorDiscriminator`): repeats, run by `make test-all`. RoBERTa's stays: its __init__ rewrites the keyword
# arguments it hands to BERT's (a dropped loss_chunk_size there passed every other test).
REPEATS = {"bigbird", "deberta", "deberta-v3", "ernie", "linformer"}
# With XLA: TensorFlow differentiates the loop over chunks only when it is bounded (JAX always compiles). That
# loop is `scores_in_chunks`, the same for every head: CI runs it compiled in GPT's case, BERT's head compiled in
# the JAX stage and without XLA above; BERT's case with XLA is `make test-all`'s.
CASES = [pytest.param(name, False, marks=[pytest.mark.extended] if name in REPEATS else [])
         for name in CHUNKED] + [pytest.param("gpt", True), pytest.param("bert", True, marks=pytest.mark.extended)]


def _trained(family, loss_chunk_size, jit_compile):
    options = {"loss_chunk_size": loss_chunk_size} if loss_chunk_size else None
    model, (x, y, weights) = tiny_pretrainer(family, options=options)
    # A generator-discriminator's loss weighs detection 50 (ELECTRA) or 10 (DeBERTa-v3) times: the rate is cut
    # as much, or the steps diverge (JAX).
    model.compile(optimizer=keras.optimizers.SGD(RATE / getattr(model, "rtd_weight", 1.0)), jit_compile=jit_compile)
    logs = [model.train_on_batch(x, y, weights, return_dict=True) for _ in range(STEPS)]
    return model, logs, x


def _served_logits(model, x):
    """What the model serves of its language model, None where it serves none (ELECTRA's generator)."""
    served = model.causal_lm_model() or model.masked_lm_model()
    return None if served is None else served.predict({name: x[name] for name in served.input}, verbose=0)


def test_the_families_with_language_models_over_a_vocabulary_offer_it():
    assert {"gpt", "bert", "roberta", "modernbert", "albert", "bigbird", "spanbert", "deberta", "electra",
            "deberta-v3", "xlnet"} <= set(CHUNKED)


@pytest.mark.parametrize("name,jit_compile", CASES)
def test_training_with_the_loss_in_chunks_equals_training_on_all_the_logits(name, jit_compile, tmp_path):
    if jit_compile and keras.backend.backend() == "jax":
        pytest.skip("JAX compiles every step: the case without XLA is the same")
    family = FAMILIES[name]
    plain, plain_logs, x = _trained(family, 0, jit_compile)
    chunked, chunked_logs, chunked_x = _trained(family, 5, jit_compile)
    # The targets are inputs of the chunked model (ELECTRA's generator had them as inputs already).
    targets = {objective.label_key for objective in chunked.declared_objectives if objective.predicts_tokens}
    assert targets <= set(chunked.input) and set(chunked.input) - set(plain.input) <= targets
    # Every objective over the vocabulary holds scores ([B, P, 2]: cross-entropy, arg-max hit), no logits.
    assert {objective.name: chunked.output[objective.name].shape[-1] for objective in chunked.declared_objectives
            if objective.predicts_tokens} == {objective.name: 2 for objective in chunked.declared_objectives
                                              if objective.predicts_tokens}
    assert plain_logs[-1]["loss"] < plain_logs[0]["loss"]  # the steps moved the weights
    for theirs, ours in zip(plain_logs, chunked_logs, strict=True):
        assert sorted(ours) == sorted(theirs)
        for metric in theirs:
            assert ours[metric] == pytest.approx(theirs[metric], rel=1e-6, abs=1e-6), metric
    for theirs, ours in zip(plain.weights, chunked.weights, strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs),
                                   rtol=1e-6, atol=1e-6, err_msg=ours.path)
    if jit_compile:
        return  # the archive and the served logits do not depend on how the steps compiled
    path = tmp_path / "pretrainer.keras"
    chunked.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.loss_chunk_size == 5
    scores = [objective.name for objective in chunked.declared_objectives if objective.predicts_tokens]
    ours, theirs = chunked.predict(chunked_x, verbose=0), reloaded.predict(chunked_x, verbose=0)
    for name in scores:  # the reloaded model scores as the one it was saved from
        np.testing.assert_allclose(theirs[name], ours[name], rtol=1e-6, atol=1e-6, err_msg=name)
    expected = _served_logits(plain, x)
    for model in (chunked, reloaded):
        served = _served_logits(model, x)
        if expected is None:
            assert served is None
        else:
            np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)


def test_the_head_scores_targets_only_with_a_chunk_size():
    from keras_bertology.layers import MaskedLMHead

    head = MaskedLMHead(vocab_size=50)
    hidden, positions = keras.ops.ones((2, 8, 16)), keras.ops.zeros((2, 3), "int32")
    with pytest.raises(ValueError, match="only with a loss_chunk_size"):
        head(hidden, positions, keras.ops.zeros((2, 3), "int32"))
    assert tuple(MaskedLMHead(vocab_size=50, loss_chunk_size=4)(hidden, positions, positions).shape) == (2, 3, 2)
