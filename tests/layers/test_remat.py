"""`--remat`: recomputing each block's activations in the backward pass leaves the step's gradients as they were.

The steps run with dropout 0.2 everywhere: a recomputed block must drop in its
second pass what it dropped in its first, or its gradients are another step's.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_bertology.layers import TransformerEncoderBlock
from keras_bertology.layers import remat as remat_module
from keras_bertology.layers.remat import set_remat
from keras_bertology.models.registry import FAMILIES
from tiny_steps import tiny_pretrainer


def _step(pretrainer, batch, remat, jit_compile):
    """(logs, change of every trainable weight) of one SGD step at rate 1 (the change is minus the gradient),
    and how many blocks the step recomputed; the pretrainer's weights and seeds are put back after. The plain
    step without XLA runs its ops eagerly (no graph to trace): the recomputed step is traced, as runs train."""
    variables = pretrainer.variables  # the weights and the seed generators' states
    before = [ops.convert_to_numpy(variable) for variable in variables]
    set_remat(pretrainer, remat)
    recomputed = []
    original = remat_module.keras.remat

    def counting(function):
        recomputed.append(function)
        return original(function)

    remat_module.keras.remat = counting
    try:
        pretrainer.compile(optimizer=keras.optimizers.SGD(1.0), jit_compile=jit_compile,
                           run_eagerly=not (remat or jit_compile))
        logs = pretrainer.train_on_batch(*batch, return_dict=True)
    finally:
        remat_module.keras.remat = original
    trainable = {id(variable) for variable in pretrainer.trainable_variables}
    changes = [ops.convert_to_numpy(variable) - value for variable, value in zip(variables, before)
               if id(variable) in trainable]
    for variable, value in zip(variables, before):
        variable.assign(value)
    return logs, changes, len(recomputed)


def _assert_same_step(name, jit_compile=False):
    # On JAX both steps compile, as runs there do (`--xla auto`): JAX's op-by-op eager mode lowers every op
    # of ELMo's LSTM loops on its own (33 s for this case, against seconds compiled).
    jit_compile = jit_compile or keras.config.backend() == "jax"
    family = FAMILIES[name]
    pretrainer, batch = tiny_pretrainer(family, dropout=0.2)
    plain_logs, plain, plain_recomputed = _step(pretrainer, batch, False, jit_compile)
    remat_logs, recomputed, blocks = _step(pretrainer, batch, True, jit_compile)
    assert plain_recomputed == 0 and blocks > 0
    assert remat_logs == pytest.approx(plain_logs, rel=1e-5, abs=1e-6)
    assert len(plain) == len(recomputed) and any(np.abs(change).max() > 0 for change in plain)
    for index, (expected, got) in enumerate(zip(plain, recomputed)):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-6, err_msg=f"weight {index}")


# Their recomputed steps run in `make test-all`: RoBERTa's, ERNIE's and SpanBERT's blocks are BERT's
# (BertBackbone's TransformerEncoderBlock, another activation or head around them); so are DistilBERT's
# student's (its teacher runs without training, where no block recomputes) and BigBird's at these 32 tokens
# (block-sparse only beyond 144: below, BERT's dense attention); ELECTRA's pair is BERT's blocks in the
# generator-discriminator wrapper that [deberta-v3] recomputes on DeBERTa's blocks.
BERT_BLOCK_REPEATS = ("bigbird", "distilbert", "electra", "ernie", "roberta", "spanbert")


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.extended] * (name in BERT_BLOCK_REPEATS))
                                  for name in sorted(FAMILIES)])
def test_a_recomputed_step_has_the_plain_steps_gradients(name):
    _assert_same_step(name)


def test_a_recomputed_step_compiled_by_xla_has_the_plain_steps_gradients():
    """TensorFlow's recompute_grad keeps XLA from merging the second pass into the first: same numbers."""
    _assert_same_step("bert", jit_compile=True)


def test_a_block_draws_the_same_masks_whether_recomputed_or_not():
    """Dropout inside a block takes the block's seed: recomputation and the plain call drop the same
    elements, and a second call draws new ones."""
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=16, dropout=0.5, attention_dropout=0.5)
    x = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
    block(x)
    state = ops.convert_to_numpy(block.block_seed_generator.state)
    plain = ops.convert_to_numpy(block(x, training=True))
    second = ops.convert_to_numpy(block(x, training=True))
    block.block_seed_generator.state.assign(state)
    set_remat(block)
    np.testing.assert_allclose(ops.convert_to_numpy(block(x, training=True)), plain, rtol=1e-6)
    assert not np.allclose(plain, second)
    np.testing.assert_allclose(ops.convert_to_numpy(block(x)), ops.convert_to_numpy(block(x)))


def test_set_remat_reaches_every_block_of_a_model():
    family = FAMILIES["xlnet"]
    pretrainer, _ = tiny_pretrainer(family, num_layers=2)
    # XLNet's two layers, each a two-stream block around one encoder block.
    assert set_remat(pretrainer) == 2
    assert set_remat(pretrainer, False) == 2


def test_the_long_sequence_benchmark_reports_how_much_longer_remat_trains_in_the_same_memory():
    from benchmarks.bench_long_sequences import remat_reach

    def rows(memories):
        return {str(n): ({"error": "out of memory"} if mib is None else {"step_memory_mib": mib})
                for n, mib in zip((512, 1024, 2048), memories)}

    reach = remat_reach({"ours_full": rows((600, 900, None)), "ours_full_remat": rows((500, 590, 820))},
                        [512, 1024, 2048])
    assert [(row["length"], row["remat_length"], row["ratio"]) for row in reach] == [(512, 1024, 2.0),
                                                                                     (1024, 2048, 2.0)]
