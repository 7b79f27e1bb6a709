"""`--xla auto`: XLA-compiled train steps wherever they are faster and Keras can compile them.

Keras leaves XLA off on TensorFlow when a machine has only CPUs. Measured on
2 CPU cores (`python -m benchmarks.peer_suite --systems ours ours_no_xla`), in
float32 XLA made a pretraining step of BERT 1.25x, RoBERTa 1.23x and ALBERT
1.05x faster: it fuses the element-wise work around the matmuls (GELU, layer
norms, dropout, the softmax and the AdamW update) that TensorFlow otherwise
runs op by op. In mixed_bfloat16 on a CPU it made them slower (BERT 0.88x,
ALBERT 0.81x on an AMD EPYC with AVX512-BF16): XLA's CPU backend computes the
bf16 matmuls less well than oneDNN's kernels, which TensorFlow's own ops call.
So auto compiles with XLA on TensorFlow when the run trains on one device
(Keras does not compile under a tf.distribute strategy), except in bfloat16
on a machine without an accelerator; on JAX every step is compiled,
as Keras does there. A family whose TensorFlow step XLA cannot compile
(`TrainingDefaults.xla_compiles`: ELMo's recurrent loops) trains uncompiled on
TensorFlow, and `--xla on` is refused for it there.
"""

import keras

from keras_bertology.errors import ConfigError


def resolve_jit_compile(xla, precision="float32", xla_compiles=True):
    """The `jit_compile` of a run for `--xla`, the run's resolved precision and its family's
    `xla_compiles`: call it inside the run's strategy scope."""
    if not xla_compiles and keras.config.backend() == "tensorflow":
        if xla == "on":
            raise ConfigError("--xla on: XLA cannot compile this family's training step on TensorFlow (its "
                              "recurrent loop is unbounded there); use --xla auto or off, or --backend jax")
        return False
    if xla != "auto":
        return xla == "on"
    if keras.config.backend() != "tensorflow":
        return True
    import tensorflow as tf  # only here: the JAX backend may run where TensorFlow is not installed

    if tf.distribute.has_strategy():
        return False
    accelerated = bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
    return accelerated or precision == "float32"
