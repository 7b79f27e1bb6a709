"""`--xla`: train steps compiled with XLA on one device compute the same step as TensorFlow's own ops."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bertology.errors import ConfigError
from keras_bertology.models.registry import FAMILIES
from keras_bertology.engine.xla import resolve_jit_compile
from tiny_steps import tiny_pretrainer

# Two steps: the first compares the compiled loss of the same weights, the second that of the weights the compiled
# update wrote (AdamW's moments included); a third step repeats the second's ops.
STEPS = 2
# ELECTRA and DeBERTa-v3 sample their replacements: the discriminator sees other tokens under XLA's random numbers.
SAMPLES = {"electra", "deberta-v3"}


def test_auto_compiles_on_one_device_and_leaves_strategies_alone():
    assert resolve_jit_compile("auto") is True
    assert resolve_jit_compile("on") is True and resolve_jit_compile("off") is False
    # bfloat16 on a CPU: oneDNN's matmuls beat XLA's (benchmarks: 0.81-0.88x with XLA).
    assert resolve_jit_compile("auto", "mixed_bfloat16") is False
    assert resolve_jit_compile("on", "mixed_bfloat16") is True
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        assert resolve_jit_compile("auto") is False
        assert resolve_jit_compile("on") is True


def test_a_step_xla_cannot_compile_trains_uncompiled_and_on_is_refused():
    """ELMo's recurrent loops: Keras' scan leaves TensorFlow's loop unbounded, and XLA compiles no such gradient."""
    assert resolve_jit_compile("auto", "float32", xla_compiles=False) is False
    assert resolve_jit_compile("off", "float32", xla_compiles=False) is False
    with pytest.raises(ConfigError, match="--xla on"):
        resolve_jit_compile("on", "float32", xla_compiles=False)


def _train(name, jit_compile):
    """Per-step logs of `STEPS` steps of the family's tiny pretrainer (no dropout, the same weights); without
    XLA the step runs TensorFlow's ops eagerly, one by one (the same kernels a graph runs, without tracing one)."""
    pretrainer, batch = tiny_pretrainer(FAMILIES[name])
    pretrainer.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=jit_compile, run_eagerly=not jit_compile)
    return [pretrainer.train_on_batch(*batch, return_dict=True) for _ in range(STEPS)]


# Not DistilBERT, whose step is a distillation only beside a teacher: test_distilbert.py compiles that one.
# Not BigBird, whose step at this length is BERT's masked LM with full attention, nor Linformer's (RoBERTa's
# with low-rank attention): test_bigbird.py and test_linformer.py compile their attentions' steps; nor RoBERTa, whose pretrainer is BERT's masked LM without NSP on the same encoder, nor SpanBERT, whose span
# boundary head adds gathers, dense layers and layer norms that BERT's and ELECTRA's steps compile too (its
# spans are drawn in tf.data, outside the step).
# Nor ERNIE, whose step is BERT's (MLM + NSP; its knowledge masking is in tf.data), nor ELMo, whose LSTMs' step
# XLA cannot compile (test_elmo.py: --xla on is refused for it).
# ALBERT's step compiles BERT's ops on weights shared across layers, DeBERTa-v3's ELECTRA's generator and
# discriminator on DeBERTa's attention (both compiled here by their own families): `make test-all` only.
COMPILED_STEPS = [pytest.param(name, marks=pytest.mark.extended) if name in ("albert", "deberta-v3") else name
                  for name in sorted(set(FAMILIES) - {"bigbird", "distilbert", "elmo", "ernie", "linformer",
                                                      "roberta", "spanbert"})]


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILED_STEPS)
def test_every_family_trains_the_same_steps_with_xla(name):
    compiled, plain = _train(name, True), _train(name, False)
    for step, (with_xla, without) in enumerate(zip(compiled, plain)):
        assert set(with_xla) == set(without)
        assert all(np.isfinite(value) for value in with_xla.values()), with_xla
        if name not in SAMPLES:
            assert with_xla == pytest.approx(without, rel=1e-4, abs=1e-5), step
    if name in SAMPLES:  # the generator's loss does not depend on the sampling: the first step's agrees
        generator = [key for key in compiled[0] if key.startswith(("mlm", "generator")) and "loss" in key]
        assert generator and all(compiled[0][key] == pytest.approx(plain[0][key], rel=1e-5) for key in generator)
