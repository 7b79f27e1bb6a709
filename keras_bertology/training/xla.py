"""`--xla auto`: XLA-compiled train steps wherever Keras can compile them for one device.

Keras leaves XLA off on TensorFlow when a machine has only CPUs. Measured on
2 CPU cores (`python -m benchmarks.peer_suite --systems ours ours_no_xla`), XLA
made a pretraining step of BERT 1.25x, RoBERTa 1.23x and ALBERT 1.05x
faster: it fuses the element-wise work around the matmuls (GELU, layer norms,
dropout, the softmax and the AdamW update) that TensorFlow otherwise runs op
by op. So auto compiles with XLA on TensorFlow whenever the run trains on one
device (Keras does not compile under a tf.distribute strategy); on JAX every
step is compiled, as Keras does there.
"""

import keras


def resolve_jit_compile(xla):
    """The `jit_compile` of a run for `--xla`: call it inside the run's strategy scope."""
    if xla != "auto":
        return xla == "on"
    if keras.config.backend() != "tensorflow":
        return True
    import tensorflow as tf  # only here: the JAX backend may run where TensorFlow is not installed

    return not tf.distribute.has_strategy()
